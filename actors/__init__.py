"""helmlog.actors — the Ray layer: session hosts, tool executors, policy actors.

Composes ``runtime`` + ``events`` + ``sinks`` (ARCHITECTURE.md). Nothing is
exported yet: ``SessionHost``, ``ToolExecutor``, ``PolicyActor`` and the
``Cluster`` client (R8, R17) land with their own issue. Until then a session
runs in process (``helmlog.runtime``) on any event store, and another process
can activate and resume it from the stream.
"""

__all__: list[str] = []
