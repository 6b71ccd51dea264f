"""The backend interface: everything specific to one CLI lives in one subclass.

A backend says how to start its CLI (argv, env, work-dir files), how the prompt is encoded
on its stdin, which model names it serves, how to read its stdout, and which settings it
takes. The gateway, routing, replay and ``commands`` loop over the registry
(``backends/registry.py``, the table) and never name a backend.
"""

from __future__ import annotations

import functools
import json
import re
import shlex
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field

from cli_proxy.backends.registry import nesting_vars
from cli_proxy.failures import FailureKind
from cli_proxy.plan.prompt import Prompt
from cli_proxy.plan.spec import PrivateHome
from cli_proxy.protocol import ChatCompletionRequest
from cli_proxy.read.events import Failure
from cli_proxy.read.events import StreamParser as StreamParser  # backends subclass it from here
from cli_proxy.run import limits
from cli_proxy.run.logins import Login


@dataclass(frozen=True)
class LoginState:
    """What ``cli-proxy doctor`` says of a backend's login."""

    present: bool | None  # None: cannot tell
    detail: str
    warning: str | None = None  # a login that is there but will likely be refused, and why


def _tilde(path: Path, home: Path) -> str:
    try:
        return "~/" + str(path.relative_to(home))
    except ValueError:
        return str(path)


@dataclass(frozen=True, slots=True)
class LaunchOptions:
    """What of a request shapes the CLI's argv (not ``stream``: one process serves both)."""

    model: str
    effort: str | None = None  # OpenAI reasoning level; None: the CLI's own default


