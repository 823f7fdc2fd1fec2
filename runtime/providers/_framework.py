"""A provider that stands for a model another framework calls.

Pattern: a named placeholder on the provider port that refuses to be called.
Role:    runtime layer; ``framework_model(name)`` is the provider of an agent
         whose turns another framework drives (``Steering``, issue 27).
Emits:   nothing.

Laws: issue 27 item 5 (one record: ``agent.turn_start`` and
``stream.llm_start`` name the provider the framework's model is from).

Why a placeholder, not ``None``: the builder takes a provider, and the record
names one; calling it is a wiring mistake, so it raises a typed error rather
than answering anything.
"""

from __future__ import annotations

from .._errors import FrameworkModelError
from ._base import ProviderRequest, Reply, TokenSink


class FrameworkModel:
    """The provider of a steered agent: a name, and no way to be called.

    Args:
        name: the provider's ``gen_ai.provider.name`` as recorded
            (``"openai"``, ``"anthropic"``, ``"langchain"``...).
    """

    __slots__ = ("provider_name",)

    stream = False

    def __init__(self, name: str) -> None:
        if not isinstance(name, str) or not name.strip():
            raise ValueError("framework_model() takes the provider's name, a str")
        self.provider_name = name

    def __repr__(self) -> str:
        return f"framework_model({self.provider_name!r})"

    async def call(
        self, request: ProviderRequest, on_token: TokenSink | None = None
    ) -> Reply:
        """Refuse: another framework calls this model (``FrameworkModelError``)."""
        raise FrameworkModelError(provider=self.provider_name)


def framework_model(name: str) -> FrameworkModel:
    """The provider of an agent another framework drives (``Steering``): its
    name is recorded; the native loop calling it raises ``FrameworkModelError``.
    """
    return FrameworkModel(name)
