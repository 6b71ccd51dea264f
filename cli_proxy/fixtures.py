"""Record CLI runs as fixture files, and answer requests by replaying them.

A fixture is one JSON file (format described in docs/fixtures.md): the normalized
request, the exact prompt, the argv, every stdout line with its time offset,
stderr and the exit code. Replay runs ``python -m cli_proxy.replayer FILE`` as a
real child process and parses its output with the recorded backend's own parser,
so a replayed answer takes the same path as a live one.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import json
import os
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .backends import backend_class, names
from .backends.base import Backend, LaunchOptions, scrub_env
from .call import Call, LineSink
from .config import Settings
from .errors import APIError
from .gateway import Target
from .plan import LaunchSpec, Plan, ResponseIds
from .prompt import Prompt
from .protocol import ChatCompletionRequest
from .routing import Route

FORMAT = "cli-proxy-fixture"
VERSION = 1
_KEY_FIELDS = (
    "model",
    "messages",
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    "response_format",
)


class FixtureError(Exception):
    """A fixture file that cannot be used; the message names the file."""


def normalized_request(req: ChatCompletionRequest) -> dict[str, Any]:
    """The parts of a request that decide the answer; sampling knobs and stream flags drop out."""
    data = req.model_dump(mode="json", exclude_none=True, include=set(_KEY_FIELDS))
    for msg in data.get("messages", []):
        for part in msg.get("content") if isinstance(msg.get("content"), list) else []:
            image = part.get("image_url") if isinstance(part, dict) else None
            if isinstance(image, dict) and str(image.get("url", "")).startswith("data:"):
                image["url"] = "sha256:" + _image_digest(image["url"])
    return {k: data[k] for k in _KEY_FIELDS if k in data}


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
    def __init__(self, fixtures: list[Fixture]) -> None:
        self.by_key: dict[str, Fixture] = {}
        for fx in fixtures:
            self.by_key.setdefault(fx.key, fx)

    @classmethod
    def load(cls, directory: Path) -> FixtureStore:
        if not directory.is_dir():
            raise FixtureError(f"{directory}: fixture directory does not exist")
        return cls([load_fixture(p) for p in sorted(directory.rglob("*.json"))])

    def __len__(self) -> int:
        return len(self.by_key)

    def nearest(self, normalized: Mapping[str, Any]) -> Fixture | None:
        """The fixture sharing most key fields with the request, then the closest in size.

        Linear in the fixtures' size (canonical field texts compared, no character diff):
        a miss on a multi-megabyte request must not stall the event loop (difflib took
        17.9 s for 3.9M characters)."""
        want = _field_texts(normalized)
        best: tuple[tuple[int, int], Fixture] | None = None
        for fx in self.by_key.values():
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


class ReplaySource:
    """Answers from recorded fixtures: the process is the replayer, the parser the recorded
    backend's own."""

    def __init__(self, store: FixtureStore, speed: float) -> None:
        self.store = store
        self.speed = speed
        self._backends: dict[str, Backend] = {}

    @classmethod
    def load(cls, directory: Path, settings: Settings) -> ReplaySource:
        return cls(FixtureStore.load(directory), settings.replay_speed)

    def _models(self) -> dict[str, str]:
        return {fx.model: fx.backend for fx in self.store.by_key.values()}

    def models(self) -> list[tuple[str, str]]:
        return sorted(self._models().items())

    def route(self, model: str) -> Route | None:
        backend = self._models().get(model)
        return Route(backend, model) if backend else None

    def backend(self, route: Route) -> Backend:
        """The recorded backend, with default options: its parser reads the recording."""
        if route.backend not in self._backends:
            self._backends[route.backend] = backend_class(route.backend).with_defaults()
        return self._backends[route.backend]

    def target(
        self, req: ChatCompletionRequest, route: Route, launch: LaunchOptions, prompt: Prompt
    ) -> Target:
        normalized = normalized_request(req)
        key = request_key(normalized)
        fixture = self.store.by_key.get(key)
        if fixture is None:
            near = self.store.nearest(normalized)
            hint = ""
            if near is not None:
                diff = _first_difference(normalized, near.request)
                hint = f"; nearest fixture: {near.path.name} ({diff})"
            raise APIError(
                404,
                f"no recorded fixture matches this request (key {key}){hint}",
                code="fixture_not_found",
            )
        backend = self.backend(Route(fixture.backend, fixture.model))
        return Target(
            _replay_spec(fixture, self.speed),
            prompt.text.encode("utf-8"),
            functools.partial(backend.new_parser, prompt, req),
            _recorded_ids(fixture),
        )


def _first_difference(a: Mapping[str, Any], b: Mapping[str, Any]) -> str:
    for k in _KEY_FIELDS:
        if a.get(k) != b.get(k):
            return f"differs in '{k}'"
    return "differs"


# ---------------------------------------------------------------------- recording


class Recorder:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)

    def sink_for(self, plan: Plan) -> LineSink | None:
        return RecordingSink(self.directory, plan)


class RecordingSink(LineSink):
    def __init__(self, directory: Path, plan: Plan) -> None:
        self.directory = directory
        self.plan = plan
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
        exit_code, stderr = stats.exit_code, stats.stderr
        backend = self.plan.launch.backend.removeprefix("replay:")
        normalized = normalized_request(self.plan.request)
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
            "prompt": self.plan.call.prompt,
            "argv": argv,
            "exit_code": exit_code,
            "stderr": stderr,
            "duration_s": round(stats.duration_s, 4),
            "response_ids": {
                "completion_id": self.plan.call.ids.completion_id,
                "created": self.plan.call.ids.created,
                "call_ids": call.outcome.call_ids,
            },
            "stdout": self.lines,
        }
        model = "".join(c if c.isalnum() or c in "-." else "_" for c in self.plan.request.model)
        target = self.directory / f"{backend}-{model}-{key[:12]}.json"
        fd, tmp = tempfile.mkstemp(dir=self.directory, suffix=".tmp")
        with os.fdopen(fd, "w", encoding="utf-8", errors="replace") as fh:
            json.dump(data, fh, ensure_ascii=False, indent=1)
            fh.write("\n")
        os.replace(tmp, target)
