"""Every credential reaches the provider: the REAL claude and gemini behind the gateway, with an
API key and with a subscription login, under each launcher. The fake API (or the fake Code
Assist API) takes only the credential the test configured, and refuses any other with the
real API's error, so a key the gateway drops, or mixes up, fails here; each test also checks
that every model call carried exactly that credential and no other.

codex's two (``CODEX_API_KEY``, a ChatGPT login) are in tests/realcli/test_real_cli_codex.py
(``test_api_key_is_sent_as_the_bearer_key``, ``test_chatgpt_login_sends_its_access_token``),
under both launchers too. The set-ups are the suite's own: ``point_clis_at`` (API keys) and
the login fixtures of tests/realcli/test_real_cli_logins.py (an expired login refreshed by the
fake token endpoint, so the credential sent is the access token it issued).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import openai
import pytest

from cli_proxy.config import Settings
from cli_proxy.gateway import Gateway, live_backends
from tests.conftest import ServeFactory, fake
from tests.fakes.fake_model_api import FakeModelAPI, start_fake_model_api
from tests.realcli.test_real_cli import (
    ANTHROPIC_KEY,
    CLAUDE,
    CLI_DIR,
    GEMINI,
    GEMINI_KEY,
    point_clis_at,
)
from tests.realcli.test_real_cli_codex import CODEX
from tests.realcli.test_real_cli_codex import FOREIGN_ENV as CODEX_FOREIGN_ENV

# the login fixtures; the tests' parameters of these names are their uses (F811)
from tests.realcli.test_real_cli_logins import (  # noqa: F401
    Run,
    claude_run,
    gemini_run,
    needs_claude,
    needs_gemini,
    personal,
)
from tests.run.test_sealed_processes import LAUNCHERS

pytestmark = [
    pytest.mark.realcli,
    pytest.mark.skipif(CLI_DIR is None, reason="real claude/gemini binaries not found"),
    pytest.mark.timeout(180),
]

MODELS = {"claude": CLAUDE, "gemini": GEMINI}
# What each backend's API key looks like upstream, on every model call, and nothing else.
KEY_SENT = {"claude": {"x-api-key": ANTHROPIC_KEY}, "gemini": {"x-goog-api-key": GEMINI_KEY}}
MODEL_PATHS = {"claude": "/v1/messages", "gemini": ":streamGenerateContent"}


def one_real_backend(backend: str, api: FakeModelAPI, **settings: Any) -> Settings:
    """Settings that serve only ``backend``, from the real binaries (codex's model API:
    ``api``), with a 1 s kill grace."""
    assert CLI_DIR is not None
    return Settings(
        backends=[backend],
        claude={"bin": str(CLI_DIR / "claude")},
        gemini={"bin": str(CLI_DIR / "gemini")},
        codex={"bin": str(CODEX), "base_url": api.url + "/v1"},
        kill_grace_s=1,
        **settings,
    )


@pytest.mark.parametrize("backend", ["claude", "gemini"])
@pytest.mark.parametrize("launcher", LAUNCHERS)
async def test_api_key_reaches_the_provider(
    launcher: str,
    backend: str,
    serve: ServeFactory,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """ANTHROPIC_API_KEY as ``x-api-key``, GEMINI_API_KEY as ``x-goog-api-key``."""
    api = await start_fake_model_api()
    point_clis_at(api, tmp_path / "home", monkeypatch)  # the fake takes these keys only
    settings = one_real_backend(
        backend,
        api,
        timeout_s=90,
        idle_timeout_s=60,
        launcher=launcher,
        work_root=tmp_path / "root",
        warm_pool=False,
    )
    try:
        served = await serve(Gateway(settings, live_backends(settings)))
        r = await served.client.chat.completions.create(
            model=MODELS[backend],
            messages=[{"role": "user", "content": "say hi" + fake(answer="The key answers.")}],
        )
        assert r.choices[0].message.content == "The key answers."
        sent = api.credentials(MODEL_PATHS[backend])
        assert sent and all(s == KEY_SENT[backend] for s in sent), sent
    finally:
        await api.close()


@needs_claude
@pytest.mark.parametrize("delay", [0.0])
@pytest.mark.parametrize("launcher", LAUNCHERS)
async def test_claude_ai_login_reaches_the_provider(claude_run: Run) -> None:  # noqa: F811
    """A claude.ai login (its access token refreshed first): ``Authorization: Bearer`` with
    the token the endpoint issued, never an API key."""
    run = claude_run
    r = await run.client.chat.completions.create(
        model="sonnet", messages=[{"role": "user", "content": "hi" + fake(answer="ok")}]
    )
    assert r.choices[0].message.content == "ok"
    sent = run.api.credentials("/v1/messages")
    expected = {"authorization": f"Bearer {run.token.access}"}
    assert sent and all(s == expected for s in sent), sent


@needs_claude
@pytest.mark.parametrize("delay", [0.0])
@pytest.mark.parametrize("launcher", LAUNCHERS)
async def test_claude_oauth_token_reaches_the_provider(
    claude_run: Run,  # noqa: F811
    serve: ServeFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``CLI_PROXY_CLAUDE__OAUTH_TOKEN`` (CLAUDE_CODE_OAUTH_TOKEN to the CLI) is the bearer;
    the file login beside it is not used."""
    run = claude_run
    long_lived = "sk-ant-oat01-long-lived-credential-test"
    run.api.accept_bearer = lambda token: token == long_lived
    monkeypatch.setenv("CLI_PROXY_CLAUDE__OAUTH_TOKEN", long_lived)
    config = Settings(
        backends=["claude"],
        claude={"bin": str(CLI_DIR / "claude")},  # type: ignore[operator]
        launcher=run.served.gateway.settings.launcher,
        work_root=run.served.gateway.settings.work_root,
        warm_pool=False,
    )
    gateway = Gateway(config, live_backends(config))
    try:
        served = await serve(gateway)
        r = await served.client.chat.completions.create(
            model="sonnet", messages=[{"role": "user", "content": "hi" + fake(answer="ok")}]
        )
        assert r.choices[0].message.content == "ok"
    finally:
        await gateway.close()
    sent = run.api.credentials("/v1/messages")
    assert sent and all(s == {"authorization": f"Bearer {long_lived}"} for s in sent), sent
    assert run.token.refreshes == 0


