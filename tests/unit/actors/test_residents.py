"""R21: a host keeps a bounded table of sessions, never dropping a busy one (no Ray).

``Residents`` is the host's table; these tests drive it with real in-process
agents on the in-memory store, as ``SessionHost`` builds them.
"""

from __future__ import annotations

from helmlog import Agent
from helmlog.actors._residents import Residents
from helmlog.events import MemoryEventStore
from helmlog.runtime.providers import scripted


def _residents(*, max_resident: int = 2, idle_s: float = 600.0) -> Residents:
    store = MemoryEventStore()

    def build() -> Agent:
        return Agent.create(provider=scripted(["ok"]), model="m", store=store)

    return Residents(build, max_resident=max_resident, idle_s=idle_s)


def test_r21_the_least_recently_used_idle_session_goes_above_the_bound() -> None:
    """R21: a third session over a bound of two drops the least recently used."""
    table = _residents(max_resident=2)
    for sid in ("a", "b"):
        table.release(table.hold(sid))
    table.release(table.hold("a"))  # "a" is now the most recently used
    table.release(table.hold("c"))
    assert (["a", "c"], 1) == (table.ids(), table.evicted)


def test_r21_a_busy_session_is_never_dropped_and_the_excess_goes_on_release() -> None:
    """R21: over the bound with every session busy, all stay until one is released."""
    table = _residents(max_resident=1)
    held_a = table.hold("a")
    held_b = table.hold("b")
    assert (["a", "b"], 2, True) == (table.ids(), table.busy_count(), table.busy("b"))
    table.release(held_a)
    assert (["b"], 1) == (table.ids(), table.evicted)
    table.release(held_b)
    assert (["b"], False) == (table.ids(), table.busy("b"))


def test_r21_an_idle_sweep_drops_idle_sessions_and_keeps_busy_ones() -> None:
    """R21: ``evict_idle(0)`` drops every idle session and none that is held."""
    table = _residents(max_resident=10)
    table.release(table.hold("idle"))
    held = table.hold("busy")
    assert (1, ["busy"]) == (table.evict_idle(0), table.ids())
    table.release(held)
    assert (1, []) == (table.evict_idle(0), table.ids())


def test_r08_a_session_keeps_its_agent_while_it_stays_resident() -> None:
    """R8: each session has its own agent, and holding it again gives the same one."""
    table = _residents(max_resident=10)
    first = table.hold("a")
    table.release(first)
    other = table.hold("b")
    again = table.hold("a")
    assert (True, False) == (again.agent is first.agent, other.agent is first.agent)
