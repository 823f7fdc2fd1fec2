"""Benchmark sessions per core: many users, a model with a fixed latency.

Pattern: a load test, each case in its own process: N users, each an asyncio
         task running sessions back to back (TURNS_PER_SESSION turns of one
         tool call and the answer, two model calls of LATENCY_S), on helmlog's
         memory store, a real Redis, LangChain v1 and the OpenAI Agents SDK.
Role:    bench; ``uv run python bench/sessions.py`` (``--users 100,1000``,
         ``--seconds``, ``--cases``, ``--quick``; it starts ``redis-server``).
Emits:   a summary and one JSON line; the figures are defined in bench/README.md.

Laws: none new; issue 29's table and targets, measured in one run.

Why a process per case: a platform team runs one framework per server, so no
heap meets another framework's collector. Why CPU time: on a shared machine
the wall clock counts waits for a core. Sessions are each framework's own:
helmlog a session id, LangChain a ``thread_id``, the Agents SDK the caller's
``to_input_list()`` (tracing off: its exporter would go to the network).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import multiprocessing
import os
import statistics
import sys
import time
import traceback
import tracemalloc
from importlib.metadata import PackageNotFoundError, version
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import uvloop

from helmlog import Agent, ToolMiddleware, allow, tool
from helmlog.events import EventStore, MemoryEventStore
from helmlog.events.redis import RedisEventStore
from helmlog.runtime.lowlevel import settle_collector
from helmlog.runtime.providers import ProviderRequest, Reply, ToolCallRequest

LATENCY_S = 0.05  # each model call
TURNS_PER_SESSION = 3
ANSWER = "Done."
SLOW_GC_MS = 20.0
USERS = (100, 1_000, 5_000)
SECONDS = 10.0  # the measured window of one case in one repetition
WARM_CAP_S = 20.0  # the longest warm-up waits for every user's first turn
DRAIN_CAP_S = 20.0  # the longest a window's end waits for turns under way
REPETITIONS = 3
MEMORY_SESSIONS = 200  # sessions run under tracemalloc, per case
# Each case's event loop. uvloop is helmlog's own dependency, and the loop
# its servers run on: uvicorn's (``helmlog serve``) and Ray's async actors
# (a ``SessionHost``) both take it where it is installed. Every case runs on
# the same one, so the ratios compare frameworks, not loops.
LOOPS: dict[str, Any] = {"uvloop": uvloop.new_event_loop, "asyncio": None}
# Issue 29's targets, each a ratio or a per-core figure of one run.
TARGET_REDIS_VS_MEMORY_CPU = 1.15  # at 1,000 users
TARGET_REDIS_CPU_US = 300.0
TARGET_TAIL_MS = 30.0  # p99 - p50, at 100 and 1,000 users, both stores
TARGET_STORE_WAIT_MS = 5.0  # a Redis turn's p50 wait on its appends, 1,000 users
# One Redis turn in this many has its appends timed (the store's wait): the
# timing's own cost (a coroutine per append) is then a tenth in the CPU figure.
WAIT_SAMPLE = 10

CASES = ("helmlog_memory", "helmlog_redis", "langchain", "openai_agents")


# -- what is measured -----------------------------------------------------


class GcWatch:
    """Durations of the collector's passes, from ``gc.callbacks``: all of
    them, the young ones (generation 0) apart from the older ones (1 and 2),
    and the full ones (2) among those."""

    def __init__(self) -> None:
        self.pauses: list[float] = []
        self.young: list[float] = []
        self.older: list[float] = []
        self.full: list[float] = []
        self._started = 0.0

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        else:
            ms = (time.perf_counter() - self._started) * 1e3
            self.pauses.append(ms)
            (self.young if info["generation"] == 0 else self.older).append(ms)
            if info["generation"] == 2:
                self.full.append(ms)

    def figures(self) -> dict[str, float]:
        return {
            "gc_collections": len(self.pauses),
            "gc_max_ms": max(self.pauses, default=0.0),
            "gc_over_20ms": sum(p > SLOW_GC_MS for p in self.pauses),
            "gc_young_max_ms": max(self.young, default=0.0),
            "gc_older_collections": len(self.older),
            "gc_older_max_ms": max(self.older, default=0.0),
            "gc_full_collections": len(self.full),
            "gc_full_max_ms": max(self.full, default=0.0),
        }

    def __enter__(self) -> GcWatch:
        gc.callbacks.append(self)
        return self

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.remove(self)


def process_cpu_s(pid: int) -> float:
    """utime + stime of a process, from /proc/<pid>/stat, in seconds."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()
    # Fields 14 and 15 of proc(5); the split starts at field 3 (state).
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def percentile(sorted_ms: list[float], q: float) -> float:
    if not sorted_ms:
        return float("nan")
    return sorted_ms[min(len(sorted_ms) - 1, int(q * len(sorted_ms)))]


