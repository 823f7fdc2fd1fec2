"""The ids a run mints: a session id and a trace context, in their formats.

Laws: issue 8 item 8 (a minted ``traceparent`` is valid W3C trace context);
the session id keeps ``uuid.uuid4().hex``'s format; issue 29 item 3 (both are
minted per turn without building a ``UUID`` or reading random bytes twice).
"""

from __future__ import annotations

import re
import uuid

from helmlog.runtime._builder import uuid_ids
from helmlog.runtime._trace import random_traceparent, valid_traceparent

_HEX32 = re.compile(r"[0-9a-f]{32}")
_TRACEPARENT = re.compile(r"00-[0-9a-f]{32}-[0-9a-f]{16}-01")


def test_a_session_id_is_a_version_4_uuid_as_32_hex_digits() -> None:
    ids = {uuid_ids() for _ in range(2_000)}
    assert len(ids) == 2_000
    for sid in ids:
        assert _HEX32.fullmatch(sid)
        parsed = uuid.UUID(hex=sid)
        assert parsed.version == 4
        assert parsed.variant == uuid.RFC_4122
        assert parsed.hex == sid


def test_a_minted_traceparent_is_sampled_valid_w3c_with_fresh_ids() -> None:
    minted = [random_traceparent() for _ in range(2_000)]
    for value in minted:
        assert _TRACEPARENT.fullmatch(value)
        assert valid_traceparent(value)
    assert len({value.split("-")[1] for value in minted}) == 2_000
    assert len({value.split("-")[2] for value in minted}) == 2_000
