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
import re
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar
from xml.sax.saxutils import escape

from pydantic import Field

from cli_proxy import __version__
from cli_proxy.backends.base import (
    Backend,
    BackendOptions,
    LaunchOptions,
    StreamParser,
    as_int,
    classify_failure,
    empty_answer,
    exit_failure,
    kind_for_status,
    load_json_line,
    retry_after_s,
)
from cli_proxy.backends.codex.login import RELOGIN, chatgpt_login, codex_login
from cli_proxy.backends.system_prompt import MINIMAL_SYSTEM_PROMPT, SystemPrompt
from cli_proxy.failures import FailureKind
from cli_proxy.plan.images import PromptImage, image_parts
from cli_proxy.plan.prompt import Prompt, choice_rules, flatten
from cli_proxy.plan.spec import PrivateHome
from cli_proxy.protocol import (
    AssistantMessage,
    ChatCompletionRequest,
    Content,
    FunctionMessage,
    ImagePart,
    Message,
    SystemMessage,
    ToolMessage,
    UserMessage,
)
from cli_proxy.read.events import (
    CliEvent,
    CliText,
    CliThinking,
    CliToolCall,
    Failure,
    Truncated,
    UsageReport,
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
    call_window_s: float = Field(default=0.4, ge=0, le=10)
    """After a model's call of a client function, how long to wait for more calls of the same
    response (``parallel_tool_calls``) before the turn is interrupted and the calls handed
    over (``CLI_PROXY_CODEX__CALL_WINDOW_S``). Codex reports nothing of the response's end
    while a call is unanswered; 0 hands over the first call at once."""


# JSON-RPC ids of our requests: fixed, so a recorded run replays with the same parser.
INIT_ID, THREAD_ID, INJECT_ID, TURN_ID, INTERRUPT_ID = 1, 2, 3, 4, 5
CLIENT_NAME = "cli_proxy"  # codex puts it in the upstream originator / user-agent headers


QUIET = (
    "remoteControl/status/changed",  # names the host and its installation id
    "account/rateLimits/updated",
    "thread/status/changed",
    "thread/started",
    "mcpServer/startupStatus/updated",
)
"""Notifications the parser never reads: not sent, not recorded in fixtures."""


def rpc(msg_id: int | None, method: str, params: dict[str, Any] | None = None) -> bytes:
    """One JSON-RPC message as app-server reads it: one JSON object per line."""
    obj: dict[str, Any] = {"method": method}
    if msg_id is not None:
        obj = {"id": msg_id, **obj}
    if params is not None:
        obj["params"] = params
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"


WARM_PREFIX = rpc(
    INIT_ID,
    "initialize",
    {
        "clientInfo": {"name": CLIENT_NAME, "title": "cli-proxy", "version": __version__},
        # dynamicTools (the client's functions as native tools) are an experimental field
        "capabilities": {"experimentalApi": True, "optOutNotificationMethods": list(QUIET)},
    },
) + rpc(None, "initialized")
"""What every codex process gets first, warm or cold: nothing in it depends on the request,
so a pre-started app-server has done its start-up and its handshake before a call comes."""


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
            m = _USER_AGENT.search(line)
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


# ------------------------------------------------------------------- the request as items


@dataclass(frozen=True, slots=True)
class Channel:
    """One request as app-server messages (docs/prompt-format.md, "codex").

    ``thread``: the ``thread/start`` params (ephemeral; the client's functions as dynamic
    tools with their schemas unchanged; the prompt's instructions, rules and system context
    as developer instructions). ``items``: every turn before the last user message as raw
    Responses items (user and assistant messages, ``function_call``,
    ``function_call_output``), for ``thread/inject_items``. ``input``: that last user
    message (text and images in place) for ``turn/start``, empty when the conversation ends
    with tool results. ``output_schema``: a strict ``json_schema`` response format."""

    thread: dict[str, Any]
    items: tuple[dict[str, Any], ...] = ()
    input: tuple[dict[str, Any], ...] = ()
    output_schema: dict[str, Any] | None = None


def channel(prompt: Prompt, req: ChatCompletionRequest) -> Channel:
    """Pure and deterministic: the same request gives the same bytes (replay, caching)."""
    images = iter(prompt.images)
    image_urls = {
        id(part): _data_url(next(images), part.image_url.detail)
        for _, part, _ in image_parts(req.messages)
    }
    declared = bool(req.tools) and req.tool_choice != "none"
    tools = [
        {
            "type": "function",
            "name": t.function.name,
            "description": t.function.description or "",
            "inputSchema": t.function.parameters or {"type": "object", "properties": {}},
        }
        for t in (req.tools or [])
        if declared
    ]
    fmt = req.response_format
    spec = fmt.json_schema if fmt is not None and fmt.type == "json_schema" else None
    schema = spec.get("schema") if spec and spec.get("strict") is True else None
    output_schema = schema if isinstance(schema, dict) else None
    head = prompt.head
    instructions, _, system = head.partition("<system_context>")
    if output_schema is not None:
        instructions = ""  # the schema travels as the turn's structured-output format
    rules = choice_rules(req, req.parallel_tool_calls is not False) if declared else []
    developer = instructions
    if rules:
        developer += "<rules>\n" + "".join(f"<rule>{escape(r)}</rule>\n" for r in rules)
        developer += "</rules>\n\n"
    if system:
        developer += "<system_context>" + system
    thread: dict[str, Any] = {"ephemeral": True}
    if tools:
        thread["dynamicTools"] = tools
    if developer.strip():
        thread["developerInstructions"] = developer.strip()
    turns = [m for m in req.messages if not isinstance(m, SystemMessage)]
    last = turns[-1] if turns and isinstance(turns[-1], UserMessage) else None
    items = _items(turns[:-1] if last is not None else turns, image_urls)
    turn_input: list[dict[str, Any]] = []
    if last is not None:
        for part in _parts(last.content, image_urls):
            if part["type"] == "input_text":
                turn_input.append({"type": "text", "text": part["text"], "text_elements": []})
            else:
                image = {"type": "image", "url": part["image_url"]}
                if part.get("detail"):
                    image["detail"] = part["detail"]
                turn_input.append(image)
    return Channel(thread, tuple(items), tuple(turn_input), output_schema)


def _data_url(image: PromptImage, detail: str | None) -> tuple[str, str | None]:
    """The image as decoded and checked by the gateway (its media type sniffed from the
    bytes, not taken from the client's data URL)."""
    return f"data:{image.media_type};base64,{image.base64}", detail


def _parts(content: Content, images: dict[int, tuple[str, str | None]]) -> list[dict[str, Any]]:
    """Message content as Responses input parts, images in place."""
    if content is None or isinstance(content, str):
        return [{"type": "input_text", "text": content or ""}]
    out: list[dict[str, Any]] = []
    for part in content:
        if isinstance(part, ImagePart) and id(part) in images:
            url, detail = images[id(part)]
            image: dict[str, Any] = {"type": "input_image", "image_url": url}
            if detail in ("low", "high", "auto", "original"):
                image["detail"] = detail
            out.append(image)
        else:
            out.append({"type": "input_text", "text": flatten([part])})
    return out or [{"type": "input_text", "text": ""}]


def _items(
    messages: Sequence[Message], images: dict[int, tuple[str, str | None]]
) -> list[dict[str, Any]]:
    """The turns as raw Responses items. Every ``function_call`` gets a
    ``function_call_output`` (the API refuses a call without one): a call no tool message
    answers gets a note saying so; a tool message whose call is unknown becomes user text."""
    answered = {m.tool_call_id for m in messages if isinstance(m, ToolMessage)}
    legacy = 0
    legacy_ids: dict[str, str] = {}  # function name -> the id of its last legacy call
    known: set[str] = set()
    out: list[dict[str, Any]] = []
    for msg in messages:
        if isinstance(msg, UserMessage):
            out.append({"type": "message", "role": "user", "content": _parts(msg.content, images)})
        elif isinstance(msg, AssistantMessage):
            text = flatten(msg.content)
            calls = [(c.id, c.function.name, c.function.arguments) for c in msg.tool_calls or []]
            if msg.function_call is not None:
                legacy += 1
                call_id = f"call_legacy_{legacy}"
                legacy_ids[msg.function_call.name] = call_id
                calls.append((call_id, msg.function_call.name, msg.function_call.arguments))
            if text or not calls:
                content = [{"type": "output_text", "text": text}]
                out.append({"type": "message", "role": "assistant", "content": content})
            for call_id, name, args in calls:
                known.add(call_id)
                out.append(
                    {"type": "function_call", "call_id": call_id, "name": name, "arguments": args}
                )
                if call_id not in answered and not call_id.startswith("call_legacy_"):
                    out.append(_output(call_id, NO_RESULT))
        elif isinstance(msg, ToolMessage):
            if msg.tool_call_id in known:
                parts = _parts(msg.content, images)
                texts_only = all(p["type"] == "input_text" for p in parts)
                output: Any = "\n".join(p["text"] for p in parts) if texts_only else parts
                out.append(_output(msg.tool_call_id, output))
            else:
                text = f"Result of function call {msg.tool_call_id} (its call is not in this "
                text += "conversation):\n"
                parts = [{"type": "input_text", "text": text}, *_parts(msg.content, images)]
                out.append({"type": "message", "role": "user", "content": parts})
        elif isinstance(msg, FunctionMessage):
            legacy_id = legacy_ids.pop(msg.name, None)
            if legacy_id is not None:
                out.append(_output(legacy_id, flatten(msg.content)))
            else:
                text = f"Result of function {msg.name}:\n{flatten(msg.content)}"
                content = [{"type": "input_text", "text": text}]
                out.append({"type": "message", "role": "user", "content": content})
    for call_id in legacy_ids.values():  # legacy calls never answered
        index = next(i for i, it in enumerate(out) if it.get("call_id") == call_id)
        out.insert(index + 1, _output(call_id, NO_RESULT))
    return out


NO_RESULT = "No result: the conversation did not answer this call."


def _output(call_id: str, output: Any) -> dict[str, Any]:
    return {"type": "function_call_output", "call_id": call_id, "output": output}


# ------------------------------------------------------------------------------ the parser

# Thread items that mean codex itself ran (or started) one of its own tools.
CLI_TOOL_ITEMS = frozenset(
    {
        "commandExecution",
        "fileChange",
        "mcpToolCall",
        "collabAgentToolCall",
        "subAgentActivity",
        "webSearch",
        "imageView",
        "imageGeneration",
        "sleep",
    }
)
_USER_AGENT = re.compile(rf'"userAgent":"{CLIENT_NAME}/([0-9][\w.+-]*)')
_UNSUPPORTED_CALL = re.compile(r"unsupported (?:custom tool )?call: ?([\w.:-]*)")
_OVERLOADED = re.compile(r"experiencing high demand|server_is_overloaded|slow_down", re.I)
_TRUNCATED = re.compile(r"max_output_tokens|max output tokens", re.I)
_ERROR_KINDS = {
    "unauthorized": FailureKind.AUTH,
    "usageLimitExceeded": FailureKind.RATE_LIMITED,
    "rateLimitExceeded": FailureKind.RATE_LIMITED,
    "serverOverloaded": FailureKind.OVERLOADED,
    "internalServerError": FailureKind.OVERLOADED,  # codex drops the body: "high demand"
    "contextWindowExceeded": FailureKind.CONTEXT_LENGTH,
    "badRequest": FailureKind.BAD_REQUEST,
    "modelNotFound": FailureKind.BAD_REQUEST,
}


def cli_tool_failure(what: str) -> Failure:
    """A model call codex refused: one of its own (disabled) tools, or a name that is no tool
    at all. Codex would answer the model "unsupported call" and ask again without end."""
    return Failure(
        FailureKind.INVALID_ANSWER,
        f"the model called {what}, which is not one of the request's functions (the Codex "
        "CLI's own tools are disabled); the call was stopped (codex would otherwise ask the "
        "model again without end)",
    )


class CodexParser(StreamParser):
    """Drives one app-server call and reads it (JSON-RPC, one message per line).

    After the handshake's answer it sends ``thread/start``, then ``thread/inject_items``
    (when there are earlier turns), then ``turn/start``. Text deltas are answer text as they
    arrive; reasoning summary deltas are thinking. A model call of a client function comes
    as an ``item/tool/call`` request: it becomes a ``CliToolCall`` and is never answered;
    ``turn/interrupt`` then ends the turn with nothing more sent upstream. With
    ``parallel_tool_calls: false`` the interrupt goes out at once. Otherwise more calls of
    the same response may follow, and codex says nothing of the response's end while a call
    is unanswered (measured: no token usage, no notification for 40 s; an interrupt sent at
    the first call lost the second one), so the parser waits until no call came for
    ``call_window_s`` (its ``wake_s`` timer) and then interrupts. ``turn/completed`` ends
    the call. A model call of one of codex's own tools, or of a name that is no tool at all,
    shows only on stderr (merged): codex would answer "unsupported call" and ask again.
    """

    def __init__(
        self,
        channel: Channel | None = None,
        parallel: bool = True,
        call_window_s: float = 0.4,
    ) -> None:
        self.done = False
        self.wake_s = None
        self.channel = channel or Channel({"ephemeral": True})
        self.parallel = parallel
        self.call_window_s = call_window_s
        self._call_at = 0.0
        self._out = bytearray()
        self._thread_id: str | None = None
        self._turn_id: str | None = None
        self._texts: dict[str, str] = {}  # agent message id -> text sent so far
        self._thought: set[str] = set()  # reasoning items whose deltas were sent
        self._text_seen = False
        self._calls = 0
        self._interrupted = False
        self._failed = False
        self._truncated = False
        self._last_error = ""
        self._plain_lines: list[str] = []  # the last non-JSON lines: stderr, merged

    def replies(self) -> bytes:
        out, self._out = bytes(self._out), bytearray()
        return out

    def _send(self, msg_id: int | None, method: str, params: dict[str, Any]) -> None:
        self._out += rpc(msg_id, method, params)

    def feed(self, line: bytes) -> list[CliEvent]:
        events = self._read(line)
        self._tick()
        return events

    def _read(self, line: bytes) -> list[CliEvent]:
        if not line:
            return []  # our timer (``wake_s``)
        obj = load_json_line(line)
        if obj is None:
            return self._plain(line)
        method = obj.get("method")
        params = obj.get("params")
        params = params if isinstance(params, dict) else {}
        if isinstance(method, str):
            if "id" in obj:
                return self._request(obj["id"], method, params)
            return self._notification(method, params)
        if "id" in obj:
            return self._response(obj.get("id"), obj)
        return []

    # -------------------------------------------------------------------- our requests

    def _response(self, msg_id: Any, obj: dict[str, Any]) -> list[CliEvent]:
        error = obj.get("error")
        if msg_id == INTERRUPT_ID:
            return []  # refused only when the turn has already ended
        if error is not None:
            what = {INIT_ID: "initialize", THREAD_ID: "thread/start", INJECT_ID: "the history"}
            message = error.get("message") if isinstance(error, dict) else None
            text = f"codex app-server refused {what.get(msg_id, 'turn/start')}: {message}"
            return self._fail(Failure(FailureKind.CLI_ERROR, text))
        result = obj.get("result")
        result = result if isinstance(result, dict) else {}
        if msg_id == INIT_ID:
            self._send(THREAD_ID, "thread/start", self.channel.thread)
        elif msg_id == THREAD_ID:
            thread = result.get("thread")
            tid = thread.get("id") if isinstance(thread, dict) else None
            if not isinstance(tid, str):
                return self._fail(Failure(FailureKind.CLI_ERROR, "codex started no thread"))
            self._thread_id = tid
            if self.channel.items:
                items = list(self.channel.items)
                self._send(INJECT_ID, "thread/inject_items", {"threadId": tid, "items": items})
            else:
                self._start_turn()
        elif msg_id == INJECT_ID:
            self._start_turn()
        elif msg_id == TURN_ID:
            turn = result.get("turn")
            self._turn_id = _str(turn.get("id") if isinstance(turn, dict) else None)
        return []

    def _start_turn(self) -> None:
        params: dict[str, Any] = {"threadId": self._thread_id, "input": list(self.channel.input)}
        if self.channel.output_schema is not None:
            params["outputSchema"] = self.channel.output_schema
        self._send(TURN_ID, "turn/start", params)

    def _interrupt(self) -> None:
        """Hand the calls over: the turn ends with nothing more sent upstream."""
        self.wake_s = None
        if not self._interrupted:
            self._interrupted = True
            params = {"threadId": self._thread_id, "turnId": self._turn_id}
            self._send(INTERRUPT_ID, "turn/interrupt", params)

    def _tick(self) -> None:
        """After any line or timer: the call window is over when no call came for that long."""
        if self.wake_s is None or self._interrupted:
            return
        left = self._call_at + self.call_window_s - time.monotonic()
        if left <= 0:
            self._interrupt()
        else:
            self.wake_s = left

    # --------------------------------------------------------------- codex's requests

    def _request(self, msg_id: Any, method: str, params: dict[str, Any]) -> list[CliEvent]:
        if method == "item/tool/call":
            if self._failed or self._interrupted:
                return []
            self._calls += 1
            self._turn_id = self._turn_id or _str(params.get("turnId"))
            name = params.get("tool")
            args = params.get("arguments")
            text = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)
            if self.parallel and self.call_window_s > 0:
                # more calls of the same response may follow: wait for a quiet window
                self._call_at = time.monotonic()
                self.wake_s = self.call_window_s
            else:
                self._interrupt()
            return [CliToolCall(str(name), text)]
        # approvals, user input, MCP elicitation...: nothing of the sort may happen sealed
        self._out += (
            json.dumps(
                {"id": msg_id, "error": {"code": -32601, "message": "not available"}}
            ).encode()
            + b"\n"
        )
        if method.endswith("requestApproval") or method in (
            "applyPatchApproval",
            "execCommandApproval",
        ):
            return self._fail(cli_tool_failure(f"({method})"))
        return []

    # ---------------------------------------------------------------- notifications

    def _notification(self, method: str, params: dict[str, Any]) -> list[CliEvent]:
        if method == "item/agentMessage/delta":
            delta = params.get("delta")
            return self._text(str(params.get("itemId")), delta) if isinstance(delta, str) else []
        if method in ("item/reasoning/summaryTextDelta", "item/reasoning/textDelta"):
            delta = params.get("delta")
            if isinstance(delta, str) and delta and not self._failed:
                self._thought.add(str(params.get("itemId")))
                return [CliThinking(delta)]
            return []
        if method == "item/reasoning/summaryPartAdded":
            index = params.get("summaryIndex")
            return [CliThinking("\n\n")] if isinstance(index, int) and index > 0 else []
        if method in ("item/started", "item/completed"):
            item = params.get("item")
            return self._item(item, method == "item/completed") if isinstance(item, dict) else []
        if method == "thread/tokenUsage/updated":
            return self._usage(params)
        if method == "error":
            err = params.get("error")
            if isinstance(err, dict) and not params.get("willRetry"):
                self._last_error = _error_text(err)
            return []
        if method == "turn/completed":
            return self._completed(params.get("turn"))
        return []

    def _text(self, item_id: str, delta: str) -> list[CliEvent]:
        if self._failed or not delta:
            return []
        sent = self._texts.get(item_id)
        prefix = ""
        if sent is None:  # a later message of the same turn: keep the two apart
            prefix = "\n\n" if self._text_seen else ""
            sent = ""
        self._texts[item_id] = sent + delta
        self._text_seen = True
        return [CliText(prefix + delta)]

    def _item(self, item: dict[str, Any], completed: bool) -> list[CliEvent]:
        itype = item.get("type")
        if itype in CLI_TOOL_ITEMS:
            return self._fail(cli_tool_failure(f"({itype})"))
        if not completed:
            return []
        item_id = str(item.get("id"))
        if itype == "agentMessage":  # whatever no delta carried (a version without them)
            text = item.get("text")
            sent = self._texts.get(item_id, "")
            if isinstance(text, str) and text.startswith(sent) and len(text) > len(sent):
                return self._text(item_id, text[len(sent) :])
        if itype == "reasoning" and item_id not in self._thought and not self._failed:
            summary = item.get("summary")
            parts = (
                [s for s in summary if isinstance(s, str) and s]
                if isinstance(summary, list)
                else []
            )
            return [CliThinking("\n\n".join(parts))] if parts else []
        return []

    def _usage(self, params: dict[str, Any]) -> list[CliEvent]:
        usage = params.get("tokenUsage")
        total = usage.get("total") if isinstance(usage, dict) else None
        if not isinstance(total, dict):
            return []
        # inputTokens includes the cached part; outputTokens the reasoning tokens
        return [
            UsageReport(
                as_int(total.get("inputTokens")),
                as_int(total.get("outputTokens")),
                as_int(total.get("cachedInputTokens")),
                as_int(total.get("reasoningOutputTokens")),
            )
        ]

    def _completed(self, turn: Any) -> list[CliEvent]:
        self.done = True
        self.wake_s = None
        turn = turn if isinstance(turn, dict) else {}
        status = turn.get("status")
        if status == "failed":
            err = turn.get("error")
            return self._fail(turn_failure(err if isinstance(err, dict) else {}, self._last_error))
        if status == "interrupted" and not (self._interrupted or self._calls):
            return self._fail(Failure(FailureKind.CLI_ERROR, "codex interrupted the turn"))
        return []

    def _plain(self, line: bytes) -> list[CliEvent]:
        """A non-JSON line: codex's stderr (merged into stdout, ``merge_stderr``)."""
        text = line.decode("utf-8", "replace").rstrip()
        self._plain_lines = [*self._plain_lines[-19:], text]
        m = _UNSUPPORTED_CALL.search(text)
        if m is None:
            return []
        return self._fail(cli_tool_failure(m.group(1) or "(unnamed)"))

    def _fail(self, failure: Failure | Truncated) -> list[CliEvent]:
        if self._failed or self._truncated:
            return []
        if isinstance(failure, Truncated):
            self._truncated = True
        else:
            self._failed = True
        self.done = True
        self.wake_s = None
        return [failure]

    def finish(self, exit_code: int, stderr: str) -> list[CliEvent]:
        stderr = stderr or "\n".join(self._plain_lines)
        m = _UNSUPPORTED_CALL.search(stderr)
        if m is not None:
            return self._fail(cli_tool_failure(m.group(1) or "(unnamed)"))
        if self._failed or self._truncated:
            return []
        if not self.done:
            if self._last_error:
                return self._fail(codex_failure(self._last_error))
            failure = exit_failure(exit_code, stderr, "codex app-server", RELOGIN)
            if exit_code == 0:
                failure = Failure(FailureKind.CLI_ERROR, "codex app-server ended before its turn")
            return self._fail(codex_failure(failure.message))
        if not self._text_seen and not self._calls:
            return [empty_answer("codex")]
        return []


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _error_text(err: dict[str, Any]) -> str:
    message = err.get("message")
    text = message if isinstance(message, str) else ""
    details = err.get("additionalDetails")
    if isinstance(details, str) and details and details not in text:
        text = f"{text} ({details})" if text else details
    return text


