"""A request model from JSON, or the 400 that names the offending field as the client
wrote it (``messages[0].content[1].text``): pydantic's error locations without the union
member names it inserts; and ``TurnParts``, which keeps where each part of a rebuilt turn
came from so that later 400s can name it too. Shared by the wire formats' readers."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from cli_proxy.server.errors import APIError

M = TypeVar("M", bound=BaseModel)


def validated(model: type[M], data: Any) -> M:
    """``model`` from request data, or the 400 that names the offending field."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise from_validation_error(exc) from None


def from_validation_error(exc: ValidationError) -> APIError:
    """First pydantic error as a 400 whose ``param`` names the offending field path."""
    err = exc.errors(include_url=False)[0]
    loc = _field_path(err["loc"])
    if err["type"] in ("union_tag_invalid", "union_tag_not_found"):
        # a bad or missing ``role``: pydantic reports it on the message, not on the field
        tag = str((err.get("ctx") or {}).get("discriminator", "")).strip("'\"")
        if tag:
            loc.append(tag)
    param = dotted(loc) or None
    msg = err["msg"]
    if param:
        msg = f"Invalid value for '{param}': {msg}"
    return APIError(400, msg, param=param, code="invalid_value")


_ROLES = frozenset({"system", "developer", "user", "assistant", "tool", "function"})
_MEMBERS = frozenset(
    {"str", "int", "bool", "float", "NamedToolChoice", "TextPart", "ImagePart", "RefusalPart"}
    | {"OtherPart"}
)


def _field_path(loc: tuple[int | str, ...]) -> list[str]:
    """The loc without the union member names pydantic inserts ("user", "str", "list[...]").

    A role name is a tag only right after ``messages[i]``; elsewhere ("function" in
    ``tools[0].function.name``) it is a real field.
    """
    out: list[str] = []
    for i, part in enumerate(loc):
        if isinstance(part, str):
            if i == 2 and loc[0] == "messages" and isinstance(loc[1], int) and part in _ROLES:
                continue
            if part in _MEMBERS or "[" in part or part.startswith(("function-", "literal[")):
                continue
        out.append(str(part))
    return out


def dotted(loc: list[str]) -> str:
    """A field path as a client writes it: ``messages[0].content[1].text``."""
    out = ""
    for part in loc:
        out += f"[{part}]" if part.isdigit() else (f".{part}" if out else part)
    return out


@dataclass
class TurnParts:
    """The text and image parts of one client turn gathered between its tool results, each
    with the client's field it came from: ``flush`` appends them as one ``role`` message and
    records those fields in ``origins`` (``messages[n]``, ``messages[n].content[k]``)."""

    role: str
    where: str
    messages: list[dict[str, Any]]
    origins: dict[str, str]
    parts: list[dict[str, Any]] = field(default_factory=list)
    part_origins: list[str] = field(default_factory=list)

    def add(self, part: dict[str, Any], origin: str) -> None:
        self.parts.append(part)
        self.part_origins.append(origin)

    def flush(self) -> None:
        if self.parts:
            n = len(self.messages)
            self.origins[f"messages[{n}]"] = self.where
            for k, origin in enumerate(self.part_origins):
                self.origins[f"messages[{n}].content[{k}]"] = origin
            self.messages.append({"role": self.role, "content": list(self.parts)})
            self.parts.clear()
            self.part_origins.clear()