@needs_gemini
@pytest.mark.timeout(300)
@pytest.mark.parametrize("delay", [0.0])
@pytest.mark.parametrize("launcher", LAUNCHERS)
async def test_google_login_reaches_code_assist(gemini_run: Run) -> None:  # noqa: F811
    """With "Login with Google", every Code Assist call (set-up, quota, the model call) carries the
    access token the endpoint issued, as ``Authorization: Bearer``."""
    run = gemini_run
    r = await run.client.chat.completions.create(
        model="gemini-2.5-flash",
        messages=[{"role": "user", "content": "hi" + fake(answer="ok")}],
    )
    assert r.choices[0].message.content == "ok"
    assist = run.assist  # type: ignore[attr-defined]
    assert any(p.endswith(":streamGenerateContent") for p in assist.paths), assist.paths
    assert set(assist.bearers) == {run.token.access}, assist.bearers


# The three real CLIs as a test parameter (codex: where its binary was installed).
EVERY_BACKEND = [
    "claude",
    "gemini",
    pytest.param("codex", marks=pytest.mark.skipif(CODEX is None, reason="real codex not found")),
]
# The gateway's API key for each backend, as the environment names it.
KEY_ENV = {"claude": "ANTHROPIC_API_KEY", "gemini": "GEMINI_API_KEY", "codex": "CODEX_API_KEY"}


@pytest.mark.parametrize("backend", EVERY_BACKEND)
async def test_a_refused_api_key_is_the_same_error_on_every_backend(
    backend: str, serve: ServeFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The provider refuses the gateway's API key with its own error (Anthropic 401
    ``authentication_error``, Google 400 ``API_KEY_INVALID``, OpenAI 401 ``invalid_api_key``):
    every backend's client gets the same ``cli_auth_failed`` error: a 503 that says no retry
    helps (the gateway's credential is at fault, not the client's key nor its request: not
    401, not the 400 of gemini's refusal upstream), and no retry was made."""
    api = await start_fake_model_api(openai_key=f"sk-proj-{backend}-right")
    point_clis_at(api, tmp_path / "home", monkeypatch)
    for name in CODEX_FOREIGN_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv(KEY_ENV[backend], "wrong-key")
    settings = one_real_backend(
        backend,
        api,
        timeout_s=90,
        idle_timeout_s=60,
        launcher="pdeathsig",
        work_root=tmp_path / "root",
        warm_pool=False,
    )
    try:
        served = await serve(Gateway(settings, live_backends(settings)))
        # the SDK's default retries (2): x-should-retry must hold it back
        client = openai.AsyncOpenAI(base_url=served.base_url, api_key="test")
        try:
            with pytest.raises(openai.InternalServerError) as info:
                await client.chat.completions.create(
                    model={**MODELS, "codex": "gpt-5.5"}[backend],
                    messages=[{"role": "user", "content": "say hi" + fake(answer="never")}],
                )
        finally:
            await client.close()
        error = info.value.body
        assert isinstance(error, dict) and error["code"] == "cli_auth_failed", error
        assert info.value.status_code == 503
        assert info.value.response.headers["x-should-retry"] == "false"
        sent = api.credentials()  # the key did reach the provider, which refused it
        assert any("wrong-key" in value for seen in sent for value in seen.values()), sent
        assert len(sent) == 1, sent  # one upstream request: neither the CLI nor the SDK retried
    finally:
        await api.close()
