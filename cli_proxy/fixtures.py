"""Record CLI runs as fixture files, and answer requests by replaying them.

A fixture is one JSON file (format described in docs/fixtures.md): the normalized
request, the exact prompt, the argv, every stdout line with its time offset,
stderr and the exit code. Replay runs ``python -m cli_proxy.replayer FILE`` as a
real child process and parses its output with the recorded backend's own parser,
so a replayed answer takes the same path as a live one.
"""

from __future__ import annotations

import base64
import contextlib
import difflib
import functools
import hashlib
import json
import os
import pwd
import re
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from .backends import backend_class, names
from .backends.base import Backend, LaunchOptions, scrub_env
from .call import Call, LineSink
from .config import Settings
from .errors import APIError
from .gateway import LiveBackends, Target
from .plan import LaunchSpec, Plan, ResponseIds
from .prompt import Prompt
from .protocol import ChatCompletionRequest
from .routing import Route, route

FORMAT = "cli-proxy-fixture"
VERSION = 1
_KEY_FIELDS = (
    "model",
    "messages",
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    "response_format",
    "reasoning_effort",
)
"""Every request field that changes what the CLI receives (argv, env, stdin): the key.
tests/test_fixture_keys.py walks the request model and proves that every other field
changes nothing the CLI gets."""


class FixtureError(Exception):
    """A fixture file that cannot be used; the message names the file."""


class RecordMode(StrEnum):
    """When a request goes to the live CLI and is recorded (the vcrpy modes)."""

    NONE = "none"  # replay only: a miss fails
    ONCE = "once"  # record a test only when it has no fixtures yet
    NEW_EPISODES = "new_episodes"  # replay what matches, record the misses
    ALL = "all"  # re-record every request; a test's stale files are removed


# ---------------------------------------------------------------------- redaction

REDACTED = "[REDACTED]"
_SECRETS = re.compile(
    "|".join(
        (
            r"\bsk-ant-[A-Za-z0-9_\-]{8,}",  # Anthropic
            r"\bsk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_\-]{16,}",  # OpenAI
            r"\bAIza[0-9A-Za-z_\-]{30,}",  # Google API key
            r"\bya29\.[0-9A-Za-z_\-]{20,}",  # Google OAuth access token
            r"\bgh[pousr]_[A-Za-z0-9]{30,}",  # GitHub
            r"\bxox[abposr]-[A-Za-z0-9-]{10,}",  # Slack
            r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b",  # AWS access key id
            r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*",  # a JWT
        )
    )
)
_SECRET_VALUES = (
    re.compile(r"(?i)\bbearer\s+([A-Za-z0-9._~+/=\-]{8,})"),
    re.compile(
        r"(?i)[\"'](?:x-api-key|x-goog-api-key|api[_-]?key|authorization|access[_-]?token|"
        r"refresh[_-]?token|id[_-]?token|client[_-]?secret|password|passwd|secret)\\*[\"']"
        r"\s*:\s*\\*[\"']([^\"'\\]{4,})"
    ),
    re.compile(r"(?:API_KEY|TOKEN|SECRET|PASSWORD)\s*=\s*([^\s\"'\\&;]{4,})"),
)
# Substrings without which a pattern cannot match: most texts have none, and a substring
# test is a C scan (a 4 MB request: ~30 ms for all checks, against seconds of regex work).
_SECRET_HINTS: tuple[str, ...] = ("sk-", "AIza", "ya29.", "ghp_", "gho_", "ghu_", "ghs_", "ghr_")
_SECRET_HINTS += ("xox", "AKIA", "ASIA", "eyJ")
_VALUE_HINTS: tuple[tuple[bool, tuple[str, ...]], ...] = (  # (on the lower-cased text, hints)
    (True, ("bearer",)),
    (True, ("key", "authorization", "token", "secret", "passw")),  # and a quote: see text()
    (False, ("API_KEY", "TOKEN", "SECRET", "PASSWORD")),
)
_SECRET_ENV = re.compile(r"(?i)key|token|secret|passw|credential|auth")
_WORKDIR = re.compile(r"(?:/[^\s\"'\\/]+)*/cli-proxy/work/[^\s\"'\\/]+/(?:call|home)-\w+")
_GENERIC_USERS = frozenset({"root", "user", "admin", "runner", "ubuntu", "debian", "node", "app"})


