"""Shared chains and isolated tools: ``PolicyActor`` and ``ToolExecutor``.

Pattern: remote proxies with the local shape (a proxy link is a link, a proxy
         tool a ``Tool``), so the walker and the pipeline record exactly what
         they would inline; what crosses is a typed message (``_messages.py``).
Role:    actors layer; ``Cluster.policy(factory)`` hosts a chain whose state
         every session shares; ``Cluster.isolated(tool)`` runs a tool apart.

Laws: R12, R17, G6/G7, G69.
Why one proxy per hosted link: the walker files a row per link, stops at the
first non-allow and unwinds after-tool hooks itself. One actor, one hook at a
time, so a rule updates its state without racing. Named and detached, never
restarted: a restarted chain would forget its state, so a dead one fails
closed (G7).
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
from collections.abc import Callable, Sequence
from typing import Any

from helmlog.runtime import Tool, ask_human
from helmlog.runtime.lowlevel import AskHumanSignal, call_execute, running_tool

from ._messages import (
    AskedHuman,
    ChainInfo,
    Context,
    ExecuteIn,
    LinkInfo,
    MessageIn,
    Raised,
    RemoteRaised,
    Returned,
    ToolCallIn,
    ToolResultIn,
    call_in,
    context_of,
    decode_call,
    decode_chain,
    decode_execute,
    decode_execute_reply,
    decode_hook_reply,
    encode,
    encode_reply,
    outcome_of,
    raised_text,
    reply_of,
)

HookFn = Callable[[Any], Any]


def _name(obj: Any) -> str | None:
    name = getattr(obj, "name", None)
    return name if isinstance(name, str) and name.strip() else None


def _hook(obj: Any, attr: str) -> HookFn | None:
    fn = getattr(obj, attr, None)
    return fn if callable(fn) else None


@dataclasses.dataclass(frozen=True, slots=True)
class _Hosted:
    """One hosted link, hooks resolved once."""

    name: str
    on_tool_call: HookFn | None
    on_tool_result: HookFn | None
    on_message: HookFn | None

    def info(self) -> LinkInfo:
        return LinkInfo(
            name=self.name,
            on_tool_call=self.on_tool_call is not None,
            on_tool_result=self.on_tool_result is not None,
            on_message=self.on_message is not None,
        )

    def hook_for(self, msg: ToolCallIn | ToolResultIn | MessageIn) -> HookFn | None:
        if isinstance(msg, ToolCallIn):
            return self.on_tool_call
        if isinstance(msg, ToolResultIn):
            return self.on_tool_result
        return self.on_message


def _host(obj: Any) -> _Hosted:
    name = _name(obj)
    if name is None:
        raise ValueError(
            f"a policy factory's links need a non-empty name (got {obj!r})"
        )
    hosted = _Hosted(
        name=name,
        on_tool_call=_hook(obj, "on_tool_call"),
        on_tool_result=_hook(obj, "on_tool_result"),
        on_message=_hook(obj, "on_message"),
    )
    if not (hosted.on_tool_call or hosted.on_tool_result or hosted.on_message):
        raise ValueError(
            f"policy link '{name}' has no hook "
            "(on_tool_call, on_tool_result or on_message)"
        )
    return hosted


class PolicyActor:
    """Hosts the chain ``factory()`` builds: one link, or a sequence of links."""

    def __init__(self, factory: Callable[[], Any]) -> None:
        built = factory()
        links = list(built) if isinstance(built, list | tuple) else [built]
        if not links:
            raise ValueError("a policy factory must build at least one link")
        self._links = [_host(obj) for obj in links]

    async def describe(self) -> bytes:
        """The hosted chain (an encoded ``ChainInfo``)."""
        return encode(ChainInfo(links=tuple(h.info() for h in self._links)))

    async def call(self, data: bytes) -> bytes:
        """Run one hook (an encoded ``HookCall``); answer an encoded ``HookReply``.

        G6 is judged by the caller's walker, exactly as inline: a non-outcome
        goes back as its type's name; a raise as its text (G7).
        """
        msg = decode_call(data)
        fn = self._links[msg.link].hook_for(msg)
        if fn is None:
            raise ValueError(f"hosted link {msg.link} has no hook for {type(msg)}")
        try:
            out = fn(context_of(msg))
            if inspect.isawaitable(out):
                out = await out
        except Exception as exc:  # noqa: BLE001 — G7: a raise is answered, as inline
            return encode_reply(Raised(text=raised_text(exc)))
        return encode_reply(reply_of(out))


class ActorRef:
    """A named, detached actor, by name: what a proxy keeps and pickles.

    Why by name and not a handle: an agent factory closes over its proxies
    and is pickled to every host, and the cluster compares factories by their
    pickled arguments (``factory_key``), so two client processes attaching the
    same chain must pickle it to the same bytes; a name does, a handle does
    not. The handle is looked up once per process.
    """

    __slots__ = ("_handle", "name", "namespace")

    def __init__(self, name: str, namespace: str) -> None:
        self.name = name
        self.namespace = namespace
        self._handle: Any = None

    @property
    def handle(self) -> Any:
        if self._handle is None:
            import ray

            self._handle = ray.get_actor(self.name, namespace=self.namespace)
        return self._handle

    def __reduce__(self) -> tuple[Any, ...]:
        return (ActorRef, (self.name, self.namespace))

    def __repr__(self) -> str:
        return f"ActorRef({self.name!r})"


class PolicyLink:
    """One link of a chain hosted by a ``PolicyActor`` (its state is shared).

    Has the hooks its hosted link has, and no others, so the walker and the
    policy version see the same link they would inline.
    """

    def __init__(self, ref: ActorRef, index: int, info: LinkInfo) -> None:
        self.name = info.name
        self._ref = ref
        self._index = index
        self._info = info
        self.on_tool_call = self._call if info.on_tool_call else None
        self.on_tool_result = self._call if info.on_tool_result else None
        self.on_message = self._call if info.on_message else None

    async def _call(self, ctx: Context) -> Any:
        data = encode(call_in(self._index, ctx))
        reply = await self._ref.handle.call.remote(data)
        return outcome_of(decode_hook_reply(reply))

    def __reduce__(self) -> tuple[Any, ...]:
        return (PolicyLink, (self._ref, self._index, self._info))

    def __repr__(self) -> str:
        return f"PolicyLink(name={self.name!r})"


def chain_links(ref: ActorRef, described: bytes) -> list[PolicyLink]:
    """The proxies for a ``PolicyActor``'s chain, in its order."""
    info = decode_chain(described)
    return [PolicyLink(ref, i, link) for i, link in enumerate(info.links)]


