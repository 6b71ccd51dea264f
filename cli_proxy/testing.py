"""pytest plugin: a cli-proxy gateway that replays (and records) CLI runs for your own tests.

Installed with cli-proxy (entry point ``pytest11``), it provides:

- ``cli_proxy_gateway`` (session): a gateway on a free loopback port; ``.base_url`` is the
  ``/v1`` URL, ``.client()`` an ``openai.OpenAI`` for it.
- ``cli_proxy_client``: an ``openai.OpenAI`` client pointed at it.

Every test that uses either gets its own fixture folder,
``<fixtures dir>/<module>/<test name>/``; the top level of the fixtures dir is the shared
place (read by every test, written by ``cli-proxy serve --record``). The record mode
(``--cli-proxy-record-mode`` / ini ``cli_proxy_record_mode``) decides what goes live:
``none`` (default: replay only, a miss fails), ``once`` (record a test that has no fixtures
yet), ``new_episodes`` (record the misses), ``all`` (re-record everything; a passed test's
stale files are removed). A ``none`` run of the whole suite ends with a list of the fixtures
no test used. Recordings are scrubbed (docs/fixtures.md); ``cli_proxy_record_redact`` adds
patterns. Outside pytest, ``start_gateway()`` is the same gateway as a context manager.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import re
import shlex
import threading
from collections.abc import Generator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from aiohttp import web

from .config import Settings
from .fixtures import FixtureError, FixtureScope, RecordMode, ReplaySource, split_patterns

if TYPE_CHECKING:
    import openai

    from .gateway import Gateway


class RunningGateway:
    """A gateway serving on its own event loop in a background thread."""

    def __init__(self, settings: Settings, source: ReplaySource | None = None) -> None:
        self.settings = settings
        self.source = source
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="cli-proxy-gateway", daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://{self.settings.host}:{self.port}/v1"

    def start(self) -> RunningGateway:
        self._thread.start()
        self._ready.wait(30)
        if self._error is not None:
            raise self._error
        if not self._ready.is_set():
            raise RuntimeError("cli-proxy gateway did not start within 30 s")
        return self

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_until_complete(self._serve())
        except BaseException as exc:  # surfaced to the starting thread
            self._error = exc
            self._ready.set()
        finally:
            self._loop.close()

    def _gateway(self) -> Gateway:
        from .cli import make_gateway
        from .gateway import Gateway

        if self.source is None:
            return make_gateway(self.settings)[0]
        gateway = Gateway(self.settings, self.source)
        gateway.sink_for = self.source.sink_for  # records live runs only, never replays
        return gateway

    async def _serve(self) -> None:
        from .listener import GatewayRunner
        from .server import create_app

        runner = GatewayRunner(
            create_app(self._gateway()),
            header_timeout_s=self.settings.header_timeout_s,
            handler_cancellation=True,
            access_log=None,
        )
        await runner.setup()
        site = web.TCPSite(runner, self.settings.host, self.settings.port)
        await site.start()
        self.port = runner.addresses[0][1]
        self._stop = asyncio.Event()
        self._ready.set()
        try:
            await self._stop.wait()
        finally:
            await runner.cleanup()

    def stop(self) -> None:
        if self._stop is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(30)

    def client(self, **kwargs: Any) -> openai.OpenAI:
        import openai

        kwargs.setdefault("api_key", "cli-proxy-test")
        kwargs.setdefault("max_retries", 0)
        return openai.OpenAI(base_url=self.base_url, **kwargs)


def fixture_gateway(
    fixtures: str | Path, record_mode: str | RecordMode = RecordMode.NONE, **settings: Any
) -> RunningGateway:
    """A gateway (not started) on a free loopback port answering from ``fixtures``; in a
    record mode the live CLIs, configured as for ``cli-proxy serve`` (``CLI_PROXY_*``),
    answer what the mode sends to them, and those runs are recorded into ``fixtures``."""
    from .cli import missing_binaries
    from .gateway import LiveBackends

    mode = RecordMode(record_mode)
    directory = Path(fixtures)
    values: dict[str, Any] = {"host": "127.0.0.1", "port": 0, "warm_pool": False}
    values.update(settings)
    values.setdefault(
        "record_redact", split_patterns(os.environ.get("CLI_PROXY_RECORD_REDACT", ""))
    )
    config = Settings(**values)
    live = None
    if mode is not RecordMode.NONE:
        directory.mkdir(parents=True, exist_ok=True)
        found = [b for b in config.backends if b not in missing_binaries(config)]
        live = LiveBackends.from_settings(config, found) if found else None
    elif not directory.is_dir():
        raise FixtureError(
            f"{directory}: fixture directory does not exist; record with "
            "--cli-proxy-record-mode=once (or start_gateway(..., record_mode='once'))"
        )
    source = ReplaySource.load(directory, config, mode=mode, live=live, record_dir=directory)
    return RunningGateway(config, source)


@contextmanager
def start_gateway(
    fixtures: str | Path, record_mode: str | RecordMode = RecordMode.NONE, **settings: Any
) -> Iterator[RunningGateway]:
    """Replay ``fixtures`` (and record, in a record mode) on a free port until the block ends.
    Outside a test there is no test folder: everything is read from and recorded to the
    fixtures dir itself (the shared place)."""
    gw = fixture_gateway(fixtures, record_mode, **settings).start()
    try:
        yield gw
    finally:
        gw.stop()


# ---------------------------------------------------------------------- the plugin

_MODES = [m.value for m in RecordMode]


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("cli-proxy", "cli-proxy recorded CLI fixtures")
    parser.addini("cli_proxy_fixtures", "directory of cli-proxy fixtures", default="fixtures")
    parser.addini(
        "cli_proxy_record_mode", f"record mode: {', '.join(_MODES)} (default none)", default=""
    )
    parser.addini(
        "cli_proxy_record_redact",
        "regexes scrubbed from recordings besides the defaults (one a line)",
        type="linelist",
        default=[],
    )
    group.addoption(
        "--cli-proxy-fixtures", default=None, help="directory of cli-proxy fixtures to replay"
    )
    group.addoption(
        "--cli-proxy-record-mode",
        default=None,
        choices=_MODES,
        help="none: replay only (default); once: record tests with no fixtures yet; "
        "new_episodes: record misses; all: re-record every request",
    )


@dataclass
class _Session:
    """What the plugin knows about this run, for the misses and the terminal summary."""

    root: Path
    mode: RecordMode
    source: ReplaySource | None = None
    folders: dict[str, Path] = field(default_factory=dict)  # nodeid -> its folder
    outcomes: dict[str, bool] = field(default_factory=dict)  # nodeid -> passed
    removed: list[Path] = field(default_factory=list)
    deselected: int = 0


_STATE = pytest.StashKey[_Session]()
_CALL_FAILED = pytest.StashKey[bool]()
_SCOPE = pytest.StashKey[FixtureScope]()


def pytest_configure(config: pytest.Config) -> None:
    option = config.getoption("--cli-proxy-fixtures")
    directory = Path(option or config.getini("cli_proxy_fixtures"))
    if not directory.is_absolute():
        directory = config.rootpath / directory
    raw = config.getoption("--cli-proxy-record-mode") or config.getini("cli_proxy_record_mode")
    try:
        mode = RecordMode(raw or "none")
    except ValueError:
        raise pytest.UsageError(
            f"cli_proxy_record_mode = {raw!r}: use one of {', '.join(_MODES)}"
        ) from None
    config.stash[_STATE] = _Session(directory.resolve(), mode)


def fixture_folder(root: Path, nodeid: str) -> Path:
    """``<root>/<module>/<test>``: the module's file name without ``.py``, the test's name
    with its class and parameters (``TestX.test_y[claude]``), unsafe characters as ``_``."""
    module, _, rest = nodeid.partition("::")
    name = re.sub(r"[^A-Za-z0-9._=+,@\[\]-]", "_", rest.replace("::", ".")) or "_"
    if len(name) > 100:
        name = name[:80] + "-" + hashlib.sha256(name.encode()).hexdigest()[:12]
    return root / Path(module).stem / name


def pytest_collection_finish(session: pytest.Session) -> None:
    state = session.config.stash.get(_STATE, None)
    if state is not None:
        state.folders = {
            item.nodeid: fixture_folder(state.root, item.nodeid) for item in session.items
        }


def pytest_deselected(items: list[pytest.Item]) -> None:
    if items:
        state = items[0].config.stash.get(_STATE, None)
        if state is not None:
            state.deselected += len(items)


@pytest.fixture(scope="session")
def cli_proxy_gateway(pytestconfig: pytest.Config) -> Iterator[RunningGateway]:
    state = pytestconfig.stash[_STATE]
    patterns = list(pytestconfig.getini("cli_proxy_record_redact"))
    patterns += split_patterns(os.environ.get("CLI_PROXY_RECORD_REDACT", ""))
    gw = fixture_gateway(state.root, state.mode, record_redact=patterns)
    state.source = gw.source
    gw.start()
    try:
        yield gw
    finally:
        gw.stop()


@pytest.fixture(autouse=True)
def _cli_proxy_test_scope(request: pytest.FixtureRequest) -> Iterator[None]:
    """A test that uses the gateway replays from and records into its own folder."""
    if "cli_proxy_gateway" not in request.fixturenames:
        yield
        return
    gw: RunningGateway = request.getfixturevalue("cli_proxy_gateway")
    state = request.config.stash[_STATE]
    source = gw.source
    assert source is not None
    nodeid = request.node.nodeid
    folder = fixture_folder(state.root, nodeid)
    scope = FixtureScope(
        nodeid,
        folder,
        recording=state.mode is RecordMode.ONCE and not any(folder.glob("*.json")),
        rerecord=f"pytest {shlex.quote(nodeid)} --cli-proxy-record-mode=new_episodes "
        "(or =all to re-record the whole test)",
    )
    request.node.stash[_SCOPE] = scope
    source.begin(scope)
    try:
        yield
    finally:
        passed = not request.node.stash.get(_CALL_FAILED, True)
        state.outcomes[nodeid] = passed
        state.removed += source.end(passed)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if report.when == "call":
        item.stash[_CALL_FAILED] = not report.passed
    scope = item.stash.get(_SCOPE, None)
    if scope is not None and scope.misses and report.failed and report.when == "call":
        report.sections.append(("cli-proxy fixture misses", "\n\n".join(scope.misses)))
    return report


def _shown(path: Path, rootpath: Path) -> str:
    try:
        return str(path.relative_to(rootpath))
    except ValueError:
        return str(path)


def unused_fixtures(state: _Session, whole_suite: bool) -> list[tuple[Path, str]]:
    """Fixture files no test used, with why; only what this run can vouch for: the folders
    of tests that passed, and (whole suite only) folders of no test and the shared place."""
    source = state.source
    if source is None or not state.root.is_dir():
        return []
    used = {p.resolve() for p in source.used}
    passed = {state.folders.get(n) for n, ok in state.outcomes.items() if ok}
    known = set(state.folders.values())
    out: list[tuple[Path, str]] = []
    for path in sorted(state.root.rglob("*.json")):
        if path.resolve() in used:
            continue
        folder = path.parent
        if folder in passed:
            out.append((path, "its test passed without requesting it"))
        elif not whole_suite or folder in known:
            continue  # a test that did not run, or did not pass: unknown
        elif folder == state.root:
            out.append((path, "shared, and no test requested it"))
        else:
            out.append((path, "no test of this suite owns this folder"))
    return out


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    state = config.stash.get(_STATE, None)
    if state is None or state.source is None:
        return
    tr, source = terminalreporter, state.source
    tr.section("cli-proxy fixtures")
    tr.write_line(
        f"record mode {state.mode}: {len(source.used)} fixture(s) used, "
        f"{len(set(source.recorded))} recorded, {len(state.removed)} stale removed "
        f"({_shown(state.root, config.rootpath)})"
    )
    for path in state.removed:
        tr.write_line(f"  removed {_shown(path, config.rootpath)}")
    if state.mode is not RecordMode.NONE:
        return
    session_stopped = bool(getattr(tr, "_session", None) and tr._session.shouldstop)
    whole = (
        config.args_source is not pytest.Config.ArgsSource.ARGS
        and not state.deselected
        and not session_stopped
    )
    unused = unused_fixtures(state, whole)
    if unused:
        tr.write_line(f"{len(unused)} unused fixture(s):", yellow=True)
        for path, why in unused:
            tr.write_line(f"  {_shown(path, config.rootpath)}: {why}")
        tr.write_line(
            "delete them, or re-record their tests with --cli-proxy-record-mode=all "
            "(it removes a passed test's stale files)"
        )
    elif not whole:
        tr.write_line("unused fixtures: only checked for the tests that ran (not the whole suite)")


@pytest.fixture
def cli_proxy_client(cli_proxy_gateway: RunningGateway) -> Iterator[openai.OpenAI]:
    client = cli_proxy_gateway.client()
    try:
        yield client
    finally:
        client.close()
