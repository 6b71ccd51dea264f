"""OpenAI Codex CLI: ``codex exec --json``, sealed (tests/data/real-cli/codex-sealing.md).

Codex declares its own tools per model, either as a ``tools`` array or as an
``additional_tools`` input item, and no single flag removes them all. Three things together
leave the upstream request with no tool at all, for catalog and unknown models alike: a
model catalog with every per-model tool mode removed (``SEALED_CATALOG``), feature disables
and config keys (``argv``), and trimmed context (no environment, permission or AGENTS.md
text; our own base instructions unless ``system_prompt`` is ``cli``). Each call gets a
private CODEX_HOME holding only our config; ``--ephemeral`` and ``history.persistence =
"none"`` keep the prompt off its disk.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

from ..events import CliEvent, CliText, Failure, Truncated, UsageReport
from ..failures import FailureKind
from ..logins import RELOGIN, Login, codex_login, read_json
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

log = logging.getLogger(__name__)

PROVIDER = "cli_proxy"
"""Our own model provider: the built-in ``openai`` one cannot be changed (its retries stay
on) and tries Responses-over-WebSocket first. ``requires_openai_auth`` makes it use the
ChatGPT login in auth.json, or ``CODEX_API_KEY`` when that is set."""

CHATGPT_BASE_URL = "https://chatgpt.com/backend-api/codex"
API_BASE_URL = "https://api.openai.com/v1"

BASE_INSTRUCTIONS = MINIMAL_SYSTEM_PROMPT
"""With ``system_prompt = "minimal"`` (the default) this replaces codex's 17-22 kB "You are
Codex" base instructions, which describe its shell and patch tools: a model told about them
tries to call them (and the call only loops)."""

# Features whose tools or context must stay off. shell_tool and unified_exec matter for
# models missing from the catalog (they get fallback metadata); multi_agent, view_image and
# goals drop tools of every model; the rest are defence in depth against future defaults.
DISABLED_FEATURES = (
    "code_mode_host",
    "multi_agent",
    "sleep_tool",
    "shell_tool",
    "unified_exec",
    "view_image",
    "apps",
    "plugins",
    "goals",
    "image_generation",
    "computer_use",
    "browser_use",
    "tool_suggest",
    "skill_search",
    "hooks",
    "in_app_browser",
    "skill_mcp_dependency_install",
    "workspace_dependencies",
)

# ``--config`` overrides (TOML values); --strict-config refuses any key this version does
# not know, so a renamed key fails the call instead of silently unsealing it.
SEALED_CONFIG = (
    'web_search="disabled"',
    "tools.experimental_request_user_input.enabled=false",
    "skills.bundled.enabled=false",  # no <skills_instructions>, no skills written to the home
    "include_environment_context=false",  # no cwd, shell, date or sandbox profile
    "include_permissions_instructions=false",
    "include_collaboration_mode_instructions=false",
    "include_apps_instructions=false",
    "project_doc_max_bytes=0",  # no AGENTS.md from the work dir or its parents
    'history.persistence="none"',
    "analytics.enabled=false",
    'approval_policy="never"',
)

# OpenAI reasoning levels -> codex ``model_reasoning_effort`` (the same names).
CODEX_EFFORT = {
    "none": "none",
    "minimal": "minimal",
    "low": "low",
    "medium": "medium",
    "high": "high",
    "xhigh": "xhigh",
}

# Per catalog model: what declares a tool or describes one. The built-in catalog gives
# most models a JS ``exec`` tool (tool_mode "code_mode_only") and collaboration tools
# (multi_agent_version "v2") that no feature flag removes.
_CATALOG_DROP = (
    "apply_patch_tool_type",
    "tool_mode",
    "multi_agent_version",
    "multi_agent_reasoning_effort",
    "web_search_tool_type",
)
_CATALOG_SET: dict[str, Any] = {
    "shell_type": "disabled",
    "experimental_supported_tools": [],
    "supports_search_tool": False,
    "include_skills_usage_instructions": False,
    "include_plugin_usage_instructions": False,
    "include_apps_usage_instructions": False,
    # per-personality instruction templates: with personality off, codex 0.169.0 sent the
    # same request with or without them (cli mode), and they are most of the catalog's size
    "model_messages": None,
}
# ``minimal`` only: codex's own base instructions (which name its tools) give way to ours.
_CATALOG_MINIMAL: dict[str, Any] = {
    "base_instructions": BASE_INSTRUCTIONS,  # (shrinks the catalog from ~750 kB to ~20 kB)
}
FALLBACK_CATALOG: dict[str, Any] = {
    "models": [
        {
            "slug": "gpt-5.5",
            "display_name": "GPT-5.5",
            "description": "gpt-5.5 as codex 0.169.0 describes it",
            "default_reasoning_level": "medium",
            "supported_reasoning_levels": [
                {"effort": e, "description": e} for e in ("low", "medium", "high", "xhigh")
            ],
            "shell_type": "disabled",
            "visibility": "list",
            "supported_in_api": True,
            "priority": 13,
            "additional_speed_tiers": [],
            "service_tiers": [],
            "availability_nux": None,
            "upgrade": None,
            "default_reasoning_summary": "none",
            "support_verbosity": True,
            "default_verbosity": "low",
            "truncation_policy": {"mode": "tokens", "limit": 10000},
            "supports_image_detail_original": True,
            "context_window": 272000,
            "max_context_window": 272000,
            "comp_hash": "2911",
            "effective_context_window_percent": 95,
            "input_modalities": ["text", "image"],
            "supports_experimental_context": False,
            "use_responses_lite": False,
            "supports_reasoning_effort_updates": False,
            "node_repl_auto_review_required": False,
            "node_repl_disabled": False,
            **_CATALOG_SET,
            **_CATALOG_MINIMAL,
        }
    ]
}
"""Used when the binary gives no catalog: codex refuses an empty one ("must contain at least
one model"), and without one its built-in catalog models keep their tools. This one entry
(gpt-5.5 as 0.169.0 lists it, sealed) is accepted; every other model then runs on fallback
metadata, which the feature disables alone seal (tested). A codex version that rejects it
fails the call: closed, never unsealed. Its entry carries our instructions in both modes:
codex refuses an entry with none ("missing both base_instructions and model_messages"), and
without the binary's catalog codex's own text for it is unknown."""


def seal_catalog(
    catalog: dict[str, Any], system_prompt: SystemPrompt = "minimal"
) -> dict[str, Any]:
    """``codex debug models`` output with every per-model tool mode removed (and, for
    ``minimal``, codex's own instructions replaced by ours)."""
    models = catalog.get("models")
    out = []
    for model in models if isinstance(models, list) else []:
        if isinstance(model, dict) and isinstance(model.get("slug"), str):
            sealed = {k: v for k, v in model.items() if k not in _CATALOG_DROP}
            sealed.update(_CATALOG_SET)
            if system_prompt == "minimal":
                sealed.update(_CATALOG_MINIMAL)
            out.append(sealed)
    return {**catalog, "models": out}


_catalogs: dict[tuple[Any, ...], bytes] = {}
_catalog_lock = threading.Lock()


def sealed_catalog(
    command: list[str], path_env: str, system_prompt: SystemPrompt = "minimal"
) -> bytes:
    """The sealed catalog of this codex binary, made once per binary (path, size, mtime).

    Made from the binary itself, so a new version's models and catalog fields come along;
    a catalog shipped with the gateway would go stale with every codex release. ``codex
    debug models`` takes ~0.1 s, too slow for every call, so the result is kept in memory
    and written into each call's private home (the first plan per binary waits for it).
    If it fails (not codex, or a new output format) ``FALLBACK_CATALOG`` stands in.
    """
    key = (system_prompt, *_binary_key(command, path_env))
    with _catalog_lock:
        cached = _catalogs.get(key)
        if cached is None:
            cached = json.dumps(_make_catalog(command, path_env, system_prompt)).encode()
            _catalogs[key] = cached
        return cached


def _binary_key(command: list[str], path_env: str) -> tuple[Any, ...]:
    found = shutil.which(command[0], path=path_env) if os.sep not in command[0] else command[0]
    try:
        real = os.path.realpath(found) if found else command[0]
        st = os.stat(real)
        return (*command, real, st.st_size, st.st_mtime_ns)
    except OSError:
        return (*command, None)


def _make_catalog(command: list[str], path_env: str, system_prompt: SystemPrompt) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="cli-proxy-codex-catalog-") as home:
        env = {"PATH": path_env, "HOME": home, "CODEX_HOME": home, "LANG": "C.UTF-8"}
        try:
            done = subprocess.run(
                [*command, "debug", "models"],
                env=env,
                cwd=home,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=30,
                check=False,
            )
            out = done.stdout.decode("utf-8", "replace")
            # a command line that merges stderr puts codex's warnings before the JSON
            catalog, _ = json.JSONDecoder().raw_decode(out[out.find("{") :])
        except (OSError, subprocess.SubprocessError, ValueError) as exc:
            log.warning("codex model catalog unavailable (%s): the fallback catalog", exc)
            return FALLBACK_CATALOG
    sealed = seal_catalog(catalog, system_prompt) if isinstance(catalog, dict) else {"models": []}
    if not sealed["models"]:
        log.warning("codex debug models printed no catalog: the fallback catalog")
        return FALLBACK_CATALOG
    return sealed


class CodexOptions(BackendOptions):
    bin: str = "codex"
    base_url: str | None = None
    """The Responses API base URL (``CLI_PROXY_CODEX__BASE_URL``). Default: ChatGPT's codex
    backend for a ChatGPT login, api.openai.com for an API key (``CODEX_API_KEY`` or an
    API-key login). Tests point it at a fake API on loopback."""
    system_prompt: SystemPrompt = "minimal"
    """``minimal`` (default): the gateway's short instructions in place of codex's own;
    ``cli``: codex's own per-model instructions (17-22 kB), which describe shell and patch
    tools the model does not have here (``CLI_PROXY_CODEX__SYSTEM_PROMPT``)."""


class CodexBackend(Backend):
    name = "codex"
    options_model = CodexOptions
    # Explicit families only: ``gpt-`` as a whole would also claim models codex cannot
    # serve on a ChatGPT plan (gpt-4o, gpt-3.5, image models); ``codex/<model>`` reaches any.
    model_prefixes = ("gpt-5", "gpt-6", "codex-", "o1-", "o3-", "o4-")
    aliases = ("o1", "o3", "o4")
    home_paths = (".codex",)
    known_models = ("gpt-5.5", "gpt-6.1-sol", "gpt-5.6-sol", "gpt-5.6-luna")
    env_allow = ("CODEX_API_KEY", "CODEX_CA_CERTIFICATE")
    nesting_vars: ClassVar[frozenset[str]] = frozenset(
        {
            "CODEX_SANDBOX",
            "CODEX_SANDBOX_NETWORK_DISABLED",
            "CODEX_THREAD_ID",
            "CODEX_SESSION_ID",
            "CODEX_CI",
            "CODEX_MANAGED_BY_NPM",
        }
    )
    # codex exec waits for stdin's end with no time limit (measured: 70 s): no warm prefix.
    merge_stderr = True  # a model call to a disabled tool shows only on stderr (it loops)

    def argv(self, launch: LaunchOptions) -> list[str]:
        argv = [
            *self.command,
            "exec",
            "--json",
            "--strict-config",
            "--skip-git-repo-check",
            "--ephemeral",  # no rollout file or thread history holding the prompt
            "--sandbox",
            "read-only",  # nothing can run anyway; should a tool slip in, it cannot write
            f"--model={launch.model}",  # one word: no model name can be read as an option
        ]
        for feature in DISABLED_FEATURES:
            argv += ["--disable", feature]
        for item in SEALED_CONFIG:
            argv += ["--config", item]
        if launch.effort is not None:
            argv += ["--config", f'model_reasoning_effort="{CODEX_EFFORT[launch.effort]}"']
        return argv

    def env(self, base: Mapping[str, str]) -> dict[str, str]:
        env = super().env(base)
        env["NO_COLOR"] = "1"
        return env

    def login(self, user_home: str, env: Mapping[str, str]) -> Login | None:
        return codex_login(Path(user_home) / ".codex" / "auth.json", env)

    def private_home(self, user_home: str) -> PrivateHome:
        """CODEX_HOME holds config, state and AGENTS.md (always sent, whatever the flags): a
        fresh one per call has only our config, the sealed catalog and instructions, and
        links the user's auth.json (a ChatGPT login: codex refreshes it by writing a temp file
        beside the real one and renaming it over it; ``containment._login_binds``)."""
        auth = Path(user_home) / ".codex" / "auth.json"
        login = (("auth.json", str(auth)),) if auth.is_file() else ()
        path_env = os.environ.get("PATH", os.defpath)
        return PrivateHome(
            env=("HOME", "CODEX_HOME"),
            files=(
                ("config.toml", self._config(auth, login != ()).encode()),
                ("catalog.json", sealed_catalog(self.command, path_env, self.system_prompt)),
                *self.system_prompt_files(),
            ),
            login=login,
        )

    @property
    def system_prompt(self) -> SystemPrompt:
        if isinstance(self.options, CodexOptions):
            return self.options.system_prompt
        return "minimal"

    def system_prompt_files(self) -> tuple[tuple[str, bytes], ...]:
        """``minimal``: the instructions file the config names (codex reads it for models
        missing from the catalog, whose fallback metadata would carry codex's own text)."""
        if self.system_prompt != "minimal":
            return ()
        return (("instructions.md", BASE_INSTRUCTIONS.encode()),)

    def _config(self, auth: Path, logged_in: bool) -> str:
        base_url = self.options.base_url if isinstance(self.options, CodexOptions) else None
        if base_url is None:
            key = "CODEX_API_KEY" in os.environ and "CODEX_API_KEY" not in self.drop_env
            chatgpt = logged_in and not key and _chatgpt_login(auth)
            base_url = CHATGPT_BASE_URL if chatgpt else API_BASE_URL
        instructions = self.system_prompt == "minimal"
        # relative paths are resolved against CODEX_HOME
        return (
            f'model_provider = "{PROVIDER}"\n'
            'model_catalog_json = "catalog.json"\n'
            + ('model_instructions_file = "instructions.md"\n' if instructions else "")
            + 'cli_auth_credentials_store = "file"\n'
            f"[model_providers.{PROVIDER}]\n"
            f'name = "{PROVIDER}"\n'
            f"base_url = {json.dumps(base_url)}\n"
            'wire_api = "responses"\n'
            "requires_openai_auth = true\n"
            # one retry layer, the client's: the gateway answers 429/5xx with their status
            "request_max_retries = 0\n"
            "stream_max_retries = 0\n"
        )

    def warm_up(self) -> None:
        """The binary's sealed catalog (``codex debug models``, ~0.1 s and up to 30 s) is made
        here, off the event loop, before the first plan writes it into a private home."""
        sealed_catalog(self.command, os.environ.get("PATH", os.defpath), self.system_prompt)

    def new_parser(self, prompt: Prompt, request: ChatCompletionRequest) -> CodexParser:
        return CodexParser()


def _chatgpt_login(auth: Path) -> bool:
    data = read_json(auth)  # cached: one stat while the file is unchanged
    return data is not None and (
        data.get("auth_mode") == "chatgpt"
        or (isinstance(data.get("tokens"), dict) and not data.get("OPENAI_API_KEY"))
    )


# --json item types that mean the CLI ran (or started) one of its own tools.
CLI_TOOL_ITEMS = frozenset(
    {
        "command_execution",
        "file_change",
        "mcp_tool_call",
        "collab_tool_call",
        "web_search",
        "todo_list",
        "image_view",
    }
)
_UNSUPPORTED_CALL = re.compile(r"unsupported (?:custom tool )?call: ?([\w.:-]*)")
_OVERLOADED = re.compile(r"experiencing high demand|server_is_overloaded|slow_down", re.I)
_TRUNCATED = re.compile(r"max_output_tokens|max output tokens", re.I)


def cli_tool_failure(what: str) -> Failure:
    return Failure(
        FailureKind.INVALID_ANSWER,
        f"the model called the Codex CLI's own tool {what}, which is disabled; "
        "the call was stopped (codex would otherwise ask the model again without end)",
    )


class CodexParser(StreamParser):
    """Reads codex's ``--json`` events (thread.*, turn.*, item.*, error).

    Codex 0.169.0 prints each agent message whole in ``item.completed``: no text deltas,
    so a stream gets the answer in one piece. ``item.updated`` with a growing text is read
    as deltas too, should a version send them. A model call to one of codex's own tools
    shows only as a stderr line (``unsupported call: NAME``); a line like it on stdout, or
    any tool item, ends the call at once.
    """

    def __init__(self) -> None:
        self.done = False
        self._texts: dict[str, str] = {}  # agent message id -> text sent so far
        self._text_seen = False
        self._failed = False
        self._truncated = False
        self._last_error = ""
        self._plain_lines: list[str] = []  # the last non-JSON lines: stderr, when merged

    def feed(self, line: bytes) -> list[CliEvent]:
        obj = load_json_line(line)
        if obj is None:
            return self._plain(line)
        kind = obj.get("type")
        if kind in ("item.started", "item.updated", "item.completed"):
            item = obj.get("item")
            return self._item(item) if isinstance(item, dict) else []
        if kind == "turn.completed":
            self.done = True
            usage = obj.get("usage")
            if not isinstance(usage, dict):
                return []
            # input_tokens includes the cached part; output_tokens the reasoning tokens
            return [
                UsageReport(
                    as_int(usage.get("input_tokens")),
                    as_int(usage.get("output_tokens")),
                    as_int(usage.get("cached_input_tokens")),
                )
            ]
        if kind == "turn.failed":
            self.done = True
            err = obj.get("error")
            message = err.get("message") if isinstance(err, dict) else None
            return self._fail(message if isinstance(message, str) else self._last_error)
        if kind == "error":  # also "Reconnecting... n/5" retries; turn.failed is final
            message = obj.get("message")
            if isinstance(message, str) and message:
                self._last_error = message
        return []

    def _plain(self, line: bytes) -> list[CliEvent]:
        """A non-JSON line: codex's stderr (merged into stdout, ``merge_stderr``)."""
        text = line.decode("utf-8", "replace").rstrip()
        self._plain_lines = [*self._plain_lines[-19:], text]
        m = _UNSUPPORTED_CALL.search(text)
        if m is None or self._failed:
            return []
        self.done = True
        self._failed = True
        return [cli_tool_failure(m.group(1) or "(unnamed)")]

    def _item(self, item: dict[str, Any]) -> list[CliEvent]:
        itype = item.get("type")
        if itype == "agent_message":
            text = item.get("text")
            if not isinstance(text, str):
                return []
            key = str(item.get("id"))
            sent = self._texts.get(key)
            if sent is None:
                # a later message of the same turn: keep the two apart
                prefix = "\n\n" if self._text_seen and text else ""
                sent = self._texts[key] = ""
            else:
                prefix = ""
            if not text.startswith(sent):
                return []  # a rewritten message cannot be unsent; keep what went out
            new = text[len(sent) :]
            if not new:
                return []
            self._texts[key] = text
            self._text_seen = True
            return [CliText(prefix + new)]
        if itype in CLI_TOOL_ITEMS and not self._failed:
            self.done = True
            self._failed = True
            return [cli_tool_failure(f"({itype})")]
        return []

    def _fail(self, message: str) -> list[CliEvent]:
        if self._failed:
            return []
        if _TRUNCATED.search(message):
            self._truncated = True
            return [Truncated(message)]
        self._failed = True
        return [codex_failure(message or "codex reported a failed turn")]

    def finish(self, exit_code: int, stderr: str) -> list[CliEvent]:
        stderr = stderr or "\n".join(self._plain_lines)
        m = _UNSUPPORTED_CALL.search(stderr)
        if m is not None and not self._failed:
            self._failed = True
            return [cli_tool_failure(m.group(1) or "(unnamed)")]
        if self._failed:
            return []
        if exit_code != 0 and not self._truncated:
            self._failed = True
            if self._last_error:
                return [codex_failure(self._last_error)]
            failure = exit_failure(exit_code, stderr, "codex", RELOGIN["codex"])
            return [codex_failure(failure.message)]
        if not self._text_seen and not self._truncated:
            return [empty_answer("codex")]
        return []


def codex_failure(message: str) -> Failure:
    """``classify_failure`` plus codex's own wording: its 5xx message is a generic "high
    demand" text (the upstream body is dropped), an overload, not a CLI error."""
    failure = classify_failure(message, RELOGIN["codex"])
    if failure.kind is FailureKind.CLI_ERROR and _OVERLOADED.search(message):
        return Failure(FailureKind.OVERLOADED, failure.message)
    return failure
