"""The copilot backend on the REAL pinned ``copilot`` (1.0.102) behind the gateway, sent to
the fake model API on loopback through BYOK (``COPILOT_PROVIDER_TYPE=anthropic``: the fake's
``/v1/messages``, which takes only the key configured here): the model list, text, stream,
the client's tools with no CLI tool upstream, an image, the seal (canaries in the user's
home and in an ancestor repository; no process left; no key on disk), ``/v1/messages`` on a
copilot model, and a warm second call."""

from __future__ import annotations

import asyncio
import base64
import json
import subprocess
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import anthropic
import psutil
import pytest

from cli_proxy.config import Settings
from cli_proxy.gateway import Gateway, live_backends
from tests.conftest import Served, ServeFactory, fake
from tests.fakes.fake_model_api import FakeModelAPI, start_fake_model_api
from tests.plan.test_images import PNG, data_url
from tests.realcli.test_real_cli import real_cli_dir
from tests.run.test_reliability import wait_until

CLI_DIR = real_cli_dir(("copilot",))
MODEL = "copilot/claude-sonnet-4.6"
KEY = "sk-copilot-byok-test-key"
CANARIES = ("CANARY_HOME_INSTRUCTIONS_41f", "CANARY_ANCESTOR_AGENTS_7c2", "CANARY_GITHUB_9d0")

pytestmark = [
    pytest.mark.realcli,
    pytest.mark.skipif(
        CLI_DIR is None,
        reason="real copilot binary not found ($CLI_PROXY_REAL_CLI_DIR or .cli/*/node_modules/"
        ".bin; `make real-clis` installs it)",
    ),
    pytest.mark.timeout(180),
]

# Variables of the test host that would send copilot elsewhere or to another login.
FOREIGN = (
    "COPILOT_GITHUB_TOKEN",
    "GH_TOKEN",
    "GITHUB_TOKEN",
    "GH_HOST",
    "COPILOT_GH_HOST",
    "COPILOT_MODEL",
    "HTTPS_PROXY",
    "HTTP_PROXY",
    "https_proxy",
    "http_proxy",
)


