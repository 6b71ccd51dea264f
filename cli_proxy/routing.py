"""Which backend serves a model name, and which models ``/v1/models`` lists."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Route:
    backend: str
    cli_model: str  # the name handed to the CLI's --model


# Listed by /v1/models; any other ``claude-*`` / ``gemini-*`` name is routed too.
KNOWN_MODELS: dict[str, tuple[str, ...]] = {
    "claude": (
        "claude-sonnet-4-6",
        "claude-opus-4-6",
        "claude-haiku-4-5",
        "sonnet",
        "opus",
        "haiku",
    ),
    "gemini": (
        "gemini-2.5-pro",
        "gemini-2.5-flash",
        "gemini-2.5-flash-lite",
    ),
}

_ALIASES = {"sonnet": "claude", "opus": "claude", "haiku": "claude"}
_PREFIXES = (("claude-", "claude"), ("gemini-", "gemini"))


def route(model: str, enabled: frozenset[str]) -> Route | None:
    """``backend/model`` picks the backend explicitly; otherwise prefix or alias decides."""
    name = model.strip()
    if "/" in name:
        backend, _, rest = name.partition("/")
        if backend in enabled and rest:
            return Route(backend, rest)
        return None
    owner = _ALIASES.get(name.lower())
    if owner is None:
        owner = next((b for p, b in _PREFIXES if name.lower().startswith(p)), None)
    if owner is None or owner not in enabled:
        return None
    return Route(owner, name)


def listed_models(enabled: frozenset[str]) -> list[tuple[str, str]]:
    """(model id, owner) pairs for the enabled backends."""
    return [(m, b) for b, models in KNOWN_MODELS.items() if b in enabled for m in models]
