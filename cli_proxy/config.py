"""Gateway settings: defaults, then ``CLI_PROXY_*`` environment variables, then CLI flags.

Validated once and frozen. Each backend's own settings (``CLI_PROXY_CLAUDE__BIN``, or the
older ``CLI_PROXY_CLAUDE_BIN`` / ``claude_bin=``) are validated by that backend's options
model, for every registered backend.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from cli_proxy.backends.base import BackendOptions
from cli_proxy.backends.registry import backend_class, resident_mib
from cli_proxy.backends.registry import names as backend_names
from cli_proxy.protocol import ReasoningEffort
from cli_proxy.run.limits import (
    DEFAULT_IDLE_TIMEOUT_S,
    DEFAULT_QUEUE_TIMEOUT_S,
    DEFAULT_TIMEOUT_S,
    DEFAULT_WRITE_TIMEOUT_S,
    START_WINDOW_S,
)

ENV_PREFIX = "CLI_PROXY_"


def _collect_backend_options(data: dict[str, Any]) -> dict[str, BackendOptions]:
    """Per backend: nested env (``CLI_PROXY_<NAME>__<FIELD>``), the older flat env and keyword
    (``CLI_PROXY_<NAME>_BIN``, ``<name>_bin``), a nested mapping (``<name>={...}``); later
    wins."""
    out: dict[str, BackendOptions] = {}
    given = data.get("backend_options") or {}
    for name in backend_names():
        values: dict[str, Any] = {}
        nested = f"{ENV_PREFIX}{name.upper()}__"
        for key, value in os.environ.items():
            if key.startswith(nested):
                values[key[len(nested) :].lower()] = value
        flat = os.environ.get(f"{ENV_PREFIX}{name.upper()}_BIN")
        if flat is not None:
            values["bin"] = flat
        if data.get(f"{name}_bin") is not None:
            values["bin"] = data[f"{name}_bin"]
        for mapping in (data.get(name), given.get(name)):
            if isinstance(mapping, BackendOptions):
                values.update(mapping.model_dump())
            elif isinstance(mapping, dict):
                values.update(mapping)
        out[name] = backend_class(name).options_from(values)
    return out


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="ignore", frozen=True)

    host: str = "127.0.0.1"
    port: int = Field(default=8080, ge=0, le=65535)

    backends: Annotated[list[str], NoDecode] = Field(default_factory=lambda: [*backend_names()])
    backend_options: dict[str, Any] = Field(default_factory=dict)
    """name -> that backend's validated ``BackendOptions`` (filled from the sources above)."""

    api_keys: Annotated[list[SecretStr], NoDecode] = Field(default_factory=list)
    keys_file: Path | None = None
    """Named client keys with their limits, and model aliases (TOML; docs/keys.md). SIGHUP
    re-reads it. ``api_keys`` stay one more key, unnamed and without limits."""
    state_dir: Path | None = None
    """Where the usage per key is kept (SQLite); None: a per-user data dir
    (``$XDG_DATA_HOME/cli-proxy``). Used when ``keys_file`` is set."""
    allowed_hosts: Annotated[list[str], NoDecode] = Field(default_factory=list)
    """Host names served besides loopback ones ("*": any; only behind a trusted proxy)."""
    cors_origins: Annotated[list[str], NoDecode] = Field(default_factory=list)
    """Browser origins allowed to call the gateway ("*": any); others get 403."""

    max_concurrency: int | None = Field(default=None, ge=1)
    """CLI processes alive at once (running calls + spares); None: derived from the memory
    (limits.py, docs/configuration.md)."""
    max_starting: int | None = Field(default=None, ge=1)
    """CLIs starting at once (cold spawns and spare refills); None: the CPU count."""
    cli_memory_budget_mib: int | None = Field(default=None, ge=1)
    """Memory for CLI processes that derives the default process bound; None: half the
    machine's (or the cgroup's) memory."""
    start_window_s: float = Field(default=START_WINDOW_S, gt=0)
    """The longest one start holds a start slot."""
    max_queue: int = Field(default=64, ge=0)
    queue_timeout_s: float = Field(default=DEFAULT_QUEUE_TIMEOUT_S, ge=0)
    """The longest a call waits for a slot: then 429 + Retry-After; not taken from its time."""
    timeout_s: float = Field(default=DEFAULT_TIMEOUT_S, gt=0)
    """Whole call from admission (writing the answer included): a runaway guard."""
    idle_timeout_s: float = Field(default=DEFAULT_IDLE_TIMEOUT_S, gt=0)
    """The longest a CLI may print nothing (stdout or stderr) before it is taken for hung."""
    kill_grace_s: float = Field(default=3.0, ge=0)
    drain_timeout_s: float = Field(default=30.0, ge=0)
    """On SIGTERM: how long running calls may take to finish (a second signal: at once)."""
    keepalive_s: float = Field(default=15.0, ge=0)
    write_timeout_s: float = Field(default=DEFAULT_WRITE_TIMEOUT_S, gt=0)
    """A stream whose client takes no bytes for this long is dropped (CLI killed, slot freed)."""
    stream_head_hold_s: float = Field(default=10.0, ge=0)
    """A stream's HTTP head waits this long for the first answer event, so that a failure
    before any answer gets its real status (SDKs retry 429/5xx only then)."""

    max_body_bytes: int = Field(default=16 * 1024 * 1024, ge=1024)
    max_messages: int = Field(default=5000, ge=1)
    max_prompt_chars: int = Field(default=4_000_000, ge=1)
    max_answer_bytes: int = Field(default=8 * 1024 * 1024, ge=1024)
    """The model's answer (UTF-8 text and tool-call arguments) per call; beyond it the CLI is
    killed and the call fails with 502 ``answer_too_large``. Bounds the memory of a call."""
    max_images: int = Field(default=20, ge=0)
    max_image_bytes: int = Field(default=5 * 1024 * 1024, ge=1)
    max_image_total_bytes: int = Field(default=12 * 1024 * 1024, ge=1)
    image_fetch: bool = False
    """Fetch ``http(s)`` image URLs (else 400: send a data URL). Never from private,
    loopback or link-local addresses unless ``image_fetch_private``."""
    image_fetch_private: bool = False
    """Also fetch from private and loopback addresses (SSRF risk: trusted networks only)."""
    image_fetch_timeout_s: float = Field(default=10.0, gt=0)
    header_timeout_s: float = Field(default=15.0, gt=0)
    """A request's line and headers must arrive within this long of its first byte."""
    body_timeout_s: float = Field(default=60.0, gt=0)
    """A request body must arrive within this long of its headers (slow senders: 408)."""

    work_root: Path | None = None
    """Where the pdeathsig launcher makes host work dirs (default: $XDG_RUNTIME_DIR or
    ~/.cache, then cli-proxy/work); bwrap keeps them in memory."""
    launcher: str = "auto"
    """How each CLI is contained: ``bwrap`` (PID namespace, private /tmp, limited HOME),
    ``pdeathsig`` (no namespace), or ``auto`` (bwrap where it runs)."""

    warm_pool: bool = True
    """Pre-start one CLI process per recently used launch spec (docs/architecture.md)."""
    warm_max_per_key: int = Field(default=1, ge=0)
    warm_max_total: int = Field(default=4, ge=0)
    warm_max_age_s: float = Field(default=900.0, gt=0)
    warm_models: Annotated[list[str], NoDecode] = Field(default_factory=list)
    """Models whose spare starts with the gateway (others: after their first call)."""

    reasoning_effort: ReasoningEffort | None = None
    """The reasoning level when a request names none (None: each CLI's own default)."""
    reasoning_output: bool = False
    """Chat completions carry what the model thought as ``reasoning_content`` (message and
    deltas). Off: nothing changes on the wire. The Responses API shows reasoning when the
    request asks for a summary (``reasoning.summary``), whatever this says."""

    server_tools: Literal["drop", "refuse"] = "drop"
    """Server-side tools a request declares (web search, code execution, URL fetch: the API
    provider's, which no sealed CLI runs): ``drop`` leaves them out of what the model sees and
    names them in the ``x-cli-proxy-dropped-tools`` header and the request log; ``refuse``
    answers 400 instead. A ``tool_choice`` forcing one is a 400 either way."""

    function_list_threshold: int = Field(default=10, ge=0)
    sanitize_system: bool = True
    drop_env: Annotated[list[str], NoDecode] = Field(default_factory=list)
    pass_env: Annotated[list[str], NoDecode] = Field(default_factory=list)
    """More variables for the CLIs beyond each backend's allowlist (``AWS_*`` for Bedrock)."""

    record_dir: Path | None = None
    replay_dir: Path | None = None
    record_redact: Annotated[list[str], NoDecode] = Field(default_factory=list)
    """More regexes scrubbed from recordings besides the defaults (docs/fixtures.md); in
    ``CLI_PROXY_RECORD_REDACT`` one a line. A pattern's groups are replaced, else the match."""
    replay_speed: float = Field(default=0.0, ge=0)

    log_level: str = "info"
    log_prompts: bool = False
    log_json: bool = False

    @model_validator(mode="before")
    @classmethod
    def _backend_options(cls, data: Any) -> Any:
        if isinstance(data, dict):
            data = {**data, "backend_options": _collect_backend_options(data)}
        return data

    @field_validator(
        "backends",
        "api_keys",
        "drop_env",
        "pass_env",
        "warm_models",
        "allowed_hosts",
        "cors_origins",
        mode="before",
    )
    @classmethod
    def _comma_list(cls, value: object) -> object:
        if isinstance(value, str):
            return [v.strip() for v in value.split(",") if v.strip()]
        return value

    @field_validator("backends")
    @classmethod
    def _registered(cls, value: list[str]) -> list[str]:
        unknown = [b for b in value if b not in backend_names()]
        if unknown:
            raise ValueError(
                f"unknown backend(s) {', '.join(unknown)}; known: {', '.join(backend_names())}"
            )
        return value

    @field_validator("record_redact", mode="before")
    @classmethod
    def _pattern_lines(cls, value: object) -> object:
        if isinstance(value, str):
            return [line.strip() for line in value.splitlines() if line.strip()]
        return value

    @field_validator("record_redact")
    @classmethod
    def _compiles(cls, value: list[str]) -> list[str]:
        for pattern in value:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(
                    f"record_redact pattern {pattern!r} is not a regex: {exc}"
                ) from None
        return value

    def options_for(self, backend: str) -> BackendOptions:
        options: BackendOptions = self.backend_options[backend]
        return options

    def resident_mib(self) -> dict[str, int]:
        """Each enabled backend's measured CLI size mid-call (MiB), from the registry: the
        default process bound divides the memory budget by the largest (``run/limits.py``)."""
        return resident_mib(self.backends)