class Redactor:
    """Scrubs a recording before it is written: secrets, then the machine's own strings.

    Default: well-known API key and token shapes, ``Bearer`` tokens, secret-named JSON fields
    and ``*_API_KEY=`` assignments, the values of secret-named environment variables, the
    gateway's work dirs, the working directory, ``HOME``, the host and user name. ``patterns``
    (``CLI_PROXY_RECORD_REDACT`` / ini ``cli_proxy_record_redact``) are the user's regexes: a
    pattern with groups has its groups replaced, else the whole match.

    The request is scrubbed before its key is computed, so a key does not depend on the
    machine (``$HOME`` everywhere) or on a secret the test sends (a rotated token still
    matches)."""

    def __init__(
        self, patterns: Sequence[str] = (), environ: Mapping[str, str] | None = None
    ) -> None:
        env = os.environ if environ is None else environ
        self.patterns = [re.compile(p) for p in patterns]
        secrets: dict[str, str] = {}
        for name, value in env.items():
            if _SECRET_ENV.search(name) and len(value) >= 8 and not value.startswith("/"):
                secrets.setdefault(value, f"[REDACTED:{name}]")
        paths: dict[str, str] = {}
        home = env.get("HOME") or os.path.expanduser("~")
        for placeholder, path in (("$HOME", home), ("$PWD", os.getcwd())):
            path = path.rstrip("/")
            if len(path) > 1:
                paths.setdefault(path, placeholder)
        host = socket.gethostname()
        if len(host) >= 4 and host != "localhost":
            paths.setdefault(host, "$HOSTNAME")
        self.secrets = _literal_pattern(secrets, "")
        self.paths = _literal_pattern(paths, r"(?![\w.-])", r"(?<![\w.~-])")
        user = self.user_name = _user_name(env)
        self.user: re.Pattern[str] | None = None
        if user and len(user) >= 3:
            # a distinctive name anywhere as a word; a generic one ("root") only in paths
            word = re.escape(user)
            self.user = re.compile(
                rf"(?<=[/\\]){word}(?=$|[/\\\s\"':])|\b{word}@"
                if user.lower() in _GENERIC_USERS or len(user) < 4
                else rf"\b{word}\b"
            )

    @classmethod
    def from_settings(cls, settings: Settings) -> Redactor:
        return cls(settings.record_redact)

    def text(self, s: str) -> str:
        for user_pattern in self.patterns:
            s = _sub(user_pattern, s)
        if any(h in s for h in _SECRET_HINTS):
            s = _SECRETS.sub(REDACTED, s)
        low = s.lower()
        for value_pattern, (lowered, hints) in zip(_SECRET_VALUES, _VALUE_HINTS, strict=True):
            if any(h in (low if lowered else s) for h in hints):
                s = _sub(value_pattern, s)
        for literal, table in (self.secrets, self.paths):
            if literal is not None and any(k in s for k in table):
                s = literal.sub(functools.partial(_from_table, table), s)
        if "cli-proxy/work/" in s:
            s = _WORKDIR.sub("$WORKDIR", s)
        if self.user is not None and self.user_name in s:
            s = self.user.sub(lambda m: "$USER@" if m.group(0).endswith("@") else "$USER", s)
        return s

    def value(self, obj: Any) -> Any:
        """Every string in a JSON value (keys too), scrubbed."""
        if isinstance(obj, str):
            return self.text(obj)
        if isinstance(obj, list):
            return [self.value(v) for v in obj]
        if isinstance(obj, dict):
            return {self.text(k): self.value(v) for k, v in obj.items()}
        return obj