class Window:
    """What one case did in one measured window."""

    def __init__(self) -> None:
        self.open = False
        self.latencies: list[float] = []


class TimedRedisEventStore(RedisEventStore):
    """The Redis store, timing the appends of the sessions in ``waits``: the
    wall time a turn spends awaiting its appends (issue 29 item 1's "the
    store's p50 wait"), queueing for the flusher and the round trip
    included. The appends of other sessions go as they are."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.waits: dict[str, float] = {}

    def append_sealed(
        self,
        session_id: str,
        records: Any,
        expected_seq: int,
        *,
        events: Any = None,
    ) -> Any:
        append = super().append_sealed(session_id, records, expected_seq, events=events)
        if session_id not in self.waits:
            return append
        return self._timed(session_id, append)

    async def _timed(self, session_id: str, append: Any) -> int:
        started = time.perf_counter()
        try:
            seq: int = await append
            return seq
        finally:
            self.waits[session_id] += time.perf_counter() - started


# -- the cases ------------------------------------------------------------


class Case:
    """One framework's sessions: how a session starts and a turn runs."""

    name = ""

    def session(self, sid: str) -> Any:
        raise NotImplementedError

    async def turn(self, session: Any, text: str) -> None:
        raise NotImplementedError

    async def close(self) -> None:
        return None


class LatencyModel:
    """helmlog's model stub: a call for a user message, else the answer,
    each after LATENCY_S (the scripted provider answers at once and keeps a
    copy of every request, G89, which a server's provider would not)."""

    provider_name = "bench"

    async def call(self, request: ProviderRequest, on_token: Any = None) -> Reply:
        await asyncio.sleep(LATENCY_S)
        if request.messages[-1].role != "user":
            return Reply(content=ANSWER)
        n = len(request.messages)
        call = ToolCallRequest(id=f"c{n}", name="lookup", args={"order": n})
        return Reply(tool_calls=[call])


@tool(inline=True)
def lookup(order: int) -> dict[str, int]:
    """Look an order up."""
    return {"order": order, "status": 1}


def governed_links() -> list[ToolMiddleware]:
    """bench/turns.py's rules: three pass-throughs, one transform."""
    passes = [
        ToolMiddleware(name=f"pass-{i}", on_tool_call=lambda call: allow())
        for i in range(3)
    ]
    stamp = ToolMiddleware(
        name="stamp",
        on_tool_result=lambda res: allow({**res.result, "checked": True}, "stamped"),
    )
    return [*passes, stamp]


class Helmlog(Case):
    """A governed helmlog agent; a session is its session id."""

    def __init__(self, name: str, store: EventStore) -> None:
        self.name = name
        self.store = store
        # The store's wait of one turn in WAIT_SAMPLE while ``timing`` (the
        # windows: not the memory pass), in ms; Redis only.
        self.timing = False
        self.turn_waits: list[float] = []
        self._turns = 0
        self.agent = (
            Agent.create(provider=LatencyModel(), model="bench", store=store)
            .system("Look orders up.")
            .tool(lookup)
            .tool_middleware(*governed_links())
            .build()
        )

    def session(self, sid: str) -> Any:
        return sid

    async def turn(self, session: Any, text: str) -> None:
        timed = self.store if self.timing and self._turns % WAIT_SAMPLE == 0 else None
        self._turns += 1
        if isinstance(timed, TimedRedisEventStore):
            timed.waits[session] = 0.0
        try:
            out = await self.agent.run(text, session_id=session)
        finally:
            if isinstance(timed, TimedRedisEventStore):
                self.turn_waits.append(timed.waits.pop(session) * 1e3)
        if out != ANSWER:
            raise RuntimeError(f"{self.name}: unexpected answer {out!r}")

    async def close(self) -> None:
        close = getattr(self.store, "close", None)
        if close is not None:
            await close()


