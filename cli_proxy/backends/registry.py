"""The backend registry (kept in ``base.py``, beside the interface it holds)."""

from .base import backend_class, names, nesting_vars, register, unregister

__all__ = ["backend_class", "names", "nesting_vars", "register", "unregister"]
