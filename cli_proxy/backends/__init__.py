"""CLI backends. Each is one module; registering it here is the only other line it needs."""

from cli_proxy.backends.base import (
    Backend,
    BackendOptions,
    LaunchOptions,
    StreamParser,
    backend_class,
    names,
    register,
)
from cli_proxy.backends.claude import ClaudeBackend
from cli_proxy.backends.codex import CodexBackend
from cli_proxy.backends.gemini import GeminiBackend

register(ClaudeBackend)
register(GeminiBackend)
register(CodexBackend)

__all__ = [
    "Backend",
    "BackendOptions",
    "ClaudeBackend",
    "CodexBackend",
    "GeminiBackend",
    "LaunchOptions",
    "StreamParser",
    "backend_class",
    "names",
    "register",
]
