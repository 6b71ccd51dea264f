"""The backend registry: the one table of the CLIs this gateway can run.

Adding a backend is its folder (``backends/<name>/``) and one ``register`` line here; the
gateway, routing, limits, doctor, fixtures and ``/openapi.json`` read every backend through
this table and the ``Backend`` interface. Import names from here (not from ``base``): importing
this module is what registers the built-in backends.
"""

from cli_proxy.backends.base import backend_class, names, nesting_vars, register, unregister
from cli_proxy.backends.claude.backend import ClaudeBackend
from cli_proxy.backends.codex.backend import CodexBackend
from cli_proxy.backends.copilot.backend import CopilotBackend
from cli_proxy.backends.gemini.backend import GeminiBackend

register(ClaudeBackend)
register(GeminiBackend)
register(CodexBackend)
register(CopilotBackend)

__all__ = ["backend_class", "names", "nesting_vars", "register", "unregister"]