class BackendOptions(BaseModel):
    """Settings that belong to one backend (``CLI_PROXY_<NAME>__<FIELD>``); unknown keys are
    refused so a typo does not pass silently."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    bin: str
    """The CLI command: a path or a whole command line (``python fake_cli.py``)."""
    max_concurrency: int | None = Field(default=None, ge=1)
    """Calls of this backend at once (an upstream account's own limit); None: no cap."""


class Backend(ABC):
    """One CLI. Subclasses set the class attributes and implement ``argv`` and ``new_parser``;
    an instance carries its validated options, so its parser and encodings can use them."""

    name: ClassVar[str]
    options_model: ClassVar[type[BackendOptions]]
    model_prefixes: ClassVar[tuple[str, ...]] = ()  # "claude-" routes claude-anything here
    aliases: ClassVar[tuple[str, ...]] = ()  # bare names ("sonnet") that route here
    known_models: ClassVar[tuple[str, ...]] = ()  # what /v1/models lists
    home_paths: ClassVar[tuple[str, ...]] = ()
    """Paths below HOME holding the CLI's login and state; in the sandbox the rest of HOME
    is hidden. The login is used in place: never copied or moved."""
    warm_prefix: ClassVar[bytes] = b""
    """Bytes a pre-started process gets at spawn to keep waiting for its prompt (gemini gives
    up when nothing arrives soon); ``encode_prompt`` output always starts with them."""
    merge_stderr: ClassVar[bool] = False
    """True when the CLI says something the call depends on only on stderr (codex: the
    model called a disabled tool): stderr is then joined to stdout, in order, and the
    parser sees its lines as they come (non-JSON lines)."""
    duplex: ClassVar[bool] = False
    """True when the CLI speaks a request/response protocol on stdio (ACP, app-server): its
    stdin stays open after the first write, the parser's ``replies()`` are written as the
    CLI runs, and stdin is closed once the parser is done."""
    native_tools: ClassVar[bool] = False
    """True when the client's tools travel through the CLI's own channel (declared as
    function tools upstream, calls arriving as ``CliToolCall``): the prompt then carries no
    JSON answer format, and the answer text is read as plain content."""
    accepts_images: ClassVar[bool] = False
    """True when ``encode_prompt`` sends ``Prompt.images`` to the model; for the others a
    request with images is refused (400) rather than answered blind."""
    env_allow: ClassVar[tuple[str, ...]] = ()
    """Variables (a trailing ``*`` matches a prefix) the CLI needs beyond ``COMMON_ENV``: its
    auth, base-URL and behaviour variables. Nothing else of the gateway's environment
    reaches it (``pass_env`` adds names on purpose)."""
    nesting_vars: ClassVar[frozenset[str]] = frozenset()
    """Variables a parent session of this CLI sets; inherited, they make any child CLI believe
    it is nested inside another agent session. Every backend's child env drops all of them."""
    resident_mib: ClassVar[int] = limits.UNKNOWN_CLI_MIB
    """Resident size of one CLI tree mid-call (RSS summed over the tree, MiB), measured with
    the real binary through the gateway (``bench/capacity.py --only sizes``): the default
    process bound divides the memory budget by the largest enabled backend's."""
    at_rest_mib: ClassVar[int] = limits.UNKNOWN_CLI_MIB
    """A spare waiting for its prompt (RSS, the same measurement at rest): what the warm
    pool holds (``cli-proxy doctor``)."""
    login_files: ClassVar[tuple[str, ...]] = ()
    """Files below HOME holding a login the CLI serves with (any one is a login: doctor)."""
    login_vars: ClassVar[tuple[str, ...]] = ()
    """Variables holding an API key or token the CLI serves with (any one set is a login)."""
    login_how: ClassVar[str] = ""
    """How a user logs this CLI in (doctor's advice when there is no login)."""

    def __init__(
        self,
        options: BackendOptions,
        drop_env: frozenset[str] = frozenset(),
        pass_env: frozenset[str] = frozenset(),
    ) -> None:
        self.options = options
        self.command = split_command(options.bin)
        self.drop_env = drop_env
        self.pass_env = pass_env

    @abstractmethod
    def argv(self, launch: LaunchOptions) -> list[str]:
        """The whole command line; the CLI's own tools must be off in it."""

    def env(self, base: Mapping[str, str]) -> dict[str, str]:
        """The child's environment: the allowlisted part of the gateway's."""
        allow = (*COMMON_ENV, *self.env_allow, *self.pass_env)
        return scrub_env(base, self.drop_env, allow)

    def workdir_files(self, launch: LaunchOptions) -> tuple[tuple[str, bytes], ...]:
        """Files (relative path, content) written into the CLI's fresh, empty work dir."""
        return ()

    def read_paths(self) -> tuple[str, ...]:
        """Host paths outside the work dir and HOME's state paths that the CLI must read (a
        shared package cache): a sandbox shows them read-only."""
        return ()

    def private_home(self, user_home: str) -> PrivateHome | None:
        """A throw-away HOME for the call (None: the real one, limited to ``home_paths``)."""
        return None

    def login(self, user_home: str, env: Mapping[str, str]) -> Login | None:
        """The refreshing login a CLI started with ``env`` would use (``logins.py``), or None
        when there is nothing to refresh (an API key, a long-lived token)."""
        return None

    @classmethod
    def login_state(cls, env: Mapping[str, str], home: Path, drop: frozenset[str]) -> LoginState:
        """Whether the CLI has a login to serve with (``cli-proxy doctor``): a login file below
        ``home`` or a key variable the gateway passes on. Names the file or variable, never
        its content."""
        if not cls.login_files and not cls.login_vars:
            return LoginState(None, "unknown (no login check for this backend)")
        for path in cls.login_paths(env, home):
            if path.is_file():
                return LoginState(True, _tilde(path, home))
        for var in cls.login_vars:
            if env.get(var) and var not in drop:
                return LoginState(True, f"${var} set")
        return LoginState(False, f"none: {cls.login_how}")

    @classmethod
    def login_paths(cls, env: Mapping[str, str], home: Path) -> list[Path]:
        """Where the login files are for this environment (``login_files`` below HOME)."""
        return [home / rel for rel in cls.login_files]

    def encode_prompt(self, prompt: Prompt, request: ChatCompletionRequest) -> bytes:
        """The bytes first written to the CLI's stdin (then closed, unless ``duplex``): the
        plain text by default. Starts with ``warm_prefix``."""
        return prompt.text.encode("utf-8")

    @abstractmethod
    def new_parser(self, prompt: Prompt, request: ChatCompletionRequest) -> StreamParser:
        """A parser for one run's stdout (a duplex one also writes the rest of the call's
        input: the prompt once the CLI's session is open, answers to the CLI's requests)."""

    def close(self) -> None:
        """The gateway is closing: stop what ``warm_up`` left running (copilot's model
        probe). Most CLIs leave nothing."""
        return None

    def models(self) -> tuple[str, ...]:
        """What ``/v1/models`` lists for this backend: ``known_models``, unless the CLI
        reported its own list (copilot, after ``warm_up``)."""
        return self.known_models

    def warm_up(self) -> None:
        """Per-binary work a plan needs (a catalog, a version probe), done once before the
        first plan, in a worker thread: ``Gateway.plan`` runs on the event loop and does no I/O.
        Blocking is fine here; it must be idempotent and cheap once done."""
        return None  # most CLIs need nothing

    @classmethod
    def with_defaults(cls) -> Backend:
        """An instance with default options (replay reads recordings with it)."""
        return cls(cls.options_from({}))

    @classmethod
    def cli_version(cls, stdout_lines: Sequence[str]) -> str | None:
        """The CLI's version as its output states it (recorded in fixtures), if it does."""
        return None

    @classmethod
    def options_from(cls, values: Mapping[str, Any]) -> BackendOptions:
        """Validated options (the options model gives the defaults, ``bin`` among them)."""
        return cls.options_model.model_validate(values)


def split_command(command: str) -> list[str]:
    """A configured binary may be a command line (``python fake_cli.py``)."""
    parts = shlex.split(command)
    if not parts:
        raise ValueError("empty CLI command")
    return parts


COMMON_ENV = (
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "LANG",
    "LANGUAGE",
    "LC_*",
    "TZ",
    "TERM",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "ALL_PROXY",
    "http_proxy",
    "https_proxy",
    "no_proxy",
    "all_proxy",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "NODE_EXTRA_CA_CERTS",
    "REQUESTS_CA_BUNDLE",
)
"""What every CLI may need: where things are, locale, proxies and CA certificates."""


@functools.lru_cache(maxsize=64)
def _allow_rule(allow: tuple[str, ...]) -> tuple[frozenset[str], tuple[str, ...]]:
    """An allowlist as exact names and name prefixes (``LC_*``), built once per list: the
    environment is filtered for every call and spare (it was ~1.6 ms of a call's CPU)."""
    exact = frozenset(a for a in allow if not a.endswith("*"))
    return exact, tuple(a[:-1] for a in allow if a.endswith("*"))


def _allowed(name: str, allow: tuple[str, ...]) -> bool:
    exact, prefixes = _allow_rule(allow)
    return name in exact or (bool(prefixes) and name.startswith(prefixes))


def scrub_env(
    base: Mapping[str, str],
    drop: frozenset[str] = frozenset(),
    allow: tuple[str, ...] = COMMON_ENV,
) -> dict[str, str]:
    """The allowlisted part of ``base``, less every backend's nesting variables, the
    gateway's own settings and ``drop``: unrelated secrets (cloud keys, tokens) stay out."""
    nesting = nesting_vars()
    return {
        k: v
        for k, v in base.items()
        if _allowed(k, allow)
        and k not in nesting
        and k not in drop
        and not k.startswith("CLI_PROXY_")
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
    except (ValueError, RecursionError):  # RecursionError: nested beyond Python's stack
        return None
    return obj if isinstance(obj, dict) else None


_RATE = re.compile(
    r"\b429\b|rate.?limit|quota|resource.?exhausted|usage limit|too many requests", re.I
)
_LOGIN_GONE = re.compile(
    r"could not be refreshed|sign in again|not logged in|oauth token (?:has )?(?:expired|"
    r"(?:was |has been )?revoked)|invalid_grant|refresh token (?:was |has )?"
    r"(?:already been used|already used|expired|revoked|is invalid)|re-?authenticate|"
    r"manual authorization is required|failed to authenticate with user code",
    re.I,
)
"""The CLI's subscription login is gone: its refresh failed or it was logged out (captured:
tests/data/real-cli/*-refresh-*). A rejected API key stays ``_AUTH``."""
_AUTH = re.compile(
    r"\b401\b|\b403\b|unauthori[sz]ed|unauthenticated|authentication|invalid (?:x-)?api.?key|"
    r"api.?key not valid|api_key_invalid|"
    r"not logged in|please run /login|log ?in again|invalid auth|permission denied|credential",
    re.I,
)
_OVERLOAD = re.compile(r"\b529\b|\b503\b|overloaded|unavailable", re.I)
_TOO_LONG = re.compile(
    r"prompt is too long|context length|context window|input token count.*exceeds|too many tokens",
    re.I,
)
_BILLING = re.compile(r"extra usage|only authorized for use with Claude Code|third.party app", re.I)
_TIMEOUT = re.compile(r"timed? ?out|timeout|deadline exceeded", re.I)
_EMPTY = re.compile(r"empty response|without an answer", re.I)
_RETRY_AFTER = re.compile(
    r"(?:retry[- ]?after|try again in|retry in|reset(?:s)? in)\D{0,12}?(\d+(?:\.\d+)?)\s*"
    r"(ms|milliseconds?|s|sec(?:ond)?s?|m|min(?:ute)?s?)?\b",
    re.I,
)


def retry_after_s(message: str) -> float | None:
    """A wait the CLI's message names ("retry after 30s", "try again in 2 minutes")."""
    m = _RETRY_AFTER.search(message)
    if m is None:
        return None
    value, unit = float(m.group(1)), (m.group(2) or "s").lower()
    if unit.startswith("ms") or unit.startswith("milli"):
        return value / 1000
    if unit.startswith("m"):
        return value * 60
    return value


def classify_failure(message: str, relogin: str = "") -> Failure:
    """What kind of failure a CLI error message describes. ``relogin``: the command that logs
    this CLI in again, named in the message of a login that is gone."""
    message = message.strip() or "the CLI failed without a message"
    if _BILLING.search(message):
        kind = FailureKind.BILLING
    elif _TOO_LONG.search(message):
        kind = FailureKind.CONTEXT_LENGTH
    elif _RATE.search(message):
        kind = FailureKind.RATE_LIMITED
    elif _LOGIN_GONE.search(message):
        kind = FailureKind.LOGIN_EXPIRED
        message = login_expired_message(message, relogin)
    elif _AUTH.search(message):
        kind = FailureKind.AUTH
    elif _OVERLOAD.search(message):
        kind = FailureKind.OVERLOADED
    elif _TIMEOUT.search(message):
        kind = FailureKind.TIMEOUT
    elif _EMPTY.search(message):
        kind = FailureKind.EMPTY_ANSWER
    else:
        kind = FailureKind.CLI_ERROR
    wait = retry_after_s(message) if kind is FailureKind.RATE_LIMITED else None
    return Failure(kind, message, wait)


def login_expired_message(message: str, relogin: str) -> str:
    how = f"run `{relogin}`" if relogin else "log the CLI in again"
    return (
        f"{message} (the gateway's own CLI login has expired or was revoked, not your API "
        f"key: on the gateway host, as the user it runs as, {how})"
    )


def kind_for_status(upstream: int, classified: FailureKind) -> FailureKind:
    """The kind of failure an upstream HTTP status reported by a CLI means."""
    if upstream in (401, 403) and classified is FailureKind.LOGIN_EXPIRED:
        return classified
    if upstream in (401, 403):
        return FailureKind.AUTH
    if upstream == 429:
        return FailureKind.RATE_LIMITED
    if upstream in (503, 529):
        return FailureKind.OVERLOADED
    if upstream in (400, 413):  # Google refuses an API key with a 400 (API_KEY_INVALID)
        keep = (FailureKind.CONTEXT_LENGTH, FailureKind.BILLING, FailureKind.AUTH)
        return classified if classified in keep else FailureKind.BAD_REQUEST
    return FailureKind.CLI_ERROR


def exit_failure(exit_code: int, stderr: str, what: str, relogin: str = "") -> Failure:
    """Failure for a CLI that exited non-zero without saying why on stdout."""
    tail = _last_lines(stderr)
    message = f"{what} exited with code {exit_code}" + (f": {tail}" if tail else "")
    failure = classify_failure(tail)
    if failure.kind is FailureKind.LOGIN_EXPIRED:
        message = login_expired_message(message, relogin)
    return Failure(failure.kind, message, failure.retry_after_s)


def empty_answer(what: str) -> Failure:
    return Failure(FailureKind.EMPTY_ANSWER, f"{what} finished without an answer")


def _last_lines(text: str, limit: int = 600) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    out = " | ".join(lines[-5:])
    return out[-limit:]
