"""The backend interface: argv + env to start a CLI, and a parser for its output."""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from ..events import CliEvent, Failure

# Variables a parent Claude Code / Gemini CLI session sets; inherited, they make the
# child believe it is nested inside another agent session and misbehave.
NESTING_VARS = frozenset(
    {
        "CLAUDECODE",
        "CLAUDE_CODE_ENTRYPOINT",
        "CLAUDE_CODE_SSE_PORT",
        "CLAUDE_AGENT_SDK_VERSION",
        "CLAUDE_CODE_SESSION_ID",
        "GEMINI_CLI",
        "GEMINI_CLI_IDE_SERVER_PORT",
        "GEMINI_CLI_IDE_WORKSPACE_PATH",
        "TERM_PROGRAM_VERSION",
    }
)


@dataclass(frozen=True, slots=True)
class CallOptions:
    model: str
    stream_partial: bool = False


class StreamParser(Protocol):
    """Stateful reader of one CLI run's stdout, line by line."""

    def feed(self, line: bytes) -> list[CliEvent]: ...

    def finish(self, exit_code: int, stderr: str) -> list[CliEvent]: ...


class Backend(Protocol):
    name: str

    def argv(self, options: CallOptions) -> list[str]: ...

    def env(self, base: Mapping[str, str]) -> dict[str, str]: ...

    def prepare_workdir(self, path: Path) -> None:
        """Write per-run files (e.g. settings) into the CLI's fresh, empty working directory."""

    def new_parser(self) -> StreamParser: ...


def split_command(command: str) -> list[str]:
    """A configured binary may be a command line (``python fake_cli.py``)."""
    parts = shlex.split(command)
    if not parts:
        raise ValueError("empty CLI command")
    return parts


def scrub_env(base: Mapping[str, str], drop: frozenset[str] = frozenset()) -> dict[str, str]:
    return {
        k: v
        for k, v in base.items()
        if k not in NESTING_VARS and k not in drop and not k.startswith("CLI_PROXY_")
    }


def as_int(value: Any) -> int:
    """A token count from untrusted JSON: anything but a real int counts as 0."""
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def load_json_line(line: bytes) -> dict[str, Any] | None:
    """One stream-json line as a dict, or None for blank lines and non-JSON noise."""
    line = line.strip()
    if not line.startswith(b"{"):
        return None
    try:
        obj = json.loads(line)
    except ValueError:
        return None
    return obj if isinstance(obj, dict) else None


_RATE = re.compile(
    r"\b429\b|rate.?limit|quota|resource.?exhausted|usage limit|too many requests", re.I
)
_AUTH = re.compile(
    r"\b401\b|\b403\b|unauthori[sz]ed|unauthenticated|authentication|invalid (?:x-)?api.?key|"
    r"not logged in|please run /login|log ?in again|invalid auth|permission denied|credential",
    re.I,
)
_OVERLOAD = re.compile(r"\b529\b|\b503\b|overloaded|unavailable", re.I)
_TOO_LONG = re.compile(
    r"prompt is too long|context length|context window|input token count.*exceeds|too many tokens",
    re.I,
)
_TIMEOUT = re.compile(r"timed? ?out|timeout|deadline exceeded", re.I)


def classify_failure(message: str, default_status: int = 502) -> Failure:
    """Map a CLI error message to the HTTP status an OpenAI client acts on."""
    message = message.strip() or "the CLI failed without a message"
    if _TOO_LONG.search(message):
        return Failure(400, message, "context_length_exceeded")
    if _RATE.search(message):
        return Failure(429, message, "rate_limit_exceeded")
    if _AUTH.search(message):
        return Failure(401, message, "cli_auth_failed")
    if _OVERLOAD.search(message):
        return Failure(503, message, "cli_overloaded")
    if _TIMEOUT.search(message):
        return Failure(504, message, "cli_timeout")
    return Failure(default_status, message, "cli_error")


def exit_failure(exit_code: int, stderr: str, what: str) -> Failure:
    """Failure for a CLI that exited non-zero without saying why on stdout."""
    tail = _last_lines(stderr)
    message = f"{what} exited with code {exit_code}" + (f": {tail}" if tail else "")
    failure = classify_failure(tail)
    return Failure(failure.status, message, failure.code)


def _last_lines(text: str, limit: int = 600) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    out = " | ".join(lines[-5:])
    return out[-limit:]
