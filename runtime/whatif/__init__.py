"""What-if: re-judge recorded sessions under another agent's rules.

Pattern: a private subpackage of the runtime, one concept in four modules:
         the record read as decision points (``_record.py``), the re-judging
         replay (``_whatif.py``, ``WhatIf``), the verdict words and flips
         (``_verdicts.py``) and the reports (``_report.py``).
Role:    runtime layer; its public names are re-exported by
         ``helmlog.runtime`` (reports) and ``helmlog.runtime.lowlevel``
         (``WhatIf``); ``helmlog.whatif`` and ``helmlog whatif`` use them.

Laws: issue 13 (unchanged, flipped or not re-judgeable; the divergence point).
"""
