"""helmlog.examples — agents shipped in the wheel, ready to serve.

Pattern: each module exposes an ``--agent`` factory (``module:function``
         taking the store the command opens), as a user's own module would.
Role:    the face; the image's default command serves ``desk`` (``helmlog
         serve --agent helmlog.examples.desk:desk``), so a fresh image starts
         with no layer of the user's own.

Why in the wheel and not in ``examples/``: the image installs the wheel only;
an example that is not installed cannot be its default command.
"""