def langchain_case(latency_s: float = LATENCY_S) -> Case:
    """LangChain v1 ``create_agent``, a checkpointer, a latency fake model
    (``bench/turns.py`` takes it with no latency)."""
    from langchain.agents import create_agent
    from langchain_core.language_models.fake_chat_models import (
        FakeMessagesListChatModel,
    )
    from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
    from langchain_core.outputs import ChatGeneration, ChatResult
    from langchain_core.tools import tool as lc_tool
    from langgraph.checkpoint.memory import InMemorySaver

    @lc_tool
    async def lookup(order: int) -> dict[str, int]:
        """Look an order up."""
        return {"order": order, "status": 1}

    class LatencyChat(FakeMessagesListChatModel):
        """LangChain's list fake, answering from the request after the
        latency (its own ``sleep`` blocks a thread; this one awaits)."""

        def bind_tools(self, tools: Any, **kwargs: Any) -> LatencyChat:
            return self

        async def _agenerate(
            self, messages: list[BaseMessage], *args: Any, **kwargs: Any
        ) -> ChatResult:
            if latency_s:
                await asyncio.sleep(latency_s)
            if isinstance(messages[-1], HumanMessage):
                n = len(messages)
                reply: BaseMessage = AIMessage(
                    content="",
                    tool_calls=[
                        {"name": "lookup", "args": {"order": n}, "id": f"c{n}"}
                    ],
                )
            else:
                # A fresh message each time: LangChain stamps an id on the
                # object, and a thread's reducer replaces a message by id.
                reply = AIMessage(content=self.responses[0].content)
            return ChatResult(generations=[ChatGeneration(message=reply)])

    model = LatencyChat(responses=[AIMessage(content=ANSWER)])
    graph = create_agent(
        model, [lookup], system_prompt="Look orders up.", checkpointer=InMemorySaver()
    )

    class LangChain(Case):
        name = "langchain"

        def session(self, sid: str) -> Any:
            return {"configurable": {"thread_id": sid}}

        async def turn(self, session: Any, text: str) -> None:
            out = await graph.ainvoke({"messages": [HumanMessage(text)]}, session)
            if out["messages"][-1].content != ANSWER:
                raise RuntimeError(f"langchain: unexpected run {out['messages']}")

    return LangChain()


def openai_agents_case(latency_s: float = LATENCY_S) -> Case:
    """The Agents SDK's ``Runner.run``, a scripted ``Model`` with latency
    (``bench/turns.py`` takes it with no latency)."""
    from agents import Agent as SdkAgent
    from agents import ModelResponse, Runner, Usage, function_tool, set_tracing_disabled
    from agents.models.interface import Model
    from agents.testing import assistant_message, function_call

    set_tracing_disabled(True)

    @function_tool
    async def lookup(order: int) -> str:
        """Look an order up."""
        return json.dumps({"order": order, "status": 1})

    class LatencyModel(Model):
        """The SDK's ``Model`` interface, as its own tests' fake model: a call
        for a user message, the answer after a tool result."""

        async def get_response(
            self, system_instructions: Any, input: Any, *args: Any, **kwargs: Any
        ) -> ModelResponse:
            if latency_s:
                await asyncio.sleep(latency_s)
            last = input[-1] if isinstance(input, list) else {"role": "user"}
            if last.get("type") == "function_call_output":
                output = [assistant_message(ANSWER)]
            else:
                n = len(input) if isinstance(input, list) else 1
                output = [function_call("lookup", {"order": n}, call_id=f"c{n}")]
            return ModelResponse(output=output, usage=Usage(), response_id=None)

        def stream_response(self, *args: Any, **kwargs: Any) -> Any:
            raise NotImplementedError("the bench runs without streaming")

    agent = SdkAgent(
        name="bench",
        instructions="Look orders up.",
        tools=[lookup],
        model=LatencyModel(),
    )

    class OpenAIAgents(Case):
        name = "openai_agents"

        def session(self, sid: str) -> Any:
            return []

        async def turn(self, session: Any, text: str) -> None:
            result = await Runner.run(
                agent, [*session, {"role": "user", "content": text}], max_turns=4
            )
            if result.final_output != ANSWER:
                raise RuntimeError(f"openai-agents: {result.final_output!r}")
            session[:] = result.to_input_list()

    return OpenAIAgents()


