"""CLI backends: how to start each CLI and how to read its stream-json output."""

from .base import Backend, CallOptions, StreamParser
from .claude import ClaudeBackend
from .gemini import GeminiBackend

__all__ = ["Backend", "CallOptions", "ClaudeBackend", "GeminiBackend", "StreamParser"]
