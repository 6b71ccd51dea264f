"""Subscription logins survive token refresh: the REAL CLIs with an expired login, behind
the gateway, against a fake OAuth token endpoint on loopback (tests/fakes/fake_token_api.py:
rotating single-use refresh tokens; a spent one answers 400 ``invalid_grant``).

For each CLI and launcher, 6 concurrent calls whose login's access token has expired:
every call answers, exactly one refresh request reaches the endpoint, no spent refresh
token is ever sent again, the user's credential file ends with the live token, and a
following call works. Again with the endpoint answering 3 s late.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest

from cli_proxy.config import Settings
from cli_proxy.gateway import Gateway, live_backends
from tests.conftest import Served, ServeFactory, fake
from tests.fakes.fake_code_assist import FakeCodeAssist
from tests.fakes.fake_connect_proxy import ConnectProxy
from tests.fakes.fake_model_api import FakeModelAPI, start_fake_model_api
from tests.fakes.fake_token_api import FakeTokenAPI, codex_auth_json
from tests.realcli.test_real_cli import real_cli_dir
from tests.run.test_sealed_processes import LAUNCHERS

_CODEX_DIR = real_cli_dir(("codex",))
CODEX = (_CODEX_DIR / "codex") if _CODEX_DIR is not None else None

pytestmark = [pytest.mark.realcli, pytest.mark.timeout(180)]

needs_codex = pytest.mark.skipif(
    CODEX is None,
    reason="real codex binary not found ($CLI_PROXY_REAL_CLI_DIR or .cli/*/node_modules/.bin)",
)

CALLS = 6
DELAYS = [0.0, 3.0]
# Variables that would send a CLI elsewhere than the fakes or to another login.
FOREIGN_ENV = (
    "CODEX_HOME",
    "CODEX_API_KEY",
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
    "HTTPS_PROXY",
    "HTTP_PROXY",
    "https_proxy",
    "http_proxy",
    "RUST_LOG",
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_AUTH_TOKEN",
    "ANTHROPIC_BASE_URL",
    "CLAUDE_CODE_OAUTH_TOKEN",
    "CLAUDE_CONFIG_DIR",
)


@dataclass
class Run:
    served: Served
    api: FakeModelAPI
    token: FakeTokenAPI
    home: Path

    @property
    def client(self) -> openai.AsyncOpenAI:
        return self.served.client


def _iso(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


async def _concurrent(client: openai.AsyncOpenAI, model: str, n: int) -> list[str | Exception]:
    client = client.with_options(timeout=600)  # six gemini start-ups on a busy machine are slow

    async def one(i: int) -> str:
        r = await client.chat.completions.create(
            model=model,
            messages=[{"role": "user", "content": f"call {i}" + fake(answer=f"answer {i}")}],
        )
        return r.choices[0].message.content or ""

    out = await asyncio.gather(*(one(i) for i in range(n)), return_exceptions=True)
    return [o if isinstance(o, str | Exception) else Exception(repr(o)) for o in out]


def _report(what: str, token: FakeTokenAPI, answers: list[str | Exception], live: bool) -> str:
    ok = sum(1 for a in answers if isinstance(a, str))
    errors = {repr(a)[:160] for a in answers if isinstance(a, Exception)}
    return (
        f"{what}: token requests {token.refreshes}, spent re-sent {token.spent_resent}, "
        f"answered {ok}/{len(answers)}, file live {live}; errors {sorted(errors)}"
    )


async def _serve_run(
    stack: AsyncExitStack,
    serve: ServeFactory,
    monkeypatch: pytest.MonkeyPatch,
    run: tuple[FakeModelAPI, FakeTokenAPI, Path],
    env: dict[str, str],
    clear: tuple[str, ...] = (),
    **settings: Any,
) -> Run:
    """The part every login fixture shares: the environment cleared of what would send a CLI
    elsewhere, set to the fakes, and one gateway of ``CALLS`` slots served and closed with
    ``stack``."""
    api, token, home = run
    for name in (*FOREIGN_ENV, *clear):
        monkeypatch.delenv(name, raising=False)
    for name, value in {"HOME": str(home), **env}.items():
        monkeypatch.setenv(name, value)
    config = Settings(
        **{"timeout_s": 90, "idle_timeout_s": 60, **settings},
        kill_grace_s=1,
        max_concurrency=CALLS,
        warm_pool=False,
    )
    gateway = Gateway(config, live_backends(config))
    stack.push_async_callback(gateway.close)
    return Run(await serve(gateway), api, token, home)


async def _fakes(
    stack: AsyncExitStack, live: str, delay: float, google: bool = False
) -> tuple[FakeModelAPI, FakeTokenAPI]:
    """The model API and the token endpoint. The API takes only the tokens the endpoint
    issued, but for ``google``: Code Assist (which checks them) stands in front of it, and
    Google refresh tokens do not rotate (the same one is sent every time)."""
    api = await start_fake_model_api()
    stack.push_async_callback(api.close)
    token = await FakeTokenAPI(live=live, delay=delay, rotate=not google).start()
    stack.push_async_callback(token.close)
    if not google:
        api.accept_bearer = token.issued
    return api, token


async def _proxy(stack: AsyncExitStack, hosts: list[str], token: FakeTokenAPI) -> ConnectProxy:
    """A CONNECT proxy sending ``hosts`` (fixed in the CLI) to the fake token endpoint."""
    proxy = await ConnectProxy(hosts, int(token.url.rsplit(":", 1)[1])).start()
    stack.push_async_callback(proxy.close)
    return proxy


async def _refreshed_once(
    run: Run, model: str, refreshes: Callable[[], int], live: Callable[[], bool], what: str
) -> None:
    """``CALLS`` concurrent calls on an expired login all answer, with one refresh, no spent
    token sent again and the user's file live; a following call needs none."""
    answers = await _concurrent(run.client, model, CALLS)
    is_live = live()
    print(_report(what, run.token, answers, is_live))
    assert all(isinstance(a, str) for a in answers), answers
    assert refreshes() == 1, run.token.requests
    assert run.token.spent_resent == 0
    assert is_live
    after = await _concurrent(run.client, model, 1)
    assert isinstance(after[0], str), after
    assert refreshes() == 1