@pytest.fixture(scope="session")
def package_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One package cache for the whole run, as the gateway keeps one (235 MB per cache)."""
    return tmp_path_factory.mktemp("copilot-cache")


class Copilot:
    def __init__(self, served: Served, api: FakeModelAPI, tmp: Path) -> None:
        self.served = served
        self.api = api
        self.tmp = tmp
        self.client = served.client

    def bodies(self) -> list[dict[str, Any]]:
        return [r["body"] for r in self.api.requests if r["path"].startswith("/v1/messages")]


@pytest.fixture
async def copilot(
    request: pytest.FixtureRequest,
    serve: ServeFactory,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    package_cache: Path,
) -> AsyncIterator[Copilot]:
    assert CLI_DIR is not None
    api = await start_fake_model_api(anthropic_key=KEY)
    home = tmp_path / "home"
    (home / ".copilot").mkdir(parents=True)
    # the user's own copilot instructions: never for the gateway's calls
    (home / ".copilot" / "copilot-instructions.md").write_text(CANARIES[0] + "\n")
    # an ancestor repository of the work root, with every instructions file copilot reads
    repo = tmp_path / "repo"
    (repo / ".github").mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / "AGENTS.md").write_text(CANARIES[1] + "\n")
    (repo / "CLAUDE.md").write_text(CANARIES[1] + "\n")
    (repo / ".github" / "copilot-instructions.md").write_text(CANARIES[2] + "\n")
    for name in FOREIGN:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("COPILOT_PROVIDER_BASE_URL", api.url)
    monkeypatch.setenv("COPILOT_PROVIDER_TYPE", "anthropic")
    monkeypatch.setenv("COPILOT_PROVIDER_API_KEY", KEY)
    settings = Settings(
        copilot={"bin": str(CLI_DIR / "copilot"), "cache_dir": str(package_cache)},
        work_root=repo / "work",  # the pdeathsig launcher's: inside the ancestor repo
        timeout_s=120,
        idle_timeout_s=90,
        kill_grace_s=1,
        max_concurrency=4,
        # a test's own settings (indirect parametrization); no spares unless a test asks:
        # one started after a test's last call is a whole CLI start that nobody takes
        **{"warm_pool": False, **getattr(request, "param", {})},
    )
    served = await serve(Gateway(settings, live_backends(settings)))
    try:
        yield Copilot(served, api, tmp_path)
    finally:
        await api.close()


def user(text: str) -> list[Any]:
    return [{"role": "user", "content": text}]


async def test_model_list_text_and_no_cli_tool_upstream(copilot: Copilot) -> None:
    models = [m.id async for m in copilot.client.models.list()]
    assert MODEL in models
    r = await copilot.client.chat.completions.create(
        model=MODEL, messages=user("say hi" + fake(answer="Hello from copilot"))
    )
    assert r.choices[0].message.content == "Hello from copilot"
    assert r.choices[0].finish_reason == "stop"
    assert r.usage is not None and r.usage.prompt_tokens > 0
    (body,) = copilot.bodies()
    assert body["model"] == "claude-sonnet-4.6"  # the id after copilot/ is the CLI's model
    assert not body.get("tools")  # not one of copilot's own tools (no "tools" key at all)
    assert copilot.api.credentials("/v1/messages") == [{"x-api-key": KEY}]
    text = json.dumps(body)
    assert "Info:" not in (r.choices[0].message.content or "")
    assert not [c for c in CANARIES if c in text]
    # what copilot reports of its limits (a model's answer: allowed) in /health and /metrics
    base = str(copilot.served.server.make_url("")).rstrip("/")
    async with aiohttp.ClientSession() as session:
        async with session.get(f"{base}/health") as resp:
            health = await resp.json()
        async with session.get(f"{base}/metrics") as resp:
            metrics = await resp.text()
    assert health["rate_limits"]["copilot"][MODEL]["status"] == "allowed"
    assert 'backend="copilot"' in metrics and MODEL in metrics


async def test_stream(copilot: Copilot) -> None:
    stream = await copilot.client.chat.completions.create(
        model=MODEL, messages=user("count" + fake(answer="one two three", chunks=3)), stream=True
    )
    pieces = [
        c.choices[0].delta.content async for c in stream if c.choices and c.choices[0].delta.content
    ]
    assert "".join(pieces) == "one two three" and len(pieces) >= 2


WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}


async def test_client_tools_are_tool_calls_with_no_cli_tool_upstream(copilot: Copilot) -> None:
    call = '{"tool_call":{"name":"get_weather","arguments":{"city":"Paris"}}}'
    r = await copilot.client.chat.completions.create(
        model=MODEL,
        tools=[WEATHER],  # type: ignore[list-item]
        messages=user("weather in Paris?" + fake(answer=call)),
    )
    (tc,) = r.choices[0].message.tool_calls or []
    assert tc.function.name == "get_weather"  # type: ignore[union-attr]
    assert json.loads(tc.function.arguments) == {"city": "Paris"}  # type: ignore[union-attr]
    assert r.choices[0].finish_reason == "tool_calls"
    (body,) = copilot.bodies()
    assert not body.get("tools")  # the client's tool is in the prompt, copilot's are off
    assert "get_weather" in json.dumps(body["messages"])


async def test_an_image_reaches_the_model_after_the_text(copilot: Copilot) -> None:
    r = await copilot.client.chat.completions.create(
        model=MODEL,
        messages=[
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "what colour?" + fake(answer="red")},
                    {"type": "image_url", "image_url": {"url": data_url(PNG)}},
                ],
            }
        ],
    )
    assert r.choices[0].message.content == "red"
    (body,) = copilot.bodies()
    content = body["messages"][-1]["content"]
    images = [c for c in content if c["type"] == "image"]
    assert [base64.b64decode(c["source"]["data"]) for c in images] == [PNG]
    # copilot appends the image after all text, with its own note naming a temp file
    assert content[-1]["type"] == "image"
    assert content[-2]["text"].startswith("Image file at path ")


# pdeathsig: the work dir on the host, below the ancestor repository (bwrap's is a fixed path
# in a private /tmp, which no ancestor file can reach)
@pytest.mark.parametrize("copilot", [{"launcher": "pdeathsig"}], indirect=True)
async def test_the_seal(copilot: Copilot) -> None:
    r = await copilot.client.chat.completions.create(
        model=MODEL, messages=user("PROMPT_MARK_3e1 hi" + fake(answer="sealed"))
    )
    assert r.choices[0].message.content == "sealed"
    text = json.dumps(copilot.bodies())
    assert not [c for c in CANARIES if c in text]  # neither the home's nor the ancestors'
    me = psutil.Process()
    await wait_until(lambda: not me.children(recursive=True), 20, "no process left")
    # nothing of the call stays on disk: not the key, not the prompt, not copilot's state
    for path in copilot.tmp.rglob("*"):
        if path.is_file() and not path.is_symlink():
            data = path.read_bytes()
            assert KEY.encode() not in data, path
            assert b"PROMPT_MARK_3e1" not in data, path
    work = copilot.tmp / "repo" / "work"
    assert not [p for p in work.rglob("*") if p.is_file()], list(work.rglob("*"))
    assert not (copilot.tmp / "home" / ".copilot" / "session-state").exists()


async def test_messages_api_on_a_copilot_model(copilot: Copilot) -> None:
    url = str(copilot.served.server.make_url("/")).rstrip("/")
    client = anthropic.AsyncAnthropic(base_url=url, api_key="test", max_retries=0, timeout=120)
    try:
        msg = await client.messages.create(
            model=MODEL,
            max_tokens=100,
            messages=[{"role": "user", "content": "hi" + fake(answer="hello via messages")}],
        )
    finally:
        await client.close()
    assert msg.content[0].type == "text" and msg.content[0].text == "hello via messages"
    assert msg.model == MODEL and msg.stop_reason == "end_turn"


async def first_content_s(copilot: Copilot, text: str) -> float:
    start = time.monotonic()
    stream = await copilot.client.chat.completions.create(
        model=MODEL, messages=user(text), stream=True
    )
    first = None
    async for c in stream:
        if first is None and c.choices and c.choices[0].delta.content:
            first = time.monotonic() - start
    assert first is not None
    return first


@pytest.mark.parametrize("copilot", [{"warm_pool": True}], indirect=True)
async def test_a_warm_second_call(copilot: Copilot) -> None:
    pool = copilot.served.gateway.pool
    assert pool is not None
    cold = await first_content_s(copilot, "one" + fake(answer="cold answer"))
    await wait_until(lambda: pool.status()["ready"].get("copilot"), 90, "a spare")  # type: ignore[attr-defined]
    supervisor = copilot.served.gateway.supervisor
    await wait_until(lambda: not supervisor.starting, 60, "its start to be over")
    await asyncio.sleep(1)
    warm = await first_content_s(copilot, "two" + fake(answer="warm answer"))
    assert pool.status()["served_warm"] == 1  # type: ignore[attr-defined]
    assert warm <= cold / 2, (cold, warm)
    last = json.dumps(copilot.bodies()[-1])
    assert "warm answer" in last and "cold answer" not in last


async def test_a_refused_github_token_is_cli_auth_failed(
    serve: ServeFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, package_cache: Path
) -> None:
    """The login path without BYOK: copilot checks a token at GitHub's
    ``GET https://api.github.com/copilot_internal/user`` (reached here through a loopback
    CONNECT proxy that ends TLS with a test CA, as the claude refresh tests reach their token
    endpoint); a fake GitHub answers every token 401 "Bad credentials", copilot's
    ``session/new`` then fails "Authentication required" and the gateway answers
    ``cli_auth_failed`` 503, not retried. The fake saw exactly the token configured."""
    from aiohttp import web
    from openai import APIStatusError

    from tests.fakes.fake_connect_proxy import ConnectProxy

    seen: list[tuple[str, str]] = []

    async def github(request: web.Request) -> web.Response:
        seen.append((request.path, request.headers.get("Authorization", "")))
        body = {"message": "Bad credentials", "documentation_url": "https://docs.github.com/rest"}
        return web.json_response(body, status=401)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", github)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    proxy = await ConnectProxy(["api.github.com"], port).start()
    try:
        for name in (*FOREIGN, "COPILOT_PROVIDER_BASE_URL", "COPILOT_PROVIDER_API_KEY"):
            monkeypatch.delenv(name, raising=False)
        monkeypatch.setenv("HOME", str(tmp_path / "home"))
        monkeypatch.setenv("GH_TOKEN", "gho_refused_test_token")
        monkeypatch.setenv("HTTPS_PROXY", proxy.url)
        monkeypatch.setenv("NODE_EXTRA_CA_CERTS", str(proxy.ca_pem))
        assert CLI_DIR is not None
        settings = Settings(
            copilot={"bin": str(CLI_DIR / "copilot"), "cache_dir": str(package_cache)},
            timeout_s=120,
            idle_timeout_s=90,
            kill_grace_s=1,
            warm_pool=False,
        )
        served = await serve(Gateway(settings, live_backends(settings)))
        with pytest.raises(APIStatusError) as err:
            await served.client.chat.completions.create(model=MODEL, messages=user("hi"))
        assert err.value.status_code == 503
        assert err.value.response.headers.get("x-should-retry") == "false"
        assert "cli_auth_failed" in err.value.response.text
        assert "copilot login" in err.value.response.text
        assert seen and {auth for _, auth in seen} == {"Bearer gho_refused_test_token"}
        assert {path for path, _ in seen} == {"/copilot_internal/user"}
        assert set(proxy.refused) == set()  # no other host was asked for
    finally:
        await proxy.close()
        await runner.cleanup()


async def test_an_accepted_github_login_lists_the_models_copilot_reports(
    serve: ServeFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, package_cache: Path
) -> None:
    """The login path with an ACCEPTED token, through the CONNECT proxy to a fake GitHub and
    Copilot API (tests/fakes/fake_copilot_api.py): copilot asks ``copilot_internal/user``,
    then ``<endpoints.api>/models`` with the same token, and ``session/new`` reports the
    models; ``/v1/models`` lists them as ``copilot/<id>`` (probed once, at start-up), and a
    call on one of them reaches the fake's ``/v1/messages`` with the id unchanged."""
    from tests.fakes.fake_connect_proxy import ConnectProxy
    from tests.fakes.fake_copilot_api import HOSTS, FakeCopilotAPI

    token = "gho_accepted_test_token"
    api = await FakeCopilotAPI(token).start()
    proxy = await ConnectProxy(HOSTS, api.port).start()
    try:
        for name in (*FOREIGN, "COPILOT_PROVIDER_BASE_URL", "COPILOT_PROVIDER_API_KEY"):
            monkeypatch.delenv(name, raising=False)
        monkeypatch.setenv("HOME", str(tmp_path / "home"))
        monkeypatch.setenv("GH_TOKEN", token)
        monkeypatch.setenv("HTTPS_PROXY", proxy.url)
        monkeypatch.setenv("NODE_EXTRA_CA_CERTS", str(proxy.ca_pem))
        assert CLI_DIR is not None
        settings = Settings(
            copilot={"bin": str(CLI_DIR / "copilot"), "cache_dir": str(package_cache)},
            timeout_s=120,
            idle_timeout_s=90,
            kill_grace_s=1,
            warm_pool=False,
        )
        served = await serve(Gateway(settings, live_backends(settings)))

        async def models() -> set[str]:
            listed = (await served.client.models.list()).data
            return {m.id for m in listed if m.id.startswith("copilot/")}

        assert await models() == {MODEL, "copilot/gpt-5.5"}  # the known ones, until it reports
        await served.gateway.prewarm()  # what `cli-proxy serve` does at start-up
        want = {"copilot/claude-sonnet-4.6", "copilot/gpt-5.5", "copilot/gemini-3.1-pro-preview"}

        listed: set[str] = set()

        async def reported() -> bool:
            listed.update(await models())
            return want <= listed

        deadline = time.monotonic() + 90
        while not await reported() and time.monotonic() < deadline:  # noqa: ASYNC110
            await asyncio.sleep(0.5)
        assert want <= listed, (listed, [(r["host"], r["path"]) for r in api.requests])
        asked = [(r["host"], r["path"]) for r in api.requests]
        assert ("api.github.com", "/copilot_internal/user") in asked
        assert ("api.individual.githubcopilot.com", "/models") in asked
        assert {r["auth"].split(" ", 1)[1] for r in api.requests} == {token}
        assert not [r for r in api.requests if r["method"] == "POST"]  # no model request
        answer = await served.client.chat.completions.create(model=MODEL, messages=user("say hi"))
        assert answer.choices[0].message.content == api.answer
        posts = [r for r in api.requests if r["method"] == "POST"]
        assert [r["path"] for r in posts] == ["/v1/messages"]
        assert posts[0]["body"]["model"] == "claude-sonnet-4.6"
        assert "tools" not in posts[0]["body"]
        assert set(proxy.refused) == set()  # no other host was asked for
    finally:
        await proxy.close()
        await api.close()
