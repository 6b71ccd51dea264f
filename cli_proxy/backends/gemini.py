"""Gemini CLI: ``gemini --output-format stream-json``."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

from ..events import CliEvent, CliText, Truncated, UsageReport
from ..logins import RELOGIN, Login, gemini_login, read_json
from ..plan import PrivateHome
from ..prompt import Prompt
from ..protocol import ChatCompletionRequest
from .base import (
    Backend,
    BackendOptions,
    LaunchOptions,
    StreamParser,
    as_int,
    classify_failure,
    empty_answer,
    exit_failure,
    load_json_line,
)
from .system_prompt import MINIMAL_SYSTEM_PROMPT, SystemPrompt

# Workspace settings (they override the user's): no core tools, so the model cannot act on
# the host; one attempt, because a retried stream re-prints the text already streamed; no
# folder listing in the prompt (it would differ per call and defeat prompt caching).
WORKSPACE_SETTINGS = {
    "tools": {"core": [], "useRipgrep": False},
    "general": {"maxAttempts": 1},
    "context": {"includeDirectoryTree": False},
}
# The user settings of the call's private GEMINI_CLI_HOME: the user's own are never read
# (they can run hooks, load .env, skills and memory into the prompt; see
# tests/data/real-cli/gemini-sealing.md); only the auth type is carried over.
USER_SETTINGS: dict[str, Any] = {
    "privacy": {"usageStatisticsEnabled": False},
    "skills": {"enabled": False},
    "hooksConfig": {"enabled": False},
    "general": {"maxAttempts": 1},
    "context": {"includeDirectoryTree": False},
}
# The login lives in these files of the user's ~/.gemini; they are linked, never copied.
LOGIN_FILES = ("oauth_creds.json", "google_accounts.json", "installation_id")
# ``@name`` in the prompt inlines a work-dir file; the work dir ignores every file.
GEMINIIGNORE = b"*\n"
# ``minimal``: the system instruction is this work-dir file's text (GEMINI_SYSTEM_MD, read
# relative to the CLI's cwd, which is the call's work dir with every launcher).
SYSTEM_MD = ".gemini/system.md"
# GEMINI_SYSTEM_MD from the gateway's environment or a .env file gemini finds would read a
# host file into the system prompt, GEMINI_WRITE_SYSTEM_MD writes the prompt to disk: both
# are always set here ("false": off), and a .env file never overrides a set variable.


class GeminiOptions(BackendOptions):
    bin: str = "gemini"
    system_prompt: SystemPrompt = "minimal"
    """``minimal`` (default): the gateway's short neutral system instruction in place of
    gemini's ~21.5 kB agent prompt; ``cli``: gemini's own (``CLI_PROXY_GEMINI__SYSTEM_PROMPT``)."""


class GeminiBackend(Backend):
    name = "gemini"
    options_model = GeminiOptions
    model_prefixes = ("gemini-",)
    home_paths = (".gemini",)
    # gemini exits 42 ("No input provided via stdin") when nothing arrives soon after start;
    # a newline keeps it waiting. Every call's stdin starts with it, warm or cold, so both send
    # the same prompt upstream.
    warm_prefix = b"\n"
    known_models = ("gemini-2.5-pro", "gemini-2.5-flash", "gemini-2.5-flash-lite")
    env_allow = ("GEMINI_*", "GOOGLE_*", "CLOUDSDK_*")
    nesting_vars: ClassVar[frozenset[str]] = frozenset(
        {"GEMINI_CLI", "GEMINI_CLI_IDE_SERVER_PORT", "GEMINI_CLI_IDE_WORKSPACE_PATH"}
    )

    def argv(self, launch: LaunchOptions) -> list[str]:
        return [
            *self.command,
            "--output-format",
            "stream-json",
            "--model",
            launch.model,
            # no extension or MCP server may add tools; core tools are off via settings
            "--extensions",
            "none",
            "--allowed-mcp-server-names",
            "none",
        ]

    def env(self, base: Mapping[str, str]) -> dict[str, str]:
        env = super().env(base)
        # the working directory is our own empty temp dir; trusting it loads our settings
        env["GEMINI_CLI_TRUST_WORKSPACE"] = "true"
        env["TZ"] = "UTC"  # the date in its session context follows the time zone
        return self.system_prompt_env(env)

    def workdir_files(self, launch: LaunchOptions) -> tuple[tuple[str, bytes], ...]:
        settings = dict(WORKSPACE_SETTINGS)
        if launch.effort is not None:
            settings["modelConfigs"] = _thinking_override(launch.model, launch.effort)
        return (
            (".gemini/settings.json", json.dumps(settings).encode()),
            (".geminiignore", GEMINIIGNORE),
            *self.system_prompt_files(),
        )

    @property
    def minimal_system_prompt(self) -> bool:
        return getattr(self.options, "system_prompt", "minimal") == "minimal"

    def system_prompt_env(self, env: Mapping[str, str]) -> dict[str, str]:
        """``env`` with the system-prompt variables set: our file (``minimal``) or off."""
        system_md = SYSTEM_MD if self.minimal_system_prompt else "false"
        return {**env, "GEMINI_SYSTEM_MD": system_md, "GEMINI_WRITE_SYSTEM_MD": "false"}

    def system_prompt_files(self) -> tuple[tuple[str, bytes], ...]:
        """The work-dir file GEMINI_SYSTEM_MD names (``minimal`` only)."""
        if not self.minimal_system_prompt:
            return ()
        return ((SYSTEM_MD, MINIMAL_SYSTEM_PROMPT.encode()),)

    def encode_prompt(self, prompt: Prompt, request: ChatCompletionRequest) -> bytes:
        return self.warm_prefix + prompt.text.encode("utf-8")

    def private_home(self, user_home: str) -> PrivateHome:
        """GEMINI_CLI_HOME relocates all of ~/.gemini (memory, settings, hooks, chats,
        projects.json): a fresh one per call holds our settings and links the login."""
        real = Path(user_home) / ".gemini"
        settings = dict(USER_SETTINGS)
        auth = _auth_type(real / "settings.json")
        if auth is not None:
            settings["security"] = {"auth": {"selectedType": auth}}
        login = tuple(
            (f".gemini/{name}", str(real / name)) for name in LOGIN_FILES if (real / name).is_file()
        )
        return PrivateHome(
            env=("HOME", "GEMINI_CLI_HOME"),
            files=((".gemini/settings.json", json.dumps(settings).encode()),),
            login=login,
        )

    def login(self, user_home: str, env: Mapping[str, str]) -> Login | None:
        real = Path(user_home) / ".gemini"
        return gemini_login(real / "oauth_creds.json", _auth_type(real / "settings.json"), env)

    def new_parser(self, prompt: Prompt, request: ChatCompletionRequest) -> GeminiParser:
        return GeminiParser()


class GeminiParser(StreamParser):
    """Reads init/message/result/error lines; user-role messages are prompt echoes."""

    def __init__(self) -> None:
        self.done = False
        self._text_seen = False
        self._failed = False
        self._truncated = False

    def feed(self, line: bytes) -> list[CliEvent]:
        obj = load_json_line(line)
        if obj is None:
            return []
        kind = obj.get("type")
        if kind == "message" and obj.get("role") == "assistant":
            content = obj.get("content")
            if isinstance(content, str) and content:
                self._text_seen = True
                return [CliText(content)]
            return []
        if kind == "result":
            return self._result(obj)
        if kind == "error" and obj.get("severity", "error") == "error":
            message = _message(obj)
            if _TRUNCATED.search(message):
                # the token limit cut the answer before any text: finish "length", not a
                # failure (with text, gemini 0.61.0 gives no signal at all: reported "stop")
                self._truncated = True
                return [Truncated(message)]
            return self._fail(message)
        return []

    def _result(self, obj: dict[str, Any]) -> list[CliEvent]:
        self.done = True
        events: list[CliEvent] = []
        stats = obj.get("stats")
        if isinstance(stats, dict):
            # input_tokens includes the implicitly cached part, which ``cached`` counts
            events.append(
                UsageReport(
                    as_int(stats.get("input_tokens")),
                    as_int(stats.get("output_tokens")),
                    as_int(stats.get("cached")),
                )
            )
        if obj.get("status") not in (None, "success") and not self._truncated:
            events.extend(self._fail(_message(obj)))
        return events

    def _fail(self, message: str) -> list[CliEvent]:
        if self._failed:
            return []
        self._failed = True
        return [classify_failure(message, RELOGIN["gemini"])]

    def finish(self, exit_code: int, stderr: str) -> list[CliEvent]:
        if self._failed:
            return []
        if exit_code != 0:
            return [exit_failure(exit_code, stderr, "gemini", RELOGIN["gemini"])]
        if not self._text_seen and not self._truncated:
            return [empty_answer("gemini")]
        return []


# OpenAI reasoning levels -> Gemini 2.5 thinking budgets (tokens; flash allows 0..24576);
# Gemini 3 models take a thinking level instead. No gemini flag exists: a workspace settings
# override matched on the model does it (tests/data/real-cli/gemini-sealing.md, Q5).
GEMINI_BUDGET = {"none": 0, "minimal": 512, "low": 1024, "medium": 8192, "high": 24576}
GEMINI_LEVEL = {"none": "low", "minimal": "low", "low": "low", "medium": "high", "high": "high"}


def _thinking_override(model: str, effort: str) -> dict[str, Any]:
    effort = "high" if effort == "xhigh" else effort
    if model.startswith("gemini-3"):
        thinking: dict[str, Any] = {"thinkingLevel": GEMINI_LEVEL[effort]}
    else:
        thinking = {"thinkingBudget": GEMINI_BUDGET[effort]}
    config = {"generateContentConfig": {"thinkingConfig": thinking}}
    return {"customOverrides": [{"match": {"model": model}, "modelConfig": config}]}


_TRUNCATED = re.compile(r"truncated because it exceeded the token limit", re.I)


def _auth_type(path: Path) -> str | None:
    """The user's chosen auth type, the one thing taken from their settings (cached: one
    stat while the file is unchanged)."""
    try:
        auth = (read_json(path) or {})["security"]["auth"]["selectedType"]
    except (KeyError, TypeError):
        return None
    return auth if isinstance(auth, str) else None


def _message(obj: dict[str, Any]) -> str:
    err = obj.get("error")
    if isinstance(err, dict):
        msg = err.get("message")
        if isinstance(msg, str) and msg:
            return msg
    if isinstance(err, str) and err:
        return err
    msg = obj.get("message")
    return msg if isinstance(msg, str) and msg else "gemini reported an error"