class ToolExecutor:
    """Runs the tools it was given, by name, in its own process."""

    def __init__(self, tools: Sequence[Tool]) -> None:
        self._tools = {t.name: t for t in tools}

    async def execute(self, data: bytes) -> bytes:
        """Run one tool (an encoded ``ExecuteIn``); answer an ``ExecuteReply``."""
        msg = decode_execute(data)
        # The call runs here under its own id, as it would inline; only a
        # client that predates the id sends none, and then its name stands in.
        call_id = msg.tool_call_id or msg.tool_name
        try:
            out = await call_execute(self._tools[msg.tool_name], msg.args, call_id)
        except AskHumanSignal as signal:
            return encode_reply(
                AskedHuman(question=signal.question, detail=signal.detail)
            )
        except Exception as exc:  # noqa: BLE001 — G18: a raise is the tool's result
            return encode_reply(Raised(text=raised_text(exc)))
        return encode_reply(Returned(value=out))


class RemoteExecute:
    """A tool's ``execute`` that runs it in a ``ToolExecutor`` (by name)."""

    __slots__ = ("ref", "tool_name")

    def __init__(self, ref: ActorRef, tool_name: str) -> None:
        self.ref = ref
        self.tool_name = tool_name

    async def __call__(self, **kwargs: Any) -> Any:
        # Invariant: this runs as the host's running tool, so the call id is set.
        call_id = running_tool().get() or ""
        data = encode(
            ExecuteIn(tool_name=self.tool_name, args=kwargs, tool_call_id=call_id)
        )
        reply = decode_execute_reply(await self.ref.handle.execute.remote(data))
        if isinstance(reply, AskedHuman):
            # Raised here, inside the host's running tool, so the run pauses (G69).
            ask_human(reply.question, reply.detail)
        if isinstance(reply, Raised):
            raise RemoteRaised(reply.text)
        return reply.value

    def __reduce__(self) -> tuple[Any, ...]:
        return (RemoteExecute, (self.ref, self.tool_name))


def isolated_tool(tool: Tool, ref: ActorRef) -> Tool:
    """A ``Tool`` equal to ``tool`` whose ``execute`` runs in an executor."""
    proxy = copy.copy(tool)
    proxy.execute = RemoteExecute(ref, tool.name)
    return proxy