def turn_failure(err: dict[str, Any], fallback: str = "") -> Failure | Truncated:
    """A failed turn's ``TurnError``: codex's own error class first, its message after."""
    message = _error_text(err) or fallback or "codex reported a failed turn"
    if _TRUNCATED.search(message):
        return Truncated(message)
    info = err.get("codexErrorInfo")
    failure = codex_failure(message)
    kind = _ERROR_KINDS.get(info) if isinstance(info, str) else None
    if isinstance(info, dict):
        for value in info.values():
            status = value.get("httpStatusCode") if isinstance(value, dict) else None
            if isinstance(status, int):
                kind = kind_for_status(status, failure.kind)
    if kind is None or kind is failure.kind or failure.kind is FailureKind.LOGIN_EXPIRED:
        return failure  # a login that is gone stays that, whatever class codex gives it
    wait = retry_after_s(message) if kind is FailureKind.RATE_LIMITED else None
    return Failure(kind, message, wait)


def codex_failure(message: str) -> Failure:
    """``classify_failure`` plus codex's own wording: its 5xx message is a generic "high
    demand" text (the upstream body is dropped), an overload, not a CLI error."""
    failure = classify_failure(message, RELOGIN)
    if failure.kind is FailureKind.CLI_ERROR and _OVERLOADED.search(message):
        return Failure(FailureKind.OVERLOADED, failure.message)
    return failure
