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
port session hosts hold their shards of open turns by), R19 and issue 30
(``check_heads``, ``advance_digest``: the journal signs and checks heads),
R3 and issue 29 item 3 (``seal_event``: the journal seals each event once),
issue 29 item 1 (``append_with_events``: a journal hands its events over).
"""

from ._chain import hash_bytes, seal, seal_event, stored_encoding
from ._checkpoint import binding_mac, pause_content_digest, pause_mac
from ._codec import (
    canonical_json,
    compact_json,
    decode_msgpack,
    digest,
    encode_msgpack,
)
from ._decision_events import fact_for
from ._lease import LeaseStore
from ._session_state import sign_checkpoint
from ._signed_heads import DIGEST_START, SIGN_AFTER, check_heads
from ._signed_heads import advance as advance_digest
from ._store import append_with_events
from ._taker import RecordTaker

__all__ = [
    "DIGEST_START",
    "SIGN_AFTER",
    "LeaseStore",
    "RecordTaker",
    "advance_digest",
    "append_with_events",
    "binding_mac",
    "canonical_json",
    "check_heads",
    "compact_json",
    "decode_msgpack",
    "digest",
    "encode_msgpack",
    "fact_for",
    "hash_bytes",
    "pause_content_digest",
    "pause_mac",
    "seal",
    "seal_event",
    "sign_checkpoint",
    "stored_encoding",
]
