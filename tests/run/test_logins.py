"""The login gate (cli_proxy/run/logins.py), the login files' binds, and the ``login_expired``
error, without real CLIs (tests/realcli/test_real_cli_logins.py runs the real ones)."""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import openai
import pytest

from cli_proxy.backends.base import classify_failure, exit_failure
from cli_proxy.backends.claude.login import claude_login
from cli_proxy.backends.claude.parser import ClaudeParser
from cli_proxy.backends.codex.login import codex_login
from cli_proxy.backends.codex.parser import CodexParser
from cli_proxy.backends.gemini.login import gemini_login
from cli_proxy.backends.gemini.parser import GeminiParser
from cli_proxy.failures import CliFailed, FailureKind, SlotsBusy
from cli_proxy.plan.spec import LaunchSpec, PrivateHome
from cli_proxy.read.events import Failure
from cli_proxy.run.containment import BwrapLauncher, PdeathsigLauncher
from cli_proxy.run.limits import Bounds
from cli_proxy.run.logins import Login, LoginGate, file_key, read_json
from cli_proxy.run.supervisor import Supervisor
from cli_proxy.server.errors import api_error
from tests.conftest import FAKE_PY, ServeFactory, fake
from tests.fakes.fake_token_api import codex_auth_json, jwt
from tests.run.test_sealed_processes import LAUNCHERS

HERE = Path(__file__).resolve().parents[1]
DATA = HERE / "data" / "real-cli"


# ------------------------------------------------------------------ reading the logins


def test_read_json_parses_again_only_when_the_file_changed(tmp_path: Path) -> None:
    path = tmp_path / "creds.json"
    path.write_text('{"a": 1}')
    first = read_json(path)
    assert first == {"a": 1}
    assert read_json(path) is first  # cached: one stat
    path.write_text('{"a": 22}')
    assert read_json(path) == {"a": 22}
    path.write_text("[1]")
    assert read_json(path) is None
    assert read_json(tmp_path / "missing.json") is None


def test_codex_login_expiry_is_the_access_token_exp_or_eight_days_after_last_refresh(
    tmp_path: Path,
) -> None:
    auth = tmp_path / "auth.json"
    now = time.time()
    auth.write_text(json.dumps(codex_auth_json("rt", now + 3600, "2099-01-01T00:00:00Z")))
    login = codex_login(auth, {})
    assert login is not None and login.expires_at == int(now + 3600) and not login.due()
    auth.write_text(json.dumps(codex_auth_json("rt", now + 3600, "2000-01-01T00:00:00Z")))
    login = codex_login(auth, {})
    assert login is not None and login.due()  # last_refresh older than 8 days
    assert codex_login(auth, {"CODEX_API_KEY": "k"}) is None  # a key: nothing to refresh
    auth.write_text(json.dumps({"OPENAI_API_KEY": "sk-x", "tokens": None}))
    assert codex_login(auth, {}) is None
    assert "rt" not in Login.describe(codex_login(tmp_path / "none", {}) or login)


def test_claude_and_gemini_login_expiry(tmp_path: Path) -> None:
    (tmp_path / ".claude").mkdir()
    soon = int((time.time() + 120) * 1000)
    creds = {"claudeAiOauth": {"accessToken": "a", "refreshToken": "r", "expiresAt": soon}}
    (tmp_path / ".claude" / ".credentials.json").write_text(json.dumps(creds))
    login = claude_login(str(tmp_path), {})
    assert login is not None and login.due()  # within claude's 5 minutes
    assert claude_login(str(tmp_path), {"CLAUDE_CODE_OAUTH_TOKEN": "t"}) is None
    assert claude_login(str(tmp_path), {"CLAUDE_CONFIG_DIR": str(tmp_path / "x")}) is None
    google = tmp_path / "oauth_creds.json"
    later = int((time.time() + 3000) * 1000)
    google.write_text(json.dumps({"refresh_token": "r", "expiry_date": later}))
    login = gemini_login(google, "oauth-personal", {})
    assert login is not None and not login.due()
    assert gemini_login(google, "gemini-api-key", {}) is None
    assert gemini_login(google, None, {"GEMINI_API_KEY": "k"}) is None


# ------------------------------------------------------------------ the gate


def _spec(backend: str = "claude") -> LaunchSpec:
    return LaunchSpec.make(backend, ["cli"], {})