# -- running a case -------------------------------------------------------


async def drive(
    case: Case, users: int, warm_s: float, seconds: float, tag: str, redis_pid: int
) -> dict[str, Any]:
    """``users`` users on ``case``; the figures of one measured window."""
    stop = asyncio.Event()
    window = Window()
    warmed: set[int] = set()

    async def user(u: int) -> None:
        k = 0
        while not stop.is_set():
            session = case.session(f"{tag}-u{u}-s{k}")
            for t in range(TURNS_PER_SESSION):
                if stop.is_set():
                    return
                started = time.perf_counter()
                await case.turn(session, f"Look order {t} up.")
                warmed.add(u)
                if window.open:
                    window.latencies.append((time.perf_counter() - started) * 1e3)
            k += 1

    if isinstance(case, Helmlog):
        case.timing = True
    # What the case before left is collected before the users start, not
    # after the warm-up: a server never collects by hand, so the window
    # begins in the state its own collections leave (issue 29 item 2).
    gc.collect()
    tasks = [asyncio.create_task(user(u)) for u in range(users)]
    try:
        # Warm: at least warm_s, and until every user has ended a turn (a
        # case that cannot serve them all in WARM_CAP_S is measured anyway).
        started = time.perf_counter()
        await asyncio.sleep(warm_s)
        while len(warmed) < users and time.perf_counter() - started < WARM_CAP_S:
            await asyncio.sleep(0.1)
        waits: list[float] = getattr(case, "turn_waits", [])
        with GcWatch() as watch:
            window.open = True
            waited_from = len(waits)
            cpu, wall = time.process_time(), time.perf_counter()
            redis_cpu = process_cpu_s(redis_pid) if redis_pid else 0.0
            await asyncio.sleep(seconds)
            window.open = False
            waited = waits[waited_from:]
            cpu = time.process_time() - cpu
            wall = time.perf_counter() - wall
            redis_cpu = (process_cpu_s(redis_pid) - redis_cpu) if redis_pid else 0.0
        stop.set()
        # Each user ends the turn it is in; a case too slow for that is cut.
        await asyncio.wait(tasks, timeout=DRAIN_CAP_S)
    finally:
        stop.set()
        for task in tasks:
            task.cancel()
        if isinstance(case, Helmlog):
            case.timing = False
    del waits[:]
    lat = sorted(window.latencies)
    n = len(lat)
    gcs = watch.figures()
    if n == 0:
        # The case cannot serve this many users: no turn ended in the window.
        return {
            "turns": 0,
            "turns_per_s": 0.0,
            "turns_per_s_per_core": 0.0,
            "cpu_us_per_turn": None,
            "redis_cpu_us_per_turn": None,
            "redis_cores": redis_cpu / wall,
            "p50_ms": None,
            "p99_ms": None,
            **gcs,
            "store_waits_ms": waited,
        }
    p50, p99 = percentile(lat, 0.50), percentile(lat, 0.99)
    return {
        "turns": n,
        "turns_per_s": n / wall,
        "turns_per_s_per_core": n / cpu,
        "cpu_us_per_turn": cpu / n * 1e6,
        "redis_cpu_us_per_turn": redis_cpu / n * 1e6,
        "redis_cores": redis_cpu / wall,
        "p50_ms": p50,
        "p99_ms": p99,
        **gcs,
        # Taken out by ``run`` (the store's wait is pooled over windows).
        "store_waits_ms": waited,
    }


