"""Which backend serves a model name, and which models ``/v1/models`` lists.

Pure: it reads each enabled backend's prefixes, aliases and known models, through the small
``Routable`` protocol (a ``Backend`` class meets it): the backends sit above plan/ and
implement what it asks, so plan/ never imports them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol


class Routable(Protocol):
    """What routing reads of a backend class."""

    @property
    def model_prefixes(self) -> tuple[str, ...]: ...  # "claude-" routes claude-anything here

    @property
    def aliases(self) -> tuple[str, ...]: ...  # bare names ("sonnet") that route here

    @property
    def known_models(self) -> tuple[str, ...]: ...  # what /v1/models lists


Backends = Mapping[str, Routable]


@dataclass(frozen=True, slots=True)
class Route:
    backend: str
    cli_model: str  # the name handed to the CLI's --model


def route(model: str, enabled: Backends) -> Route | None:
    """``backend/model`` picks the backend explicitly; otherwise alias or prefix decides."""
    name = model.strip()
    if "/" in name:
        backend, _, rest = name.partition("/")
        if backend in enabled and rest and not rest.startswith("-"):  # never a CLI option
            return Route(backend, rest)
        return None
    lower = name.lower()
    for backend, cls in enabled.items():
        if lower in cls.aliases or lower.startswith(cls.model_prefixes):
            return Route(backend, name)
    return None


def listed_models(enabled: Backends) -> list[tuple[str, str]]:
    """(model id, owner) pairs for the enabled backends."""
    return [(m, b) for b, cls in enabled.items() for m in cls.known_models]