class FakeLogin:
    """A credential file whose refresh the test drives."""

    def __init__(self, path: Path, expires_in: float) -> None:
        self.path = path
        self.write(expires_in)

    def write(self, expires_in: float) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"exp": time.time() + expires_in, "n": time.time_ns()}))
        os.replace(tmp, self.path)

    def login_of(self, _spec: LaunchSpec) -> Login | None:
        data = read_json(self.path) or {}
        return Login("claude", str(self.path), "test", data.get("exp"), file_key(self.path), "x")


async def test_one_call_refreshes_while_the_others_wait_as_queued(tmp_path: Path) -> None:
    creds = FakeLogin(tmp_path / "creds.json", -60)
    supervisor = Supervisor(Bounds(max_processes=8, max_starting=2), max_queue=8)
    gate = LoginGate(creds.login_of, supervisor, wait_s=10)
    order: list[str] = []
    queued: list[int] = []

    async def call(i: int) -> None:
        async with gate.turn(_spec()) as turn:
            order.append(f"start {i} {'refresher' if turn.refresher else 'waited'}")
            if turn.refresher:
                await asyncio.sleep(0.2)
                queued.append(supervisor.waiting)
                creds.write(3600)  # the CLI's refresh lands
                order.append("refreshed")
                await asyncio.sleep(0.3)  # the rest of the refresher's call

    await asyncio.gather(*(call(i) for i in range(6)))
    assert sum("refresher" in o for o in order) == 1
    assert order.index("refreshed") == 1  # nobody else started before the refresh
    assert queued == [5]  # the five others counted as queued meanwhile
    assert supervisor.waiting == 0
    assert gate.status()["refresh_turns"] == 1


async def test_a_refresher_that_did_not_refresh_hands_over_to_the_next(tmp_path: Path) -> None:
    creds = FakeLogin(tmp_path / "creds.json", -60)
    gate = LoginGate(
        creds.login_of, Supervisor(Bounds(max_processes=4, max_starting=2), max_queue=8), wait_s=10
    )
    refreshers = 0
    running = 0
    most = 0

    async def call() -> None:
        nonlocal refreshers, running, most
        async with gate.turn(_spec()) as turn:
            running += 1
            most = max(most, running)
            refreshers += turn.refresher
            await asyncio.sleep(0.05)
            running -= 1

    await asyncio.gather(*(call() for _ in range(4)))
    assert refreshers == 4 and most == 1  # one at a time until the login is fresh


async def test_a_valid_login_never_waits_and_the_wait_is_bounded(tmp_path: Path) -> None:
    creds = FakeLogin(tmp_path / "creds.json", 3600)
    supervisor = Supervisor(Bounds(max_processes=4, max_starting=2), max_queue=8)
    gate = LoginGate(creds.login_of, supervisor, wait_s=0.3)
    async with gate.turn(_spec()) as a, gate.turn(_spec()) as b:
        assert not a.refresher and not b.refresher
    creds.write(-1)
    async with gate.turn(_spec()) as first:
        assert first.refresher
        with pytest.raises(SlotsBusy, match="token refresh"):
            async with gate.turn(_spec()):
                pass


async def test_a_spare_started_before_the_login_changed_is_not_used(tmp_path: Path) -> None:
    creds = FakeLogin(tmp_path / "creds.json", 3600)
    gate = LoginGate(
        creds.login_of, Supervisor(Bounds(max_processes=4, max_starting=2), max_queue=8), wait_s=1
    )
    async with gate.turn(_spec()) as turn:
        assert turn.born_after == 0.0
    before = time.monotonic()
    creds.write(7200)  # the user logged in again, or another gateway refreshed
    async with gate.turn(_spec()) as turn:
        assert turn.born_after >= before


# ------------------------------------------------------------------ through the gateway


def refreshing_claude(home: Path, monkeypatch: pytest.MonkeyPatch, expires_in: float) -> str:
    (home / ".claude").mkdir(parents=True)
    oauth = {"accessToken": "at-0", "refreshToken": "rt-0"}
    oauth["expiresAt"] = int((time.time() + expires_in) * 1000)  # type: ignore[assignment]
    (home / ".claude" / ".credentials.json").write_text(json.dumps({"claudeAiOauth": oauth}))
    for name in ("CLAUDE_CODE_OAUTH_TOKEN", "ANTHROPIC_API_KEY", "CLAUDE_CONFIG_DIR"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(home))
    return f"{FAKE_PY} {HERE / 'fakes' / 'refreshing_cli.py'} claude"