async def memory_per_session(case: Case, sessions: int, tag: str) -> float:
    """Traced bytes left behind per session of TURNS_PER_SESSION turns (the
    handles are kept: the Agents SDK's session is the caller's history)."""
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        handles = [case.session(f"{tag}-m{i}") for i in range(sessions)]
        await asyncio.gather(*(_turns(case, h, TURNS_PER_SESSION) for h in handles))
        gc.collect()
        after = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    return (after - before) / sessions


async def _turns(case: Case, session: Any, n: int) -> None:
    for t in range(n):
        await case.turn(session, f"Look order {t} up.")


# -- the run --------------------------------------------------------------


def versions() -> dict[str, str]:
    out: dict[str, str] = {"python": sys.version.split()[0]}
    for dist in ("helmlog", "langchain", "langgraph", "openai-agents", "redis"):
        try:
            out[dist] = version(dist)
        except PackageNotFoundError:
            out[dist] = "not installed"
    return out


def median_of(runs: list[dict[str, Any]]) -> dict[str, float | None]:
    """Each figure's median over the windows where turns ended (a case too
    slow for its users ends none in some: ``stalled_windows`` counts them);
    the collector's worst and its total over every window."""
    ran = [r for r in runs if r["turns"] > 0] or runs
    out: dict[str, float | None] = {}
    for k in runs[0]:
        values = [r[k] for r in ran if r.get(k) is not None]
        out[k] = statistics.median(values) if values else None
    for k in ("gc_max_ms", "gc_young_max_ms", "gc_older_max_ms", "gc_full_max_ms"):
        out[k] = max(r[k] for r in runs)
    out["gc_over_20ms"] = sum(r["gc_over_20ms"] for r in runs)
    out["stalled_windows"] = sum(r["turns"] == 0 for r in runs)
    return out


def rounded(figures: dict[str, float | None]) -> dict[str, float | None]:
    return {
        k: None if v is None else round(v, 3 if abs(v) < 10 else 1)
        for k, v in figures.items()
    }


def make_case(name: str, redis_url: str) -> Case:
    """One case as its server builds it (ImportError: a framework missing)."""
    if name == "helmlog_memory":
        return Helmlog(name, MemoryEventStore())
    if name == "helmlog_redis":
        return Helmlog(name, TimedRedisEventStore.from_url(redis_url))
    return langchain_case() if name == "langchain" else openai_agents_case()


def serve_case(
    conn: Connection,
    name: str,
    users: int,
    redis_url: str,
    settle: bool,
    loop: str = "uvloop",
) -> None:
    """A case's process, as a server runs it: build the case, run a first
    session, settle the collector where asked (as ``helmlog serve`` does once
    warm), then answer the parent's commands on one event loop until told to
    close. Each answer is ``(kind, value)``; a failure is ``("error", its
    traceback)`` and ends the process."""
    try:
        case = make_case(name, redis_url)
    except ImportError as exc:
        conn.send(("skipped", f"not installed ({exc.name})"))
        return
    with asyncio.Runner(loop_factory=LOOPS[loop]) as runner:
        try:
            runner.run(_serve(conn, case, users, settle))
        except BaseException:
            conn.send(("error", traceback.format_exc()))
            raise


async def _serve(conn: Connection, case: Case, users: int, settle: bool) -> None:
    """``serve_case``'s commands, on one event loop that runs throughout.

    Why the loop never stops between commands: a server's never does. A
    loop stopped between windows (while the other cases run theirs) froze
    the round trip the store had under way at a window's end; resumed more
    than the socket timeout later, its deadline fired before its reply was
    read, and the store reported the reply lost (R24: resent, nothing lost,
    but a warning no server would see). The parent's command is waited for
    in a thread, so the loop goes on serving what the store still sends.
    """
    await _turns(case, case.session(f"n{users}-warm"), 1)
    frozen = settle_collector() if settle else 0
    conn.send(("ready", {"frozen": frozen, "thresholds": gc.get_threshold()}))
    while True:
        command, args = await asyncio.to_thread(conn.recv)
        if command == "window":
            conn.send(("done", await drive(case, **args)))
        elif command == "memory":
            conn.send(("done", await memory_per_session(case, **args)))
        else:
            await case.close()
            conn.send(("closed", None))
            return


