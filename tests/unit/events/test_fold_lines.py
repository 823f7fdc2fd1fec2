"""R1/G36: conversation checkpoints kept as lines fold to the histories they held.

The folder keeps each accepted checkpoint as its base checkpoint plus the
messages its turn added, instead of a copy of the whole history. A property
test checks it against a reference that copies: over random sessions whose
turns continue from any earlier checkpoint (or none), and that may be seeded,
every checkpoint's history, the live history and the last checkpoint agree,
also after turns that never ended.
"""

from __future__ import annotations

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from helmlog.events import (
    ConversationSeeded,
    Event,
    Folder,
    Message,
    MessageCommitted,
    TurnEnded,
    TurnStarted,
)

# One step: ("turn", which earlier checkpoint to continue from, messages),
# ("abandon", ...) for a turn that never ends, or ("seed", messages). A base
# index past the checkpoints so far means "none".
steps = st.lists(
    st.one_of(
        st.tuples(st.just("turn"), st.integers(0, 8), st.integers(0, 3)),
        st.tuples(st.just("abandon"), st.integers(0, 8), st.integers(1, 3)),
        st.tuples(st.just("seed"), st.just(0), st.integers(0, 3)),
    ),
    min_size=1,
    max_size=25,
)


@settings(max_examples=300, deadline=None)
@given(steps)
def test_r1_checkpoint_lines_fold_to_the_histories_they_held(
    program: list[tuple[str, int, int]],
) -> None:
    """R1/G36: history_at(seq), the live history and the checkpoint match a copy."""
    folder = Folder("s")
    copies: dict[int, tuple[Message, ...]] = {}
    live: list[Message] = []
    seq = 0
    last: int | None = None

    def apply(event: Event) -> int:
        nonlocal seq
        seq += 1
        folder.apply(msgspec.structs.replace(event, seq=seq))
        return seq

    for number, (kind, pick, count) in enumerate(program):
        texts = [f"m{number}.{i}" for i in range(count)]
        if kind == "seed":
            history = tuple(Message(role="user", content=t) for t in texts)
            at = apply(ConversationSeeded(history=history, original_input="seed"))
            live = list(history)
            copies[at] = history
            last = at
            continue
        known = sorted(copies)
        base = known[pick] if pick < len(known) else 0
        apply(TurnStarted(turn=number + 1, base_seq=base))
        live = list(copies.get(base, ()))
        for text in texts:
            message = Message(role="assistant", content=text)
            apply(MessageCommitted(message=message))
            live.append(message)
        assert live == folder.history
        if kind == "abandon":
            continue  # the turn failed: it accepted no checkpoint
        at = apply(TurnEnded(turn=number + 1, final_content=""))
        copies[at] = tuple(live)
        last = at
    held = {s: folder.history_at(s) for s in copies}
    assert copies == {s: h[0] for s, h in held.items() if h is not None}
    checkpoint = folder.checkpoint
    assert (last, copies[last] if last else None) == (
        (checkpoint.seq, checkpoint.history) if checkpoint else (None, None)
    )
    assert frozenset(copies) == folder.state().conversation_seqs