@pytest.mark.parametrize("launcher", LAUNCHERS)
async def test_six_calls_with_an_expired_login_refresh_it_once(
    serve: ServeFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, launcher: str
) -> None:
    home = tmp_path / "home"
    bin_ = refreshing_claude(home, monkeypatch, -60)
    served = await serve(claude_bin=bin_, launcher=launcher, work_root=tmp_path / "w")

    async def one(i: int) -> str | None:
        r = await served.client.chat.completions.create(
            model="sonnet", messages=[{"role": "user", "content": fake(answer=f"a{i}")}]
        )
        return r.choices[0].message.content

    assert await asyncio.gather(*(one(i) for i in range(6))) == [f"a{i}" for i in range(6)]
    assert (home / ".claude" / "refreshes.log").read_text().split() == ["rt-0"]
    uses = (home / ".claude" / "uses.log").read_text().split()
    assert len(uses) == 6 and len(set(uses)) == 1 and uses[0] != "at-0"


async def test_without_the_gate_each_call_refreshes(
    serve: ServeFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The stand-in races like the real CLIs do: the gate is what makes it one refresh."""
    home = tmp_path / "home"
    bin_ = refreshing_claude(home, monkeypatch, -60)
    monkeypatch.setenv("REFRESH_DELAY_S", "3")  # a slow endpoint: the runs overlap
    served = await serve(
        claude_bin=bin_, launcher="pdeathsig", work_root=tmp_path / "w", pass_env="REFRESH_DELAY_S"
    )
    served.gateway.logins.login_of = lambda _spec: None
    await asyncio.gather(
        *(
            served.client.chat.completions.create(
                model="sonnet", messages=[{"role": "user", "content": fake(answer="x")}]
            )
            for _ in range(4)
        )
    )
    # at least two spent the same token (all four on an idle machine; order-only check)
    assert len((home / ".claude" / "refreshes.log").read_text().split()) >= 2


# ------------------------------------------------------------------ binds and links


def _private_spec(real: Path) -> LaunchSpec:
    home = PrivateHome(env=("HOME",), files=(), login=(("auth.json", str(real)),))
    env = {"HOME": "/nonexistent", "PATH": "/usr/bin"}
    return LaunchSpec.make("codex", ["true"], env, home=home)


def test_bwrap_binds_the_login_directory_never_the_file_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    codex = tmp_path / ".codex"
    (codex / "sessions").mkdir(parents=True)
    for name in ("auth.json", "auth.json.lock", "config.toml", "history.jsonl"):
        (codex / name).write_text("x")
    monkeypatch.setattr(BwrapLauncher, "_bwrap", "/usr/bin/bwrap")  # only the argv is built
    prepared = BwrapLauncher().prepare(_private_spec(codex / "auth.json"), "/usr/bin/true")
    prepared.release_fds()
    args = prepared.argv
    pairs = {(args[i], args[i + 1]) for i in range(len(args) - 1)}
    assert ("--bind", str(codex)) in pairs
    assert ("--bind", str(codex / "auth.json")) not in pairs
    i = args.index("--symlink")
    assert args[i + 1 : i + 3] == [str(codex / "auth.json"), "/tmp/cli-proxy/home/auth.json"]
    assert ("--tmpfs", str(codex / "sessions")) in pairs
    null = ["--ro-bind", "/dev/null"]
    masked = {args[j + 2] for j in range(len(args) - 2) if args[j : j + 2] == null}
    assert masked == {str(codex / "config.toml"), str(codex / "history.jsonl")}


def test_pdeathsig_links_the_real_file(tmp_path: Path) -> None:
    real = tmp_path / "dotfiles" / "auth.json"
    real.parent.mkdir()
    real.write_text("{}")
    (tmp_path / ".codex").mkdir()
    (tmp_path / ".codex" / "auth.json").symlink_to(real)
    launcher = PdeathsigLauncher(tmp_path / "work")
    prepared = launcher.prepare(_private_spec(tmp_path / ".codex" / "auth.json"), "/usr/bin/true")
    try:
        link = Path(prepared.env["HOME"]) / "auth.json"
        assert os.readlink(link) == str(real)  # resolved: the CLI's rename lands beside it
    finally:
        prepared.cleanup()


# ------------------------------------------------------------------ login_expired


def _replay(parser: Any, name: str) -> list[Any]:
    events: list[Any] = []
    for line in (DATA / f"{name}.stdout.jsonl").read_bytes().splitlines():
        events += parser.feed(line)
    rc = int((DATA / f"{name}.rc").read_text())
    return events + parser.finish(rc, (DATA / f"{name}.stderr.txt").read_text())


@pytest.mark.parametrize(
    ("parser", "capture", "command"),
    [
        (CodexParser, "codex-0.169.0-refresh-invalid-grant", "codex login"),
        (ClaudeParser, "claude-2.1.197-refresh-invalid-grant", "/login"),
        (lambda: GeminiParser([]), "gemini-0.61.0-refresh-invalid-grant", "Login with Google"),
        # over ACP: the interactive login's URL on stdout, then 5 min on stdin, exit 41
        (lambda: GeminiParser([]), "gemini-0.61.0-acp-refresh-invalid-grant", "Login with Google"),
        (
            lambda: GeminiParser([]),
            "gemini-0.61.0-acp-refresh-invalid-grant-stdin-closed",
            "Login with Google",
        ),
    ],
)
def test_a_login_that_is_gone_is_login_expired(
    parser: Callable[[], Any], capture: str, command: str
) -> None:
    failures = [e for e in _replay(parser(), capture) if isinstance(e, Failure)]
    assert [f.kind for f in failures] == [FailureKind.LOGIN_EXPIRED]
    assert command in failures[0].message
    err = api_error(CliFailed(failures[0].kind, failures[0].message))
    assert (err.status, err.code) == (503, "login_expired")
    assert err.headers == {"x-should-retry": "false"}


@pytest.mark.parametrize(
    ("message", "kind"),
    [
        ("Your access token could not be refreshed. Please log out and sign in again.", "login"),
        ("Not logged in · Please run /login", "login"),
        ("OAuth token has expired. Please obtain a new token", "login"),
        ('{"error":"invalid_grant","error_description":"Bad Request"}', "login"),
        # gemini --acp after its interactive login waited out 5 min (rc 41; capture
        # gemini-0.61.0-acp-refresh-invalid-grant.stderr.txt, last line)
        ("\x1b[31mFailed to authenticate with user code.\x1b[0m", "login"),
        ("Invalid API key · Please run /login", "auth"),
        ("Invalid API key · Fix external API key", "auth"),
        ("unexpected status 401 Unauthorized: Incorrect API key provided", "auth"),
    ],
)
def test_login_gone_or_key_refused(message: str, kind: str) -> None:
    want = FailureKind.LOGIN_EXPIRED if kind == "login" else FailureKind.AUTH
    assert classify_failure(message, "cli login").kind is want
    assert exit_failure(1, message, "cli", "cli login").kind is want


async def test_login_expired_reaches_the_client_as_503(served: Any) -> None:
    message = "Your access token could not be refreshed. Please log out and sign in again."
    with pytest.raises(openai.APIStatusError) as caught:
        await served.client.chat.completions.create(
            model="sonnet",
            messages=[{"role": "user", "content": fake(is_error=True, error_message=message)}],
        )
    assert caught.value.status_code == 503
    assert isinstance(caught.value.body, dict) and caught.value.body["code"] == "login_expired"
    assert caught.value.response.headers["x-should-retry"] == "false"


def test_jwt_helper_round_trips() -> None:
    from cli_proxy.run.logins import jwt_claims

    assert jwt_claims(jwt({"exp": 5})) == {"exp": 5}
    assert jwt_claims("not.a.jwt!") is None


def test_claude_401_for_an_expired_oauth_token_is_login_expired() -> None:
    """claude sends its expired token when the refresh could not run: the API's 401 names
    the OAuth token, and that is the login, not a key."""
    line = {
        "type": "result",
        "subtype": "success",
        "is_error": True,
        "api_error_status": 401,
        "result": "Failed to authenticate. API Error: 401 OAuth token has expired. Please "
        "obtain a new token or refresh your existing token.",
    }
    parser = ClaudeParser()
    failures = [e for e in parser.feed(json.dumps(line).encode()) if isinstance(e, Failure)]
    assert [f.kind for f in failures] == [FailureKind.LOGIN_EXPIRED]
    assert "/login" in failures[0].message


async def test_calls_waiting_for_a_login_count_against_the_queue_bound() -> None:
    """The queue bound counts calls waiting for their login's refresh as well as calls
    queued for a slot: with the one slot busy and the one queue place taken by a login
    waiter, the next call is refused at once (429), not queued past the bound."""
    supervisor = Supervisor(Bounds(max_processes=1, max_starting=1), max_queue=1)
    async with supervisor.admit("claude"):
        with supervisor.queued():
            assert supervisor.waiting == 1
            with pytest.raises(SlotsBusy):
                async with supervisor.admit("claude"):
                    pass
    assert supervisor.waiting == 0 and supervisor.running == 0