class CaseProcess:
    """The parent's handle on one case's process (``serve_case``)."""

    def __init__(
        self, name: str, users: int, redis_url: str, settle: bool, loop: str
    ) -> None:
        context = multiprocessing.get_context("spawn")
        self.name = name
        self.conn, theirs = context.Pipe()
        self.process = context.Process(
            target=serve_case,
            args=(theirs, name, users, redis_url, settle, loop),
            name=f"bench-{name}",
        )
        self.process.start()
        theirs.close()

    def answer(self) -> tuple[str, Any]:
        try:
            kind, value = self.conn.recv()
        except EOFError:
            self.process.join()
            raise RuntimeError(
                f"{self.name}'s process ended with no answer "
                f"(exit code {self.process.exitcode})"
            ) from None
        if kind == "error":
            self.process.join()
            raise RuntimeError(f"{self.name} failed in its process:\n{value}")
        return kind, value

    def ask(self, command: str, **args: Any) -> Any:
        self.conn.send((command, args))
        return self.answer()[1]

    def close(self) -> None:
        """Close the case and end its process; one that cannot answer (the
        run was interrupted mid-window) is terminated."""
        try:
            if self.process.is_alive():
                self.ask("close")
        except (RuntimeError, OSError):
            self.process.terminate()
        finally:
            self.process.join()
            self.conn.close()


def run(
    user_counts: list[int],
    seconds: float,
    repetitions: int,
    memory_sessions: int,
    warm_s: float,
    settle: bool,
    names: tuple[str, ...] = CASES,
    loop: str = "uvloop",
) -> dict[str, Any]:
    """Every case at every user count, each case in its own process (one
    per user count, started one after the other and warmed before any
    window); the windows of one repetition run one case at a time."""
    root = Path(__file__).resolve().parent.parent
    sys.path.insert(0, str(root))
    from tests.fixtures_redis import RedisServer

    results: dict[str, dict[str, Any]] = {}
    skipped: dict[str, str] = {}
    frozen: dict[str, dict[str, int]] = {}
    store_wait: dict[str, dict[str, dict[str, float]]] = {}
    thresholds: list[int] = list(gc.get_threshold())
    with RedisServer() as server:
        info = server.command("INFO", "server").decode()
        redis_pid = int(info.split("process_id:")[1].split()[0])
        for users in user_counts:
            cases: list[CaseProcess] = []
            frozen[str(users)] = {}
            try:
                for name in (n for n in CASES if n in names):
                    child = CaseProcess(name, users, server.url, settle, loop)
                    kind, ready = child.answer()
                    if kind == "skipped":
                        skipped[name] = ready
                        child.process.join()
                        continue
                    cases.append(child)
                    frozen[str(users)][name] = ready["frozen"]
                    thresholds = list(ready["thresholds"])
                runs: dict[str, list[dict[str, Any]]] = {c.name: [] for c in cases}
                waits: dict[str, list[float]] = {c.name: [] for c in cases}
                for rep in range(repetitions):
                    # Rotate the order, so no case always follows the same one.
                    order = cases[rep % len(cases) :] + cases[: rep % len(cases)]
                    for child in order:
                        pid = redis_pid if child.name == "helmlog_redis" else 0
                        window = child.ask(
                            "window",
                            users=users,
                            warm_s=warm_s,
                            seconds=seconds,
                            tag=f"n{users}-r{rep}",
                            redis_pid=pid,
                        )
                        waits[child.name].extend(window.pop("store_waits_ms"))
                        runs[child.name].append(window)
                per_case: dict[str, Any] = {}
                for child in cases:
                    figures = median_of(runs[child.name])
                    figures["memory_per_session_bytes"] = child.ask(
                        "memory", sessions=memory_sessions, tag=f"n{users}"
                    )
                    per_case[child.name] = rounded(figures)
                results[str(users)] = per_case
                store_wait[str(users)] = {
                    name: store_wait_of(sorted(w)) for name, w in waits.items() if w
                }
            finally:
                for child in cases:
                    child.close()
            server.flushdb()
    return {
        "results": results,
        "skipped": skipped,
        "frozen": frozen,
        "store_wait": store_wait,
        "thresholds": thresholds,
    }


