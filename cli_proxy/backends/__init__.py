"""CLI backends. Each is one module; registering it here is the only other line it needs."""

from .base import (
    Backend,
    BackendOptions,
    LaunchOptions,
    StreamParser,
    backend_class,
    names,
    register,
)
from .claude import ClaudeBackend
from .codex import CodexBackend
from .gemini import GeminiBackend

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