def _only_fresh_bearer(run: Run) -> None:
    """The model API saw the fresh access token on every call."""
    auths = {
        v for r in run.api.requests for k, v in r["headers"].items() if k.lower() == "authorization"
    }
    assert auths <= {f"Bearer {run.token.access}"}, auths


# --------------------------------------------------------------------------------- codex


@pytest.fixture
async def codex_run(
    launcher: str,
    delay: float,
    serve: ServeFactory,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> AsyncIterator[Run]:
    assert CODEX is not None
    async with AsyncExitStack() as stack:
        api, token = await _fakes(stack, "rt-0", delay)
        home = tmp_path / "home"
        (home / ".codex").mkdir(parents=True)
        now = datetime.now(UTC)
        auth = codex_auth_json("rt-0", time.time() - 3600, _iso(now - timedelta(days=1)))
        (home / ".codex" / "auth.json").write_text(json.dumps(auth, indent=2))
        (home / ".codex" / "auth.json").chmod(0o600)
        yield await _serve_run(
            stack,
            serve,
            monkeypatch,
            (api, token, home),
            {"CODEX_REFRESH_TOKEN_URL_OVERRIDE": token.url + "/oauth/token"},
            backends=["codex"],
            codex={"bin": str(CODEX), "base_url": api.url + "/v1"},
            pass_env=["CODEX_REFRESH_TOKEN_URL_OVERRIDE"],
            launcher=launcher,
            work_root=tmp_path / "root",
        )


def _codex_refresh_token(home: Path) -> str:
    data = json.loads((home / ".codex" / "auth.json").read_text())
    return str(data["tokens"]["refresh_token"])


@needs_codex
@pytest.mark.parametrize("delay", DELAYS, ids=["prompt", "late3s"])
@pytest.mark.parametrize("launcher", LAUNCHERS)
async def test_codex_expired_login_refreshed_once(codex_run: Run) -> None:
    run = codex_run
    await _refreshed_once(
        run,
        "gpt-5.5",
        lambda: run.token.refreshes,
        lambda: _codex_refresh_token(run.home) == run.token.live,
        "codex",
    )
    _only_fresh_bearer(run)


# -------------------------------------------------------------------------------- claude

_CLAUDE_DIR = real_cli_dir(("claude",))
CLAUDE = (_CLAUDE_DIR / "claude") if _CLAUDE_DIR is not None else None
needs_claude = pytest.mark.skipif(
    CLAUDE is None,
    reason="real claude binary not found ($CLI_PROXY_REAL_CLI_DIR or .cli/*/node_modules/.bin)",
)
# claude's token URL is fixed (platform.claude.com); it also looks up its profile at
# api.anthropic.com. Both reach the fake token endpoint through the CONNECT proxy.
CLAUDE_HOSTS = ["platform.claude.com", "api.anthropic.com", "console.anthropic.com", "claude.ai"]


def claude_credentials(refresh_token: str, access_token: str, expires_at: float) -> dict[str, Any]:
    return {
        "claudeAiOauth": {
            "accessToken": access_token,
            "refreshToken": refresh_token,
            "expiresAt": int(expires_at * 1000),
            "scopes": ["user:inference", "user:profile"],
            "subscriptionType": "max",
        }
    }


@pytest.fixture
async def claude_run(
    launcher: str,
    delay: float,
    serve: ServeFactory,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> AsyncIterator[Run]:
    assert CLAUDE is not None
    async with AsyncExitStack() as stack:
        api, token = await _fakes(stack, "rt-0", delay)
        proxy = await _proxy(stack, CLAUDE_HOSTS, token)
        home = tmp_path / "home"
        (home / ".claude").mkdir(parents=True)
        creds = home / ".claude" / ".credentials.json"
        old = claude_credentials("rt-0", "sk-ant-oat01-old", time.time() - 60)
        creds.write_text(json.dumps(old))
        creds.chmod(0o600)
        yield await _serve_run(
            stack,
            serve,
            monkeypatch,
            (api, token, home),
            {
                "ANTHROPIC_BASE_URL": api.url,
                "HTTPS_PROXY": proxy.url,
                "NO_PROXY": "127.0.0.1,localhost",
                "NODE_EXTRA_CA_CERTS": str(proxy.ca_pem),
            },
            backends=["claude"],
            claude={"bin": str(CLAUDE)},
            launcher=launcher,
            work_root=tmp_path / "root",
        )


def _claude_refresh_token(home: Path) -> str:
    data = json.loads((home / ".claude" / ".credentials.json").read_text())
    return str(data["claudeAiOauth"]["refreshToken"])


@needs_claude
@pytest.mark.parametrize("delay", DELAYS, ids=["prompt", "late3s"])
@pytest.mark.parametrize("launcher", LAUNCHERS)
async def test_claude_expired_login_refreshed_once(claude_run: Run) -> None:
    run = claude_run
    await _refreshed_once(
        run,
        "sonnet",
        lambda: len([r for r in run.token.requests if r.path == "/v1/oauth/token"]),
        lambda: _claude_refresh_token(run.home) == run.token.live,
        "claude",
    )
    _only_fresh_bearer(run)


# ---------------------------------------------------------------------- a login that is gone


async def _gone(run: Run, model: str, relogin: str, attempts: int) -> None:
    """The refresh token in the user's file was spent elsewhere: one typed error, after the
    CLI's own attempts (codex 0.169.0 sends a refused refresh 4 times in one run)."""
    run.token.live = "rt-issued-to-someone-else"
    with pytest.raises(openai.APIStatusError) as caught:
        await run.client.chat.completions.create(
            model=model, messages=[{"role": "user", "content": "hi" + fake(answer="never")}]
        )
    err = caught.value
    assert err.status_code == 503
    assert err.response.headers.get("x-should-retry") == "false"
    body = err.body
    assert isinstance(body, dict) and body.get("code") == "login_expired", body
    assert relogin in str(body.get("message")), body
    assert run.token.refreshes == attempts


@needs_codex
@pytest.mark.parametrize("delay", [0.0])
@pytest.mark.parametrize("launcher", ["pdeathsig"])
async def test_codex_login_gone_is_login_expired(codex_run: Run) -> None:
    # codex exec sent the refused token 4 times in one run; app-server sends it twice
    await _gone(codex_run, "gpt-5.5", "codex login", 2)


@needs_claude
@pytest.mark.parametrize("delay", [0.0])
@pytest.mark.parametrize("launcher", ["pdeathsig"])
async def test_claude_login_gone_is_login_expired(claude_run: Run) -> None:
    await _gone(claude_run, "sonnet", "/login", 1)


@needs_claude
@pytest.mark.parametrize("delay", [0.0])
@pytest.mark.parametrize("launcher", LAUNCHERS)
async def test_claude_setup_token_is_used_and_never_refreshed(
    claude_run: Run, serve: ServeFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``CLI_PROXY_CLAUDE__OAUTH_TOKEN``: the long-lived token goes upstream as the bearer;
    the expired file login is neither refreshed nor touched."""
    run = claude_run
    long_lived = "sk-ant-oat01-long-lived-test"
    run.api.accept_bearer = lambda token: token == long_lived
    before = (run.home / ".claude" / ".credentials.json").read_bytes()
    monkeypatch.setenv("CLI_PROXY_CLAUDE__OAUTH_TOKEN", long_lived)
    config = Settings(
        backends=["claude"],
        claude={"bin": str(CLAUDE)},
        launcher=run.served.gateway.settings.launcher,
        work_root=run.served.gateway.settings.work_root,
        warm_pool=False,
    )
    assert config.options_for("claude").oauth_token is not None  # type: ignore[attr-defined]
    gateway = Gateway(config, live_backends(config))
    served = await serve(gateway)
    answers = await _concurrent(served.client, "sonnet", 3)
    assert all(isinstance(a, str) for a in answers), answers
    assert run.token.refreshes == 0
    assert (run.home / ".claude" / ".credentials.json").read_bytes() == before
    await gateway.close()


# -------------------------------------------------------------------------------- gemini

_GEMINI_DIR = real_cli_dir(("gemini",))
GEMINI = (_GEMINI_DIR / "gemini") if _GEMINI_DIR is not None else None
needs_gemini = pytest.mark.skipif(
    GEMINI is None,
    reason="real gemini binary not found ($CLI_PROXY_REAL_CLI_DIR or .cli/*/node_modules/.bin)",
)
GOOGLE_HOSTS = ["oauth2.googleapis.com", "www.googleapis.com"]


@pytest.fixture
def personal() -> bool:
    """Whether Code Assist answers the login as it answers a personal Google account since
    2026-06-18 (ineligible, ``UNSUPPORTED_CLIENT``); a test parametrizes it to True."""
    return False


@pytest.fixture
async def gemini_run(
    launcher: str,
    delay: float,
    personal: bool,
    serve: ServeFactory,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> AsyncIterator[Run]:
    assert GEMINI is not None
    async with AsyncExitStack() as stack:
        api, token = await _fakes(stack, "1//rt-0", delay, google=True)
        assist = await FakeCodeAssist(api.url, token.issued, personal=personal).start()
        stack.push_async_callback(assist.close)
        proxy = await _proxy(stack, GOOGLE_HOSTS, token)
        home = tmp_path / "home"
        gemini = home / ".gemini"
        gemini.mkdir(parents=True)
        (gemini / "settings.json").write_text(
            json.dumps({"security": {"auth": {"selectedType": "oauth-personal"}}})
        )
        creds = {
            "access_token": "ya29.expired",
            "refresh_token": "1//rt-0",
            "scope": "https://www.googleapis.com/auth/cloud-platform",
            "token_type": "Bearer",
            "expiry_date": int((time.time() - 60) * 1000),
        }
        (gemini / "oauth_creds.json").write_text(json.dumps(creds, indent=2))
        (gemini / "oauth_creds.json").chmod(0o600)
        (gemini / "google_accounts.json").write_text(json.dumps({"active": "user@example.com"}))
        run = await _serve_run(
            stack,
            serve,
            monkeypatch,
            (api, token, home),
            {
                "CODE_ASSIST_ENDPOINT": assist.url,
                "HTTPS_PROXY": proxy.url,
                "NO_PROXY": "127.0.0.1,localhost",
                "NODE_EXTRA_CA_CERTS": str(proxy.ca_pem),
            },
            (
                "GEMINI_API_KEY",
                "GOOGLE_API_KEY",
                "GOOGLE_GEMINI_BASE_URL",
                "GOOGLE_GENAI_USE_VERTEXAI",
                "GOOGLE_CLOUD_PROJECT",
                "GOOGLE_CLOUD_PROJECT_ID",
            ),
            backends=["gemini"],
            gemini={"bin": str(GEMINI)},
            pass_env=["CODE_ASSIST_ENDPOINT"],
            timeout_s=400,  # six gemini start-ups on a busy machine took ~100 s each
            idle_timeout_s=300,
            launcher=launcher,
            work_root=tmp_path / "root",
        )
        run.assist = assist  # type: ignore[attr-defined]
        yield run


@needs_gemini
@pytest.mark.timeout(900)
@pytest.mark.parametrize("delay", DELAYS, ids=["prompt", "late3s"])
@pytest.mark.parametrize("launcher", LAUNCHERS)
async def test_gemini_expired_login_refreshed_once(gemini_run: Run) -> None:
    run = gemini_run

    def creds() -> dict[str, Any]:
        return dict(json.loads((run.home / ".gemini" / "oauth_creds.json").read_text()))

    def live() -> bool:
        # whole, with the new token
        now = creds()
        return (
            now.get("refresh_token") == run.token.live and now["access_token"] == run.token.access
        )

    await _refreshed_once(run, "gemini-2.5-flash", lambda: run.token.refreshes, live, "gemini")


@needs_gemini
@pytest.mark.parametrize("delay", [0.0])
@pytest.mark.parametrize("launcher", ["pdeathsig"])
async def test_gemini_login_gone_is_login_expired(gemini_run: Run) -> None:
    """Over ACP, 0.61.0 answers a refused refresh with its interactive login: the URL on
    stdout (the sign the parser reads), then a stdin line taken as the authorization code
    (capture gemini-0.61.0-acp-refresh-invalid-grant). That line is the ACP set-up the
    gateway wrote at spawn, never the prompt: the prompt waits for the session."""
    await _gone(gemini_run, "gemini-2.5-flash", "Login with Google", 1)
    creds = json.loads((gemini_run.home / ".gemini" / "oauth_creds.json").read_text())
    assert creds["refresh_token"] == "1//rt-0"  # left alone
    codes = gemini_run.token.codes
    assert len(codes) <= 1 and all("@@fake" not in code for code in codes), codes


@needs_gemini
@pytest.mark.timeout(600)
@pytest.mark.parametrize("personal", [True])
@pytest.mark.parametrize("delay", [0.0])
@pytest.mark.parametrize("launcher", ["pdeathsig"])
async def test_gemini_personal_google_login_refused_as_ineligible(gemini_run: Run) -> None:
    """Since 2026-06-18 Code Assist answers a personal Google account (AI Pro, Ultra, free)
    with an ineligible tier (``UNSUPPORTED_CLIENT``; the fake answers as the real service does,
    tests/data/real-cli/gemini-0.61.0-code-assist-ineligible.md), and 0.61.0 ends the ACP
    ``session/new`` with Google's reason. On every wire format, through the official SDKs with
    their default retries: 503 ``cli_auth_failed``, ``x-should-retry: false``, a message that
    gives Google's reason and says what still works; one CLI run per request (no retry by the
    gateway nor the SDK)."""
    run = gemini_run
    assist = run.assist  # type: ignore[attr-defined]
    base = run.served.base_url
    content = "say hi" + fake(answer="never")
    model = "gemini-2.5-flash"

    def runs() -> int:  # each CLI run sets up Code Assist, then onboards, then gives up
        return sum(1 for path in assist.paths if path.endswith(":onboardUser"))

    def check(status: int, body: object, retry: str | None, kind: str = "cli_auth_failed") -> None:
        """``kind``: OpenAI's ``code``; Anthropic's format has none, its 503 is ``api_error``
        (docs/anthropic-api.md)."""
        assert (status, retry) == (503, "false"), (status, retry, body)
        assert isinstance(body, dict), body
        error = body.get("error", body)  # OpenAI's body is the error; Anthropic's wraps it
        assert isinstance(error, dict), body
        text = str(error.get("message"))
        assert error.get("code", error.get("type")) == kind, body
        assert "no longer supported for Gemini Code Assist for individuals" in text, text
        for works in ("GEMINI_API_KEY", "Vertex AI", "Standard or Enterprise", "copilot/gemini-"):
            assert works in text, text

    openai_client = openai.AsyncOpenAI(base_url=base, api_key="test")  # default retries: 2
    anthropic_client = anthropic.AsyncAnthropic(base_url=base.removesuffix("/v1"), api_key="test")
    per_run = 0
    try:
        with pytest.raises(openai.InternalServerError) as chat:
            await openai_client.chat.completions.create(
                model=model, messages=[{"role": "user", "content": content}]
            )
        check(chat.value.status_code, chat.value.body, chat.value.response.headers.get(RETRY))
        per_run = runs()
        assert per_run >= 1, assist.paths  # the CLI reached the fake Code Assist
        with pytest.raises(openai.InternalServerError) as responses:
            await openai_client.responses.create(model=model, input=content)
        r = responses.value
        check(r.status_code, r.body, r.response.headers.get(RETRY))
        assert runs() == 2 * per_run, assist.paths
        with pytest.raises(anthropic.InternalServerError) as messages:
            await anthropic_client.messages.create(
                model=model, max_tokens=64, messages=[{"role": "user", "content": content}]
            )
        m = messages.value
        check(m.status_code, m.body, m.response.headers.get(RETRY), "api_error")
        assert runs() == 3 * per_run, assist.paths
    finally:
        await openai_client.close()
        await anthropic_client.close()
    assert set(assist.bearers) == {run.token.access}, assist.bearers  # the login was sent
    assert not any(p.endswith("GenerateContent") for p in assist.paths), assist.paths


RETRY = "x-should-retry"
