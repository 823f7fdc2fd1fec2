"""Pause, checkpoint and resume: a run that waits on a person, and its answer.

Pattern: a private subpackage of the runtime, one concept in five modules:
         what a paused run returns and a person decides (``_pause.py``), the
         record of a pause and its signed checkpoint (``_record.py``), the
         checks binding a checkpoint to a stream (``_bindings.py``), the
         resume path (``_resume.py``) and a person's decision on a pending
         ask, for the CLI and the HTTP API (``_decide.py``).
Role:    runtime layer; public names are re-exported by ``helmlog.runtime``
         and ``helmlog.runtime.lowlevel``.

Laws: G59–G70 (pause and resume), R9 (checkpoints), R14, R19, R20, R25.
"""