def _from_table(table: Mapping[str, str], m: re.Match[str]) -> str:
    return table[m.group(0)]


def _sub(pattern: re.Pattern[str], s: str) -> str:
    if not pattern.groups:
        return pattern.sub(REDACTED, s)

    def groups(m: re.Match[str]) -> str:
        out, pos = [], m.start()
        for i in range(1, pattern.groups + 1):
            if m.start(i) < 0 or m.start(i) < pos:
                continue
            out += [m.string[pos : m.start(i)], REDACTED]
            pos = m.end(i)
        out.append(m.string[pos : m.end()])
        return "".join(out)

    return pattern.sub(groups, s)


def _literal_pattern(
    table: dict[str, str], tail: str = "", head: str = ""
) -> tuple[re.Pattern[str] | None, dict[str, str]]:
    """One alternation of literal strings, longest first (a path before its parent)."""
    if not table:
        return None, table
    alternation = "|".join(re.escape(k) for k in sorted(table, key=len, reverse=True))
    return re.compile(f"{head}(?:{alternation}){tail}"), table


def _user_name(env: Mapping[str, str]) -> str:
    name = env.get("USER") or env.get("LOGNAME") or ""
    if not name:
        with contextlib.suppress(KeyError, OSError):
            name = pwd.getpwuid(os.getuid()).pw_name
    return name


@functools.cache
def default_redactor() -> Redactor:
    """The default scrub with ``CLI_PROXY_RECORD_REDACT``'s patterns (one regex a line)."""
    return Redactor(split_patterns(os.environ.get("CLI_PROXY_RECORD_REDACT", "")))


def split_patterns(value: str) -> list[str]:
    return [line.strip() for line in value.splitlines() if line.strip()]


# ---------------------------------------------------------------------- keys


def normalized_request(
    req: ChatCompletionRequest, redactor: Redactor | None = None
) -> dict[str, Any]:
    """The parts of a request that decide the CLI run, in the form the key is made of.

    Sampling knobs and stream flags drop out (they change nothing the CLI receives); inline
    images become their digest; tool-call ids become their position (``id#1`` is the first
    id the conversation mentions), since the model or the gateway made them up on the
    recording; then the whole is scrubbed like the recording."""
    data = req.model_dump(mode="json", exclude_none=True, include=set(_KEY_FIELDS))
    ids: dict[str, str] = {}

    def position(value: str) -> str:
        return ids.setdefault(value, f"id#{len(ids) + 1}")

    for msg in data.get("messages", []):
        for part in msg.get("content") if isinstance(msg.get("content"), list) else []:
            image = part.get("image_url") if isinstance(part, dict) else None
            if isinstance(image, dict) and str(image.get("url", "")).startswith("data:"):
                image["url"] = "sha256:" + _image_digest(image["url"])
        for call in msg.get("tool_calls") or []:
            if isinstance(call.get("id"), str):
                call["id"] = position(call["id"])
        if isinstance(msg.get("tool_call_id"), str):
            msg["tool_call_id"] = position(msg["tool_call_id"])
    out = {k: data[k] for k in _KEY_FIELDS if k in data}
    scrubbed: dict[str, Any] = (redactor or default_redactor()).value(out)
    return scrubbed


def _image_digest(data_url: str) -> str:
    """An inline image by the digest of its bytes (the prompt's ``<image sha256>``): fixtures
    stay small and the key does not depend on how the base64 was wrapped."""
    payload = data_url.partition(",")[2]
    try:
        raw = base64.b64decode(payload, validate=True)
    except ValueError:
        raw = data_url.encode("utf-8", "surrogatepass")
    return hashlib.sha256(raw).hexdigest()


