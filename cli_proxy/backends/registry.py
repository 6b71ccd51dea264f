"""The backend registry: one table names every CLI the gateway can run.

Built-in backends are registered in ``backends/__init__.py`` (one line each); a test or a
plugin can ``register`` another. Backend names are closed over this table: settings,
routing and fixtures accept only registered names.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .base import Backend

_REGISTRY: dict[str, type[Backend]] = {}


def register(cls: type[Backend]) -> type[Backend]:
    """Add a backend class (usable as a decorator); its name must be new."""
    name = cls.name
    if not name or not name.isidentifier() or name != name.lower():
        raise ValueError(f"backend name must be a lower-case identifier, not {name!r}")
    if _REGISTRY.get(name, cls) is not cls:
        raise ValueError(f"a backend named {name!r} is already registered")
    _REGISTRY[name] = cls
    return cls


def unregister(name: str) -> None:
    _REGISTRY.pop(name, None)


def backend_class(name: str) -> type[Backend]:
    """The registered class; KeyError names the registered ones."""
    try:
        return _REGISTRY[name]
    except KeyError:
        raise KeyError(f"unknown backend {name!r} (registered: {', '.join(names())})") from None


def names() -> tuple[str, ...]:
    return tuple(_REGISTRY)


def nesting_vars() -> frozenset[str]:
    out: frozenset[str] = frozenset()
    for cls in _REGISTRY.values():
        out |= cls.nesting_vars
    return out
