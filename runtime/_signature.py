"""A function's signature as a tool's input: parameters, descriptions, schema.

Pattern: a reader of Python declarations (type hints, ``Annotated`` metadata,
         a Google-style docstring) that produces one ``Param`` per parameter
         and the JSON schema the model is shown.
Role:    runtime layer; ``@tool`` (``_tools.py``) builds its schema and its
         typed validation from what this reads.

Laws: G58, issue 12 item 4 (Pydantic models, ``Field`` descriptions, ``Args:``).
Why Pydantic is reached through ``sys.modules``: helmlog does not depend on
it, and an annotation can only name a Pydantic type already imported; such a
parameter is validated by Pydantic's ``TypeAdapter``, the rest by msgspec.
The ``Args:`` section leaves the description: saying it twice costs tokens.
"""

from __future__ import annotations

import inspect
import re
import sys
from collections.abc import Callable, Iterable
from typing import Annotated, Any, get_args, get_origin, get_type_hints

import msgspec

_SECTION = re.compile(r"^(\s*)(Args|Arguments|Parameters|Params):\s*$")
_ENTRY = re.compile(r"^(\*{0,2}\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")


class Param(msgspec.Struct, frozen=True):
    """One parameter of a typed tool.

    ``adapter`` is a Pydantic ``TypeAdapter`` for a parameter that involves
    Pydantic, else ``None`` (msgspec converts it).
    """

    name: str
    annotation: Any
    required: bool
    default: Any = None
    description: str | None = None
    adapter: Any = None


def docstring_parts(doc: str) -> tuple[str, dict[str, str]]:
    """Split a docstring into its text without ``Args:`` and each parameter's text.

    Google style: an ``Args:`` (or ``Arguments:``/``Parameters:``) header, then
    one ``name: text`` or ``name (type): text`` entry per parameter, indented,
    with continuation lines indented further. The section ends at the first
    non-blank line indented no deeper than its header.
    """
    lines = doc.splitlines()
    kept: list[str] = []
    described: dict[str, str] = {}
    i = 0
    while i < len(lines):
        header = _SECTION.match(lines[i])
        if header is None:
            kept.append(lines[i])
            i += 1
            continue
        depth = len(header.group(1))
        i += 1
        entry_depth: int | None = None
        current: str | None = None
        while i < len(lines):
            line = lines[i]
            if line.strip() and len(line) - len(line.lstrip()) <= depth:
                break
            i += 1
            if not line.strip():
                continue
            indent = len(line) - len(line.lstrip())
            if entry_depth is None:
                entry_depth = indent
            entry = _ENTRY.match(line.strip()) if indent <= entry_depth else None
            if entry is not None:
                current = entry.group(1).lstrip("*")
                described[current] = entry.group(2).strip()
            elif current is not None:
                described[current] = f"{described[current]} {line.strip()}".strip()
    if len(kept) == len(lines):  # no section: the docstring is the description
        return doc, described
    text = "\n".join(kept).strip()
    return re.sub(r"\n{3,}", "\n\n", text), described


class _Pydantic(msgspec.Struct, frozen=True):
    base_model: Any
    field_info: Any
    type_adapter: Any


def _pydantic() -> _Pydantic | None:
    if "pydantic" not in sys.modules:
        return None
    from pydantic import BaseModel, TypeAdapter
    from pydantic.fields import FieldInfo

    return _Pydantic(BaseModel, FieldInfo, TypeAdapter)


def _involves_pydantic(annotation: Any, pydantic: _Pydantic) -> bool:
    if isinstance(annotation, type) and issubclass(annotation, pydantic.base_model):
        return True
    if get_origin(annotation) is Annotated:
        base, *metadata = get_args(annotation)
        if any(isinstance(m, pydantic.field_info) for m in metadata):
            return True
        return _involves_pydantic(base, pydantic)
    return any(_involves_pydantic(a, pydantic) for a in get_args(annotation))


def _annotated_description(annotation: Any) -> str | None:
    if get_origin(annotation) is not Annotated:
        return None
    for meta in get_args(annotation)[1:]:
        text = getattr(meta, "description", None)
        if isinstance(text, str) and text:
            return text
    return None


def read_params(
    func: Callable[..., Any], skip: Iterable[str] = ()
) -> tuple[tuple[Param, ...], str]:
    """The parameters of ``func`` and its description (docstring less ``Args:``)."""
    sig = inspect.signature(func)
    hints = get_type_hints(func, include_extras=True)
    description, described = docstring_parts(inspect.getdoc(func) or "")
    pydantic = _pydantic()
    skipped = set(skip)
    params: list[Param] = []
    for p in sig.parameters.values():
        if p.name in skipped or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        annotation = hints.get(p.name, Any)
        default = p.default
        adapter = None
        if pydantic is not None and isinstance(default, pydantic.field_info):
            # ``x: int = Field(3, description=...)``: the field is the metadata.
            annotation = Annotated[annotation, default]
            default = (
                inspect.Parameter.empty
                if default.is_required()
                else default.get_default(call_default_factory=True)
            )
        if pydantic is not None and _involves_pydantic(annotation, pydantic):
            adapter = pydantic.type_adapter(annotation)
        required = default is inspect.Parameter.empty
        params.append(
            Param(
                p.name,
                annotation,
                required,
                None if required else default,
                _annotated_description(annotation) or described.get(p.name),
                adapter,
            )
        )
    return tuple(params), description


def _stated(default: Any) -> Any:
    """G58: the schema states a parameter's default when JSON can hold it."""
    try:
        msgspec.json.encode(default)
        msgspec.defstruct("_Default", [("value", Any, default)])
    except (TypeError, msgspec.EncodeError):
        # Not JSON, or a mutable default msgspec refuses: leave it unstated.
        return msgspec.field(default_factory=lambda: None)
    return default


def schema_for(params: tuple[Param, ...], name: str) -> dict[str, Any]:
    """The input schema of a typed tool: an ``object`` of its parameters."""
    fields = [
        (p.name, Any if p.adapter is not None else p.annotation)
        if p.required
        else (
            p.name,
            Any if p.adapter is not None else p.annotation,
            _stated(p.default),
        )
        for p in params
    ]
    struct = msgspec.defstruct(name, fields)
    schema = msgspec.json.schema(struct)
    defs: dict[str, Any] = schema.pop("$defs", {})
    body = dict(defs.pop(name, schema))
    body.pop("title", None)
    properties: dict[str, Any] = body.setdefault("properties", {})
    for p in params:
        prop = dict(properties.get(p.name, {}))
        if p.adapter is not None:
            own = dict(p.adapter.json_schema(ref_template="#/$defs/{model}"))
            defs.update(own.pop("$defs", {}))
            own.pop("title", None)
            prop = {**own, **{k: v for k, v in prop.items() if k == "default"}}
        if p.description and "description" not in prop:
            prop["description"] = p.description
        properties[p.name] = prop
    if defs:
        body["$defs"] = defs
    return body
