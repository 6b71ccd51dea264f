"""The backend registry (kept in ``base.py``, beside the interface it holds)."""

from cli_proxy.backends.base import backend_class, names, nesting_vars, register, unregister

__all__ = ["backend_class", "names", "nesting_vars", "register", "unregister"]
