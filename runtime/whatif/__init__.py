"""What-if: re-judge recorded sessions under another agent's rules.

Pattern: a private subpackage of the runtime, one concept in five modules:
         the record read as decision points (``_record.py``), the re-judging
         replay (``_whatif.py``, ``WhatIf``), the verdict words and flips
         (``_verdicts.py``), the reports (``_report.py``) and the entry over
         verified records or a store (``_sessions.py``).
Role:    runtime layer; its public names are re-exported by
         ``helmlog.runtime`` (reports) and ``helmlog.runtime.lowlevel``
         (``WhatIf``, ``whatif``, ``whatif_store``, ``sessions_since``);
         the face re-exports ``whatif`` as ``helmlog.whatif``.

Laws: issue 13 (unchanged, flipped or not re-judgeable; the divergence point).
Why ``whatif`` is not in ``helmlog.runtime``: there the name is this
subpackage's, and a function bound over it would shadow it.
"""
