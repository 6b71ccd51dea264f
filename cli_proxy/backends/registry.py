"""The backend registry: the one table of the CLIs this gateway can run.

Adding a backend is its folder (``backends/<name>/``) and one line in ``BUILT_IN``; the
gateway, routing, limits, doctor, replay and ``/openapi.json`` read every backend through
this table and the ``Backend`` interface (``base.py``). A test or a plugin can ``register``
another class.

The table names each built-in class as ``"module:Class"`` and imports it on first use
(uvicorn's ``config.py`` does the same with its protocol tables): ``base.py`` reads the table
(every child env drops every backend's nesting variables) while each backend imports
``base.py``, so the table must not import the backends when it is itself imported. Backend
names are closed over this table: settings, routing and fixtures accept only registered names.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cli_proxy.backends.base import Backend

BUILT_IN: dict[str, str] = {
    "claude": "cli_proxy.backends.claude.backend:ClaudeBackend",
    "gemini": "cli_proxy.backends.gemini.backend:GeminiBackend",
    "codex": "cli_proxy.backends.codex.backend:CodexBackend",
    "copilot": "cli_proxy.backends.copilot.backend:CopilotBackend",
}

_REGISTRY: dict[str, type[Backend] | str] = dict(BUILT_IN)


def register(cls: type[Backend]) -> type[Backend]:
    """Add a backend class (usable as a decorator); its name must be new."""
    name = cls.name
    if not name or not name.isidentifier() or name != name.lower():
        raise ValueError(f"backend name must be a lower-case identifier, not {name!r}")
    if name in _REGISTRY and backend_class(name) is not cls:
        raise ValueError(f"a backend named {name!r} is already registered")
    _REGISTRY[name] = cls
    return cls


def unregister(name: str) -> None:
    _REGISTRY.pop(name, None)


def backend_class(name: str) -> type[Backend]:
    """The registered class; KeyError names the registered ones."""
    try:
        entry = _REGISTRY[name]
    except KeyError:
        raise KeyError(f"unknown backend {name!r} (registered: {', '.join(names())})") from None
    if isinstance(entry, str):
        module, _, attr = entry.partition(":")
        cls: type[Backend] = getattr(importlib.import_module(module), attr)
        if cls.name != name:
            raise ValueError(f"{entry} is named {cls.name!r}, registered as {name!r}")
        _REGISTRY[name] = entry = cls
    return entry


def names() -> tuple[str, ...]:
    return tuple(_REGISTRY)


def nesting_vars() -> frozenset[str]:
    """Every registered backend's nesting variables (each child env drops all of them)."""
    out: frozenset[str] = frozenset()
    for name in names():
        out |= backend_class(name).nesting_vars
    return out


def resident_mib(backends: Iterable[str]) -> dict[str, int]:
    """Measured resident size (MiB) of one CLI tree mid-call, per backend: what the default
    process bound divides the memory budget by (``run/limits.py``)."""
    return {name: backend_class(name).resident_mib for name in backends}


def at_rest_mib(backends: Iterable[str]) -> dict[str, int]:
    """Measured resident size (MiB) of a spare waiting for its prompt, per backend."""
    return {name: backend_class(name).at_rest_mib for name in backends}


__all__ = [
    "BUILT_IN",
    "at_rest_mib",
    "backend_class",
    "names",
    "nesting_vars",
    "register",
    "resident_mib",
    "unregister",
]