def request_key(normalized: Mapping[str, Any]) -> str:
    """Stable across JSON key order and whitespace: sha256 of canonical JSON."""
    canonical = json.dumps(normalized, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()[:24]


def fixture_name(backend: str, normalized: Mapping[str, Any], key: str) -> str:
    model = "".join(c if c.isalnum() or c in "-." else "_" for c in str(normalized["model"]))
    return f"{backend}-{model}-{key[:12]}.json"


@dataclass
class Fixture:
    path: Path
    key: str
    backend: str
    request: dict[str, Any]
    data: dict[str, Any] = field(repr=False)

    @property
    def model(self) -> str:
        return str(self.request.get("model", ""))


def load_fixture(path: Path) -> Fixture:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise FixtureError(f"{path}: cannot read fixture: {exc}") from None
    except ValueError as exc:
        raise FixtureError(f"{path}: fixture is not valid JSON: {exc}") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise FixtureError(f'{path}: not a cli-proxy fixture (missing "format": "{FORMAT}")')
    if data.get("version") != VERSION:
        raise FixtureError(
            f"{path}: fixture version {data.get('version')!r} is not supported (want {VERSION})"
        )
    problems = _shape_problems(data)
    if problems:
        raise FixtureError(f"{path}: malformed fixture: {problems}")
    request = data["request"]
    key = request_key(request)
    if data.get("key") not in (None, key):
        raise FixtureError(
            f"{path}: stored key {data['key']} does not match its request (expected {key}); "
            "was the request edited? Fix the request or delete the key field"
        )
    return Fixture(path, key, data["backend"], request, data)


def _shape_problems(data: dict[str, Any]) -> str:
    if data.get("backend") not in names():
        return f"backend must be one of {sorted(names())}"
    if not isinstance(data.get("request"), dict) or not data["request"].get("model"):
        return "request must be an object with a model"
    stdout = data.get("stdout")
    if not isinstance(stdout, list) or not all(
        isinstance(e, dict)
        and isinstance(e.get("line"), str)
        and isinstance(e.get("t"), int | float)
        for e in stdout
    ):
        return 'stdout must be a list of {"t": seconds, "line": text}'
    if not isinstance(data.get("exit_code"), int):
        return "exit_code must be an integer"
    return ""


class FixtureStore:
    """Every fixture under a directory, by key overall (first in path order wins) and by the
    folder it sits in (a test's own folder, or the top level: the shared place)."""

    def __init__(self, fixtures: list[Fixture], root: Path | None = None) -> None:
        self.root = root
        self.by_key: dict[str, Fixture] = {}
        self.by_folder: dict[Path, dict[str, Fixture]] = {}
        self._lock = threading.Lock()
        for fx in fixtures:
            self.add(fx)

    @classmethod
    def load(cls, directory: Path) -> FixtureStore:
        if not directory.is_dir():
            raise FixtureError(f"{directory}: fixture directory does not exist")
        root = directory.resolve()
        return cls([load_fixture(p) for p in sorted(root.rglob("*.json"))], root)

    def add(self, fx: Fixture) -> None:
        """A fixture read at start-up or just recorded (it replaces one at the same path)."""
        with self._lock:
            folder = self.by_folder.setdefault(fx.path.parent, {})
            for key, old in list(folder.items()):
                if old.path == fx.path:
                    del folder[key]
            folder.setdefault(fx.key, fx)
            current = self.by_key.get(fx.key)
            if current is None or current.path == fx.path:
                self.by_key[fx.key] = fx

    def remove(self, path: Path) -> None:
        with self._lock:
            folder = self.by_folder.get(path.parent, {})
            for key, fx in list(folder.items()):
                if fx.path == path:
                    del folder[key]
            for key, fx in list(self.by_key.items()):
                if fx.path == path:
                    del self.by_key[key]

    def __len__(self) -> int:
        return len(self.by_key)

    def paths(self) -> set[Path]:
        return {fx.path for folder in self.by_folder.values() for fx in folder.values()}

    def folder(self, folder: Path) -> list[Fixture]:
        return list(self.by_folder.get(folder, {}).values())

    def nearest(
        self, normalized: Mapping[str, Any], among: list[Fixture] | None = None
    ) -> Fixture | None:
        """The fixture sharing most key fields with the request, then the closest in size.

        Linear in the fixtures' size (canonical field texts compared, no character diff):
        a miss on a multi-megabyte request must not stall the event loop (difflib took
        17.9 s for 3.9M characters)."""
        want = _field_texts(normalized)
        best: tuple[tuple[int, int], Fixture] | None = None
        for fx in among if among is not None else list(self.by_key.values()):
            have = _field_texts(fx.request)
            same = sum(want.get(k) == have.get(k) for k in _KEY_FIELDS)
            size_gap = abs(sum(map(len, want.values())) - sum(map(len, have.values())))
            score = (same, -size_gap)
            if best is None or score > best[0]:
                best = (score, fx)
        return best[1] if best else None


def _field_texts(request: Mapping[str, Any]) -> dict[str, str]:
    return {
        k: json.dumps(request[k], sort_keys=True, ensure_ascii=False)
        for k in _KEY_FIELDS
        if k in request
    }


# ---------------------------------------------------------------------- misses

_DIFF_LINES = 40
_DIFF_LINE_CHARS = 160
_DIFF_MAX_INPUT_LINES = 4000


def first_difference(want: Any, have: Any, path: str = "") -> str | None:
    """Where two normalized requests first differ, as ``messages[2].content``."""
    if isinstance(want, dict) and isinstance(have, dict):
        for k in [*want, *(k for k in have if k not in want)]:
            found = first_difference(want.get(k), have.get(k), f"{path}.{k}" if path else k)
            if found is not None:
                return found
        return None
    if isinstance(want, list) and isinstance(have, list):
        for i, (a, b) in enumerate(zip(want, have, strict=False)):
            found = first_difference(a, b, f"{path}[{i}]")
            if found is not None:
                return found
        if len(want) != len(have):
            return f"{path} ({len(want)} items here, {len(have)} recorded)"
        return None
    return None if want == have else (path or "the request")


def request_diff(recorded: Mapping[str, Any], request: Mapping[str, Any]) -> str:
    """A short unified diff of the two requests as indented JSON. A long changed line is
    shown around its first differing character, so a change deep in a long message shows."""

    def lines(obj: Mapping[str, Any]) -> list[str]:
        text = json.dumps(obj, indent=1, sort_keys=True, ensure_ascii=False)
        return text.splitlines()[:_DIFF_MAX_INPUT_LINES]

    diff = list(
        difflib.unified_diff(
            lines(recorded), lines(request), "recorded", "this request", n=2, lineterm=""
        )
    )
    removed = [ln[1:] for ln in diff if ln.startswith("-") and not ln.startswith("---")]
    added = [ln[1:] for ln in diff if ln.startswith("+") and not ln.startswith("+++")]
    start = min((_common_prefix(a, b) for a, b in zip(removed, added, strict=False)), default=0)
    out = [_window(ln, start) for ln in diff]
    if len(out) > _DIFF_LINES:
        out = [*out[:_DIFF_LINES], f"... ({len(out) - _DIFF_LINES} more diff lines)"]
    return "\n".join(out)


def _common_prefix(a: str, b: str) -> int:
    """Length of the common prefix, compared in blocks (fast on multi-megabyte lines)."""
    n, step = 0, 4096
    while a[n : n + step] == b[n : n + step] and n < min(len(a), len(b)):
        n += step
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def _window(line: str, first_difference: int) -> str:
    if len(line) <= _DIFF_LINE_CHARS:
        return line
    sign, body = line[:1], line[1:]
    begin = max(0, min(first_difference - 60, len(body) - _DIFF_LINE_CHARS))
    cut = body[begin : begin + _DIFF_LINE_CHARS]
    return (
        sign + ("…" if begin else "") + cut + ("…" if begin + _DIFF_LINE_CHARS < len(body) else "")
    )


# ---------------------------------------------------------------------- sources


@dataclass
class FixtureScope:
    """One pytest test using the plugin's gateway: its own fixture folder and what it did."""

    nodeid: str
    folder: Path
    recording: bool  # once: the folder was empty when the test started
    rerecord: str  # the command that re-records this test
    used: set[Path] = field(default_factory=set)
    written: set[Path] = field(default_factory=set)
    misses: list[str] = field(default_factory=list)


def _replay_spec(fixture: Fixture, speed: float) -> LaunchSpec:
    """The replayer process for one fixture, as a launch spec like any CLI's."""
    env = scrub_env(os.environ)
    # the replayer imports cli_proxy: make sure the child finds this very package
    root = str(Path(__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    argv = [
        sys.executable,
        "-m",
        "cli_proxy.replayer",
        str(fixture.path.resolve()),
        "--speed",
        str(speed),
    ]
    path = str(fixture.path.resolve())
    return LaunchSpec.make(f"replay:{fixture.backend}", argv, env, read_paths=(path,))


def _recorded_ids(fixture: Fixture) -> ResponseIds:
    ids = fixture.data.get("response_ids")
    if not isinstance(ids, dict):
        return ResponseIds()
    fresh = ResponseIds()
    return ResponseIds(
        completion_id=str(ids.get("completion_id") or fresh.completion_id),
        created=int(ids.get("created") or fresh.created),
        call_ids=tuple(str(c) for c in ids.get("call_ids") or []),
    )


def is_replay(plan: Plan) -> bool:
    return plan.launch.backend.startswith("replay:")


class ReplaySource:
    """Answers from recorded fixtures; with a record mode and live backends, the live CLI
    answers what the mode sends to it and the run is recorded (never a replayed one).

    The process of a replay is the replayer, its parser the recorded backend's own. In
    pytest (``cli_proxy.testing``) ``scope`` is the running test: it replays from the test's
    own folder and the shared top level, and records into its own folder."""

    def __init__(
        self,
        store: FixtureStore,
        speed: float,
        *,
        mode: RecordMode = RecordMode.NONE,
        live: LiveBackends | None = None,
        record_dir: Path | None = None,
        redactor: Redactor | None = None,
    ) -> None:
        self.store = store
        self.speed = speed
        self.mode = mode
        self.live = live
        self.record_dir = record_dir or store.root
        self.redactor = redactor or default_redactor()
        self.scope: FixtureScope | None = None
        self.recorded: list[Path] = []  # files written by live runs, in order
        self._backends: dict[str, Backend] = {}
        self.used: set[Path] = set()  # files replayed or written

    @classmethod
    def load(
        cls,
        directory: Path,
        settings: Settings,
        *,
        mode: RecordMode = RecordMode.NONE,
        live: LiveBackends | None = None,
        record_dir: Path | None = None,
    ) -> ReplaySource:
        store = FixtureStore.load(directory)
        redactor = Redactor.from_settings(settings)
        return cls(
            store,
            settings.replay_speed,
            mode=mode,
            live=live,
            record_dir=record_dir,
            redactor=redactor,
        )

    def _models(self) -> dict[str, str]:
        return {fx.model: fx.backend for fx in list(self.store.by_key.values())}

    def models(self) -> list[tuple[str, str]]:
        listed = dict(self.live.models()) if self.live is not None else {}
        listed.update(self._models())
        return sorted(listed.items())

    def route(self, model: str) -> Route | None:
        if self.live is not None and self.mode is not RecordMode.NONE:
            found = self.live.route(model)
            if found is not None:
                return found
        backend = self._models().get(model)
        if backend:
            return Route(backend, model)
        if self.scope is not None:  # a test's miss says which test and how to record it
            return route(model, {n: backend_class(n) for n in names()})
        return None

    def backend(self, route: Route) -> Backend:
        """The backend that reads the call: the live one where a record mode may send the call
        to it (the prompt is rendered for it), else the recorded one with default options (its
        parser reads the recording)."""
        if self.live is not None and route.backend in self.live.backends:
            return self.live.backend(route)
        if route.backend not in self._backends:
            self._backends[route.backend] = backend_class(route.backend).with_defaults()
        return self._backends[route.backend]

    def _lookup(self, key: str) -> tuple[Fixture | None, bool]:
        """The fixture for a key and whether it is the running test's own."""
        scope = self.scope
        if scope is None:
            return self.store.by_key.get(key), False
        own = {fx.key: fx for fx in self.store.folder(scope.folder)}.get(key)
        if own is not None:
            return own, True
        root = self.store.root
        shared = {fx.key: fx for fx in self.store.folder(root)} if root is not None else {}
        return shared.get(key), False

    def _goes_live(self, fixture: Fixture | None, own: bool) -> bool:
        shared = fixture is not None and not own  # read-only for the plugin
        if self.mode is RecordMode.NONE or shared:
            return False
        if self.mode is RecordMode.ALL:
            return True
        if self.mode is RecordMode.ONCE and self.scope is not None:
            return self.scope.recording
        return fixture is None  # new_episodes (and once outside a test: record misses)

    def target(
        self, req: ChatCompletionRequest, route: Route, launch: LaunchOptions, prompt: Prompt
    ) -> Target:
        normalized = normalized_request(req, self.redactor)
        key = request_key(normalized)
        fixture, own = self._lookup(key)
        if self._goes_live(fixture, own):
            if self.live is not None and route.backend in self.live.backends:
                return self.live.target(req, route, launch, prompt)
            reason = f"record mode {self.mode} needs the {route.backend} CLI, which is not found"
            raise APIError(404, self._miss(normalized, key, reason), code="fixture_not_found")
        if fixture is None:
            raise APIError(404, self._miss(normalized, key, ""), code="fixture_not_found")
        if self.scope is not None:
            self.scope.used.add(fixture.path)
        self.used.add(fixture.path)
        backend = self.backend(Route(fixture.backend, fixture.model))
        return Target(
            _replay_spec(fixture, self.speed),
            prompt.text.encode("utf-8"),
            functools.partial(backend.new_parser, prompt, req),
            _recorded_ids(fixture),
        )

    def _miss(self, normalized: Mapping[str, Any], key: str, reason: str) -> str:
        scope = self.scope
        where = f" in test {scope.nodeid}" if scope is not None else ""
        head = f"no recorded fixture matches this request (key {key}){where}"
        if reason:
            head += f"; {reason}"
        among: list[Fixture] | None = None
        if scope is not None:
            root = self.store.folder(self.store.root) if self.store.root is not None else []
            among = self.store.folder(scope.folder) + root or None
        near = self.store.nearest(normalized, among)
        parts = [head]
        if near is not None:
            what = first_difference(normalized, near.request) or "nothing in the key"
            parts.append(f"nearest fixture: {self._shown(near.path)}; first difference: {what}")
            parts.append(request_diff(near.request, normalized))
        if scope is not None:
            parts.append(f"to record it: {scope.rerecord}")
        elif self.store.root is not None:
            d = self._shown(self.store.root)
            parts.append(f"to record it: cli-proxy serve --replay {d} --record {d}")
        message = "\n".join(parts)
        if scope is not None:
            scope.misses.append(message)
        return message

    @staticmethod
    def _shown(path: Path) -> str:
        with contextlib.suppress(ValueError):
            return str(path.relative_to(Path.cwd()))
        return str(path)

    # ---- recording

    def sink_for(self, plan: Plan) -> LineSink | None:
        """A recorder for a live run (never for a replay) into the test's folder."""
        if is_replay(plan):
            return None
        scope = self.scope
        directory = scope.folder if scope is not None else self.record_dir
        if directory is None:
            return None

        def written(path: Path) -> None:
            if scope is not None:
                scope.written.add(path)
                scope.used.add(path)
            self.recorded.append(path)
            self.used.add(path)
            with contextlib.suppress(FixtureError):
                self.store.add(load_fixture(path))

        return RecordingSink(directory, plan, self.redactor, written)

    # ---- tests (cli_proxy.testing)

    def begin(self, scope: FixtureScope) -> None:
        self.scope = scope

    def end(self, passed: bool) -> list[Path]:
        """The test is over: under ``all``, a passed test's files it did not write again are
        stale and removed (returned)."""
        scope, self.scope = self.scope, None
        removed: list[Path] = []
        if scope is None or self.mode is not RecordMode.ALL or not passed or not scope.written:
            return removed
        for path in sorted(scope.folder.glob("*.json")):
            if path.resolve() not in {p.resolve() for p in scope.written}:
                path.unlink()
                self.store.remove(path)
                removed.append(path)
        return removed


# ---------------------------------------------------------------------- recording


class Recorder:
    """``serve --record DIR``: every live run written to DIR (replayed runs never are)."""

    def __init__(self, directory: Path, redactor: Redactor | None = None) -> None:
        self.directory = directory
        self.redactor = redactor or default_redactor()
        directory.mkdir(parents=True, exist_ok=True)

    def sink_for(self, plan: Plan) -> LineSink | None:
        if is_replay(plan):
            return None
        return RecordingSink(self.directory, plan, self.redactor)


class RecordingSink(LineSink):
    def __init__(
        self,
        directory: Path,
        plan: Plan,
        redactor: Redactor | None = None,
        written: Callable[[Path], None] | None = None,
    ) -> None:
        self.directory = directory
        self.plan = plan
        self.redactor = redactor or default_redactor()
        self.written = written
        self.started = time.monotonic()
        self.lines: list[dict[str, Any]] = []

    def spawned(self) -> None:
        self.started = time.monotonic()

    def line(self, data: bytes) -> None:
        t = round(time.monotonic() - self.started, 4)
        self.lines.append({"t": t, "line": data.decode("utf-8", "replace").rstrip("\r\n")})

    def done(self, call: Call) -> None:
        stats = call.stats
        lingered = stats is not None and stats.killed == "lingered"  # its answer was whole
        if stats is None or (stats.killed is not None and not lingered) or stats.exit_code is None:
            return  # a cancelled or timed-out run is not a faithful recording
        if is_replay(self.plan):
            return  # never write a replayed answer back as if it were live
        exit_code, stderr = stats.exit_code, stats.stderr
        backend = self.plan.launch.backend
        scrub = self.redactor
        normalized = normalized_request(self.plan.request, scrub)
        key = request_key(normalized)
        argv = list(self.plan.launch.argv)
        argv[0] = Path(argv[0]).name
        data = {
            "format": FORMAT,
            "version": VERSION,
            "key": key,
            "recorded_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "backend": backend,
            "cli_version": backend_class(backend).cli_version([e["line"] for e in self.lines]),
            "request": normalized,
            "prompt": scrub.text(self.plan.call.prompt),
            "argv": scrub.value(argv),
            "exit_code": exit_code,
            "stderr": scrub.text(stderr),
            "duration_s": round(stats.duration_s, 4),
            "response_ids": {
                "completion_id": self.plan.call.ids.completion_id,
                "created": self.plan.call.ids.created,
                "call_ids": call.outcome.call_ids,
            },
            "stdout": [{"t": e["t"], "line": scrub.text(e["line"])} for e in self.lines],
        }
        self.directory.mkdir(parents=True, exist_ok=True)
        target = self.directory / fixture_name(backend, normalized, key)
        fd, tmp = tempfile.mkstemp(dir=self.directory, suffix=".tmp")
        with os.fdopen(fd, "w", encoding="utf-8", errors="replace") as fh:
            json.dump(data, fh, ensure_ascii=False, indent=1)
            fh.write("\n")
        os.replace(tmp, target)
        if self.written is not None:
            self.written(target)
