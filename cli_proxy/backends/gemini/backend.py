"""The Gemini CLI backend: argv, sealed workspace and user settings, private home, options."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

from cli_proxy.backends.acp.rpc import (
    ACP_PREFIX,
    agent_version,
    prompt_blocks,
)
from cli_proxy.backends.base import (
    Backend,
    BackendOptions,
    LaunchOptions,
    LoginState,
)
from cli_proxy.backends.gemini.login import gemini_login, personal_login_warning
from cli_proxy.backends.gemini.parser import GeminiParser
from cli_proxy.backends.system_prompt import MINIMAL_SYSTEM_PROMPT, SystemPrompt
from cli_proxy.plan.prompt import Prompt
from cli_proxy.plan.spec import PrivateHome
from cli_proxy.protocol import ChatCompletionRequest
from cli_proxy.run.logins import Login, read_json

# Workspace settings (they override the user's): no core tools, so the model cannot act on
# the host; one attempt, because a retried stream re-prints the text already streamed; no
# folder listing in the prompt (it would differ per call and defeat prompt caching); one
# model call per prompt and no loop detection: a model endpoint answers once, and the CLI's
# loop check sent a second request ("System: Potential loop detected ...") for an answer that
# quoted a repetitive prompt, then ended the call as max_turn_requests (docs/real-clis.md).
# No GEMINI.md of a parent dir: gemini sends every GEMINI.md from its work dir up to the
# nearest dir holding a boundary marker (default ``.git``), its @imports too, so a ``.git``
# in any parent of the work root let the files up to it reach the model
# (tests/data/real-cli/gemini-0.61.0-ancestor-instructions.md); no marker stops the walk at
# the work dir itself, which holds only our files.
CONTEXT_SETTINGS: dict[str, Any] = {"includeDirectoryTree": False, "memoryBoundaryMarkers": []}
WORKSPACE_SETTINGS = {
    "tools": {"core": [], "useRipgrep": False},
    "general": {"maxAttempts": 1},
    "context": CONTEXT_SETTINGS,
    "model": {"maxSessionTurns": 1, "disableLoopDetection": True},
}
# The user settings of the call's private GEMINI_CLI_HOME: the user's own are never read
# (they can run hooks, load .env, skills and memory into the prompt; see
# tests/data/real-cli/gemini-sealing.md); only the auth type is carried over.
USER_SETTINGS: dict[str, Any] = {
    "privacy": {"usageStatisticsEnabled": False},
    "skills": {"enabled": False},
    "hooksConfig": {"enabled": False},
    "general": {"maxAttempts": 1},
    "context": CONTEXT_SETTINGS,
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
    # measured in one node process (GEMINI_CLI_NO_RELAUNCH; bench/capacity.py, 2026-11-28):
    # 212 MiB RSS at rest and mid-call, 199 peak for `gemini --version` alone
    resident_mib = 300
    at_rest_mib = 210
    login_files = (".gemini/oauth_creds.json",)
    login_vars = ("GEMINI_API_KEY", "GOOGLE_API_KEY", "GOOGLE_APPLICATION_CREDENTIALS")
    login_how = "run `gemini` once and log in, or set GEMINI_API_KEY"
    warm_prefix = ACP_PREFIX
    duplex = True
    accepts_images = True  # ACP image blocks, in place (inlineData upstream)
    known_models = ("gemini-2.5-pro", "gemini-2.5-flash", "gemini-2.5-flash-lite")
    env_allow = ("GEMINI_*", "GOOGLE_*", "CLOUDSDK_*")
    nesting_vars: ClassVar[frozenset[str]] = frozenset(
        {"GEMINI_CLI", "GEMINI_CLI_IDE_SERVER_PORT", "GEMINI_CLI_IDE_WORKSPACE_PATH"}
    )

    def argv(self, launch: LaunchOptions) -> list[str]:
        return [
            *self.command,
            "--acp",
            f"--model={launch.model}",  # one word: no model name can be read as an option
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
        # a login that needs a new consent never opens a browser or a callback port on the
        # gateway host: it prints its URL on stdout, the sign the parser reads
        env["NO_BROWSER"] = "true"
        # gemini.js otherwise starts a second node process with a larger heap and runs in it:
        # one process instead of two halves a start's time and CPU (3.25 -> 1.8 s for
        # `gemini --version` on 0.61.0, docs/performance.md); a one-call process needs no
        # heap beyond node's default (tests/data/real-cli/gemini-0.61.0-no-relaunch.md)
        env["GEMINI_CLI_NO_RELAUNCH"] = "true"
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
        """Only the session set-up: the prompt needs the session's id, so the parser sends it
        (``prompt_blocks``) once ``session/new`` has answered."""
        return self.warm_prefix

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

    @classmethod
    def login_state(cls, env: Mapping[str, str], home: Path, drop: frozenset[str]) -> LoginState:
        """Doctor's login fact, with a warning when it is only a personal Google login (no
        key, Vertex AI or Code Assist project): Code Assist refuses those since 2026-06-18."""
        state = super().login_state(env, home, drop)
        creds = home / ".gemini" / "oauth_creds.json"
        auth = _auth_type(home / ".gemini" / "settings.json")
        warning = personal_login_warning(auth, creds.is_file(), env, drop)
        if warning is None:
            return state
        return LoginState(state.present, state.detail, warning)

    def new_parser(self, prompt: Prompt, request: ChatCompletionRequest) -> GeminiParser:
        return GeminiParser(prompt_blocks(prompt), request.model)

    @classmethod
    def cli_version(cls, stdout_lines: Sequence[str]) -> str | None:
        return agent_version(stdout_lines)


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


def _auth_type(path: Path) -> str | None:
    """The user's chosen auth type, the one thing taken from their settings (cached: one
    stat while the file is unchanged)."""
    try:
        auth = (read_json(path) or {})["security"]["auth"]["selectedType"]
    except (KeyError, TypeError):
        return None
    return auth if isinstance(auth, str) else None