def store_wait_of(sorted_ms: list[float]) -> dict[str, float]:
    """The store's wait of the timed turns (one in WAIT_SAMPLE) of a case's
    windows: p50, p99 and how many turns were timed."""
    return {
        "p50_ms": round(percentile(sorted_ms, 0.50), 2),
        "p99_ms": round(percentile(sorted_ms, 0.99), 2),
        "turns": len(sorted_ms),
    }


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or not b else round(a / b, 3)


def ratios(results: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per user count: each store and framework against the others, per core
    (``None`` where a case ended no turn; absent where a case was not run)."""
    out: dict[str, dict[str, Any]] = {}
    for users, cases in results.items():
        mem, red = cases.get("helmlog_memory"), cases.get("helmlog_redis")
        r: dict[str, float | None] = {}
        if mem is not None and red is not None:
            red_cpu = red.get("cpu_us_per_turn")
            with_server = (
                None if red_cpu is None else red_cpu + red["redis_cpu_us_per_turn"]
            )
            r["redis_vs_memory_cpu"] = _ratio(red_cpu, mem.get("cpu_us_per_turn"))
            r["redis_with_server_vs_memory_cpu"] = _ratio(
                with_server, mem.get("cpu_us_per_turn")
            )
        for peer in ("langchain", "openai_agents"):
            if peer in cases:
                per_core = cases[peer]["turns_per_s_per_core"]
                for store, c in (("memory", mem), ("redis", red)):
                    if c is not None:
                        r[f"{store}_vs_{peer}"] = _ratio(
                            c["turns_per_s_per_core"], per_core
                        )
        out[users] = r
    return out


def targets(
    results: dict[str, dict[str, Any]],
    rat: dict[str, dict[str, Any]],
    store_wait: dict[str, dict[str, dict[str, float]]] | None = None,
) -> dict[str, bool]:
    """Issue 29's targets that this run's user counts speak to."""
    met: dict[str, bool] = {}
    wait = (store_wait or {}).get("1000", {}).get("helmlog_redis")
    if wait is not None:
        met["redis_store_wait_p50_le_5ms"] = wait["p50_ms"] <= TARGET_STORE_WAIT_MS
    if "redis_vs_memory_cpu" in rat.get("1000", {}):
        red = results["1000"]["helmlog_redis"]
        ratio = rat["1000"]["redis_vs_memory_cpu"]
        met["redis_vs_memory_cpu_le_1_15"] = (
            ratio is not None and ratio <= TARGET_REDIS_VS_MEMORY_CPU
        )
        cpu = red.get("cpu_us_per_turn")
        met["redis_cpu_us_le_300"] = cpu is not None and cpu <= TARGET_REDIS_CPU_US
    for users in ("100", "1000"):
        for store in ("helmlog_memory", "helmlog_redis"):
            if store in results.get(users, {}):
                c = results[users][store]
                met[f"tail_{store}_{users}"] = (
                    c.get("p99_ms") is not None
                    and c["p99_ms"] <= c["p50_ms"] + TARGET_TAIL_MS
                )
    met["no_gc_over_20ms"] = all(
        results[u][s]["gc_over_20ms"] == 0
        for u in results
        for s in ("helmlog_memory", "helmlog_redis")
        if s in results[u]
    )
    return met


def _f(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def summary(line: dict[str, Any]) -> str:
    lines = [
        f"sessions per core: a {LATENCY_S * 1e3:.0f} ms model, "
        f"{TURNS_PER_SESSION} turns a session, {line['seconds']:g} s windows, "
        f"median of {line['repetitions']}; collector {line['collector']}; "
        f"loop {line['loop']}; "
        f"load {line['loadavg']}"
    ]
    for users, cases in line["results"].items():
        lines.append(f"  {users} users")
        for name, c in cases.items():
            redis = (
                f" +{_f(c.get('redis_cpu_us_per_turn'), '.0f')} us in redis-server"
                if name == "helmlog_redis"
                else ""
            )
            lines.append(
                f"    {name:<15} {c['turns_per_s_per_core']:>8,.0f} turns/s/core "
                f"{_f(c.get('cpu_us_per_turn'), '>8,.0f')} us/turn{redis}  p50 "
                f"{_f(c.get('p50_ms'), '.0f')} ms p99 {_f(c.get('p99_ms'), '.0f')} ms"
                f"  gc>20ms {c['gc_over_20ms']:.0f} (max {c['gc_max_ms']:.0f} ms, "
                f"older {c['gc_older_collections']:.0f} max "
                f"{c['gc_older_max_ms']:.0f} ms)  "
                f"{c['memory_per_session_bytes'] / 1e3:,.1f} kB/session"
            )
        wait = line["store_wait"].get(users, {}).get("helmlog_redis")
        if wait is not None:
            lines.append(
                f"    helmlog_redis store wait per turn p50 {wait['p50_ms']:.1f} ms "
                f"p99 {wait['p99_ms']:.1f} ms ({wait['turns']} timed turns)"
            )
        lines.append(f"    ratios {line['ratios'][users]}")
    lines.append(f"  targets {line['targets']}")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument(
        "--users",
        default=",".join(map(str, USERS)),
        help="comma-separated user counts (default 100,1000,5000)",
    )
    parser.add_argument("--seconds", type=float, default=SECONDS)
    parser.add_argument("--repetitions", type=int, default=REPETITIONS)
    parser.add_argument("--quick", action="store_true", help="a small smoke run")
    parser.add_argument(
        "--collector",
        choices=("settled", "default"),
        default="settled",
        help="settle_collector() once warm, as a server does (default), or "
        "Python's own collector settings",
    )
    parser.add_argument(
        "--cases",
        default=",".join(CASES),
        help=f"comma-separated cases to run (default {','.join(CASES)})",
    )
    parser.add_argument(
        "--loop",
        choices=tuple(LOOPS),
        default="uvloop",
        help="each case's event loop: uvloop (default), as `helmlog serve` "
        "(uvicorn) and Ray's async actors run where it is installed, or asyncio's",
    )
    args = parser.parse_args()
    names = tuple(n.strip() for n in args.cases.split(",") if n.strip())
    if not names or not set(names) <= set(CASES):
        parser.error(f"--cases takes some of {','.join(CASES)}, not {args.cases!r}")
    try:
        user_counts = [int(u) for u in args.users.split(",") if u.strip()]
    except ValueError:
        parser.error(f"--users takes comma-separated integers, not {args.users!r}")
    if not user_counts or min(user_counts) < 1:
        parser.error("--users needs at least one count of one user or more")
    seconds, reps, mem = args.seconds, args.repetitions, MEMORY_SESSIONS
    warm_s = max(1.0, seconds / 3)
    if args.quick:
        user_counts, seconds, reps, mem, warm_s = [10], 0.4, 1, 10, 0.25
    settle = args.collector == "settled"
    out = run(user_counts, seconds, reps, mem, warm_s, settle, names, args.loop)
    rat = ratios(out["results"])
    line = {
        "bench": "sessions",
        "latency_ms": LATENCY_S * 1e3,
        "turns_per_session": TURNS_PER_SESSION,
        "seconds": seconds,
        "repetitions": reps,
        "collector": args.collector,
        "loop": args.loop,
        "isolation": "a process per case",
        # The most any case's process froze when settled (each, per user
        # count, in frozen_objects_per_case).
        "frozen_objects": max(
            (n for per in out["frozen"].values() for n in per.values()), default=0
        ),
        "frozen_objects_per_case": out["frozen"],
        "gc_thresholds": out["thresholds"],
        "cpus": os.cpu_count(),
        "loadavg": [round(x, 2) for x in os.getloadavg()],
        "versions": versions(),
        "results": out["results"],
        "ratios": rat,
        "store_wait": out["store_wait"],
        "targets": targets(out["results"], rat, out["store_wait"]),
        "skipped": out["skipped"],
    }
    print(summary(line))
    print(json.dumps(line))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
