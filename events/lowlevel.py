"""helmlog.events.lowlevel — what the library's own upper layers build on.

Pattern: a public low-level namespace (trio's ``trio.lowlevel``), as
         ``helmlog.runtime.lowlevel`` is for the kernel: named and pinned so
         that no other layer reaches into a private module of ``events``.
Role:    events layer; imported by ``runtime`` (its listeners) and ``sinks``
         (``OtelProcess``). Not for agent code: ``helmlog`` does not export
         these names, and a watcher given to ``.watch()`` needs none of them.
Emits:   nothing.

Laws: G95 (``RecordTaker``: taking stored records is an internal, explicit
opt-in; every other watcher hears facts), R27 (``LeaseStore``: the lease
port session hosts hold their shards of open turns by).
"""

from ._lease import LeaseStore
from ._taker import RecordTaker

__all__ = ["LeaseStore", "RecordTaker"]
