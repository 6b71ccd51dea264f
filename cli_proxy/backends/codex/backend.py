"""OpenAI Codex CLI: ``codex app-server``, JSON-RPC over stdio, sealed
(tests/data/real-cli/codex-sealing.md, codex-appserver.md).

One fresh app-server per call, one ephemeral thread, one turn. The client's functions are
the thread's dynamic tools (plain function tools upstream, schemas unchanged); earlier turns
are injected as raw Responses items (messages, ``function_call``, ``function_call_output``);
the last user message is the turn's input, images in place. Text and reasoning arrive as
deltas; a model's call of a client function arrives as an ``item/tool/call`` request and is
handed to the client (``turn/interrupt``: nothing more goes upstream).

Codex declares its own tools per model, either as a ``tools`` array or as an
``additional_tools`` input item, and no single flag removes them all. Three things together
leave the upstream request with no tool but the client's, for catalog and unknown models
alike: a model catalog with every per-model tool mode removed (``SEALED_CATALOG``), feature
disables and config keys (``argv``), and trimmed context (no environment, permission or
AGENTS.md text; our own base instructions unless ``system_prompt`` is ``cli``). Each call
gets a private CODEX_HOME holding only our config; an ephemeral thread and
``history.persistence = "none"`` keep the prompt off its disk.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import ClassVar

from pydantic import Field

from cli_proxy.backends.base import (
    Backend,
    BackendOptions,
    LaunchOptions,
)
from cli_proxy.backends.codex.catalog import BASE_INSTRUCTIONS, sealed_catalog
from cli_proxy.backends.codex.items import channel
from cli_proxy.backends.codex.login import chatgpt_login, codex_login
from cli_proxy.backends.codex.parser import USER_AGENT, CodexParser
from cli_proxy.backends.codex.rpc import WARM_PREFIX
from cli_proxy.backends.system_prompt import SystemPrompt
from cli_proxy.plan.prompt import Prompt
from cli_proxy.plan.spec import PrivateHome
from cli_proxy.protocol import (
    ChatCompletionRequest,
)
from cli_proxy.run.logins import Login

log = logging.getLogger(__name__)

PROVIDER = "cli_proxy"
"""Our own model provider: the built-in ``openai`` one cannot be changed (its retries stay
on) and tries Responses-over-WebSocket first. ``requires_openai_auth`` makes it use the
ChatGPT login in auth.json; with ``CODEX_API_KEY`` set, ``env_key`` names that variable
(app-server, unlike ``codex exec``, never reads it on its own: no Authorization header at all,
tests/data/real-cli/codex-0.169.0-api-key.md) and no auth.json is linked."""

CHATGPT_BASE_URL = "https://chatgpt.com/backend-api/codex"
API_BASE_URL = "https://api.openai.com/v1"


# Features whose tools or context must stay off. shell_tool and unified_exec matter for
# models missing from the catalog (they get fallback metadata); multi_agent, view_image and
# goals drop tools of every model; shell_snapshot ran the user's shell at each start and wrote
# its whole environment, CODEX_API_KEY included, to the private home's shell_snapshots/ for a
# shell tool that is never offered; the rest are defence in depth against future defaults.
DISABLED_FEATURES = (
    "code_mode_host",
    "shell_snapshot",
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

# app-server takes no exec flags: the sandbox and approvals as config (nothing can run anyway;
# should a tool slip in, it cannot write, and nothing asks for an approval)
APP_SERVER_CONFIG = ('sandbox_mode="read-only"',)

# OpenAI reasoning levels -> codex ``model_reasoning_effort`` (the same names).
CODEX_EFFORT = {
    "none": "none",
    "minimal": "minimal",
    "low": "low",
    "medium": "medium",
    "high": "high",
    "xhigh": "xhigh",
}


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
    call_window_s: float = Field(default=0.4, ge=0, le=10)
    """After a model's call of a client function, how long to wait for more calls of the same
    response (``parallel_tool_calls``) before the turn is interrupted and the calls handed
    over (``CLI_PROXY_CODEX__CALL_WINDOW_S``). Codex reports nothing of the response's end
    while a call is unanswered; 0 hands over the first call at once."""


class CodexBackend(Backend):
    name = "codex"
    options_model = CodexOptions
    # Explicit families only: ``gpt-`` as a whole would also claim models codex cannot
    # serve on a ChatGPT plan (gpt-4o, gpt-3.5, image models); ``codex/<model>`` reaches any.
    model_prefixes = ("gpt-5", "gpt-6", "codex-", "o1-", "o3-", "o4-")
    aliases = ("o1", "o3", "o4")
    resident_mib = 200  # measured: 106 MiB at rest, 166 mid-call (bench/capacity.py)
    at_rest_mib = 100
    login_files = (".codex/auth.json",)
    login_vars = ("CODEX_API_KEY",)
    login_how = "run `codex login`, or set CODEX_API_KEY"
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
    warm_prefix = WARM_PREFIX
    duplex = True  # JSON-RPC both ways: thread, items and turn follow the handshake
    native_tools = True  # the client's functions are codex dynamic tools
    accepts_images = True  # ``image`` input items, in place
    # a model call to a disabled codex tool shows only as a log line on stderr
    merge_stderr = True

    def argv(self, launch: LaunchOptions) -> list[str]:
        argv = [*self.command, "app-server", "--strict-config", "--listen", "stdio://"]
        for feature in DISABLED_FEATURES:
            argv += ["--disable", feature]
        for item in (*SEALED_CONFIG, *APP_SERVER_CONFIG):
            argv += ["--config", item]
        argv += ["--config", f"model={json.dumps(launch.model)}"]
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
        # with a key, no login: codex would still refresh an expired one (outside the gate)
        login = (("auth.json", str(auth)),) if auth.is_file() and not self._api_key() else ()
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

    def _api_key(self) -> bool:
        """Whether the call uses ``CODEX_API_KEY`` (the gateway's, passed through)."""
        return bool(os.environ.get("CODEX_API_KEY")) and "CODEX_API_KEY" not in self.drop_env

    def _config(self, auth: Path, logged_in: bool) -> str:
        key = self._api_key()
        base_url = self.options.base_url if isinstance(self.options, CodexOptions) else None
        if base_url is None:
            chatgpt = logged_in and not key and chatgpt_login(auth)
            base_url = CHATGPT_BASE_URL if chatgpt else API_BASE_URL
        instructions = self.system_prompt == "minimal"
        # the key by name, read from the environment: the key itself is not in this file
        env_key = 'env_key = "CODEX_API_KEY"\n' if key else ""
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
            f"{env_key}"
            "requires_openai_auth = true\n"
            # one retry layer, the client's: the gateway answers 429/5xx with their status
            "request_max_retries = 0\n"
            "stream_max_retries = 0\n"
        )

    @classmethod
    def cli_version(cls, stdout_lines: Sequence[str]) -> str | None:
        """From the handshake's user agent: ``cli_proxy/0.169.0 (...)``."""
        for line in stdout_lines[:5]:
            m = USER_AGENT.search(line)
            if m is not None:
                return m.group(1)
        return None

    def warm_up(self) -> None:
        """The binary's sealed catalog (``codex debug models``, ~0.1 s and up to 30 s) is made
        here, off the event loop, before the first plan writes it into a private home."""
        sealed_catalog(self.command, os.environ.get("PATH", os.defpath), self.system_prompt)

    def encode_prompt(self, prompt: Prompt, request: ChatCompletionRequest) -> bytes:
        """Only the handshake: the parser sends the thread, the items and the turn once the
        handshake's answer arrives (warm or cold, the same bytes reach codex)."""
        return self.warm_prefix

    def new_parser(self, prompt: Prompt, request: ChatCompletionRequest) -> CodexParser:
        window = self.options.call_window_s if isinstance(self.options, CodexOptions) else 0.4
        parallel = request.parallel_tool_calls is not False
        return CodexParser(channel(prompt, request), parallel, window)
