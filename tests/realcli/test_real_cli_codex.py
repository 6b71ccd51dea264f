"""The REAL codex binary behind the gateway, against the fake Responses API on loopback.

openai SDK -> gateway (in-process, real HTTP) -> real ``codex app-server`` -> the OpenAI Responses
endpoint of tests/fakes/fake_model_api.py. Nothing leaves the machine: the gateway's HOME is a
temp dir, the key is a dummy ``CODEX_API_KEY`` and the backend's ``base_url`` option points
codex's provider at the fake.

Skipped unless the binary exists: ``$CLI_PROXY_REAL_CLI_DIR/codex`` first, then
``.cli/*/node_modules/.bin/codex`` (``make real-clis`` installs it from npm, pinned).
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam

from cli_proxy.backends.codex.catalog import BASE_INSTRUCTIONS, sealed_catalog
from cli_proxy.config import Settings
from cli_proxy.gateway import Gateway, live_backends
from tests.conftest import Served, ServeFactory, fake
from tests.fakes.fake_model_api import FakeModelAPI, responses_texts, start_fake_model_api
from tests.fakes.fake_quota_api import QuotaModelAPI
from tests.fakes.fake_token_api import FakeTokenAPI, codex_auth_json
from tests.plan.test_images import JPEG, PNG, data_url, image_part
from tests.realcli.test_real_cli import real_cli_dir
from tests.run.test_reliability import wait_until
from tests.run.test_sealed_processes import LAUNCHERS
from tests.server.test_chat import TIME, WEATHER

ROOT = Path(__file__).resolve().parents[2]
MODEL = "gpt-5.5"


_DIR = real_cli_dir(("codex",))
CODEX = (_DIR / "codex") if _DIR is not None else None

pytestmark = [
    pytest.mark.realcli,
    pytest.mark.skipif(
        CODEX is None,
        reason="real codex binary not found ($CLI_PROXY_REAL_CLI_DIR or "
        ".cli/*/node_modules/.bin; `make real-clis` installs @openai/codex from npm)",
    ),
    pytest.mark.timeout(90),
]

# Variables that would send codex elsewhere than the fake API or to another login.
FOREIGN_ENV = ("CODEX_HOME", "OPENAI_API_KEY", "OPENAI_BASE_URL", "HTTPS_PROXY", "HTTP_PROXY")
FOREIGN_ENV += ("https_proxy", "http_proxy", "RUST_LOG")
PARIS = {"name": "get_weather", "arguments": {"city": "Paris"}}


class Codex:
    def __init__(self, served: Served, api: FakeModelAPI, home: Path, root: Path) -> None:
        self.served = served
        self.client = served.client
        self.api = api
        self.home = home
        self.root = root

    def bodies(self) -> list[dict[str, Any]]:
        return [r["body"] for r in self.api.requests if r["path"] == "/v1/responses"]

    def only_request(self) -> tuple[dict[str, Any], str]:
        bodies = self.bodies()
        assert len(bodies) == 1, [r["path"] for r in self.api.requests]
        return bodies[0], responses_texts(bodies[0])[1]


async def start(
    serve: ServeFactory,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    launcher: str = "pdeathsig",
    bin_prefix: str = "",
    system_prompt: str = "minimal",
    key: str | None = "test",
    api: FakeModelAPI | None = None,
    **settings: Any,
) -> tuple[Codex, FakeModelAPI]:
    """``key``: the gateway's CODEX_API_KEY, the only credential the fake API takes (None: no
    key; the test sets the fake's ``accept_bearer``); ``api``: a started fake of the test's
    own (fake_quota_api's, say) instead of a plain one."""
    assert CODEX is not None
    if api is None:
        api = await start_fake_model_api(openai_key=key)
    else:
        api.openai_key = key
    home = tmp_path / "home"
    home.mkdir()
    for name in FOREIGN_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(home))
    if key is None:
        monkeypatch.delenv("CODEX_API_KEY", raising=False)
    else:
        monkeypatch.setenv("CODEX_API_KEY", key)
    root = tmp_path / "root"
    values: dict[str, Any] = {
        "backends": ["codex"],
        "codex": {
            "bin": f"{bin_prefix} {CODEX}".strip(),
            "base_url": api.url + "/v1",
            "system_prompt": system_prompt,
        },
        "timeout_s": 60,
        "idle_timeout_s": 30,
        "kill_grace_s": 1,
        "max_concurrency": 4,
        "launcher": launcher,
        "work_root": root,
        "warm_pool": False,
        **settings,
    }
    config = Settings(**values)
    gateway = Gateway(config, live_backends(config))
    served = await serve(gateway)
    return Codex(served, api, home, root), api


@pytest.fixture
async def codex(
    serve: ServeFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Codex]:
    c, api = await start(serve, tmp_path, monkeypatch)
    try:
        yield c
    finally:
        await api.close()


@pytest.fixture(params=["minimal", "cli"])
def system_prompt(request: pytest.FixtureRequest) -> str:
    """Both values of the option: codex's own instructions are no door either."""
    mode: str = request.param
    return mode


@pytest.fixture(params=LAUNCHERS)
async def sealed(
    request: pytest.FixtureRequest,
    system_prompt: str,
    serve: ServeFactory,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> AsyncIterator[Codex]:
    c, api = await start(
        serve, tmp_path, monkeypatch, launcher=request.param, system_prompt=system_prompt
    )
    try:
        yield c
    finally:
        await api.close()


def assert_sealed_request(
    body: dict[str, Any],
    functions: tuple[dict[str, Any], ...] = (),
    system_prompt: str = "minimal",
) -> None:
    """No tool of codex's own, in either form: only the client's functions, as plain function
    tools with their schemas unchanged; beside the conversation only our instructions
    (``cli``: codex's own for the model, which name AGENTS.md as a concept) and our context."""
    declared = [
        {"type": "function", "name": f["name"], "parameters": f["parameters"]}
        for f in (t["function"] for t in functions)
    ]
    tools = [{k: t.get(k) for k in ("type", "name", "parameters")} for t in body.get("tools") or []]
    assert tools == declared, body.get("tools")
    items = body["input"]
    assert not [i for i in items if i.get("type") == "additional_tools"], items
    assert not [i for i in items if "tool" in str(i.get("type"))], items
    developer = [i for i in items if i.get("role") == "developer"]
    first = developer[0]["content"][0]["text"].strip()
    if system_prompt == "cli":
        assert "Codex" in first and first != BASE_INSTRUCTIONS.strip()
    else:
        assert first == BASE_INSTRUCTIONS.strip()
        assert "AGENTS.md" not in json.dumps(body)
    for item in developer[1:]:  # codex repeats its instructions for some models; then ours
        text = item["content"][0]["text"].strip()
        assert text == first or text.startswith(("<system_context>", "<rules>", "<instructions>"))
    sent = json.dumps(body)
    assert "AGENTS.md instructions for" not in sent and "<INSTRUCTIONS>" not in sent
    assert "environment_context" not in sent


def user(text: str) -> list[ChatCompletionMessageParam]:
    return [{"role": "user", "content": text}]


async def test_text_answer(codex: Codex) -> None:
    r = await codex.client.chat.completions.create(
        model=MODEL, messages=user("say hi" + fake(answer="Hello from codex!", cached=5))
    )
    assert r.model == MODEL
    assert r.choices[0].message.content == "Hello from codex!"
    assert r.choices[0].finish_reason == "stop"
    assert r.usage is not None and r.usage.prompt_tokens > 0 and r.usage.completion_tokens > 0
    assert r.usage.prompt_tokens_details is not None
    assert r.usage.prompt_tokens_details.cached_tokens == 5
    body, text = codex.only_request()
    assert body["model"] == MODEL
    assert_sealed_request(body)
    assert text.startswith("say hi")  # the user message itself, an item of its own


async def test_stream_text_arrives_as_it_is_generated(codex: Codex) -> None:
    """8 upstream deltas 0.1 s apart reach the SDK as several chunks, the first well before
    the last (``codex exec`` printed the answer whole at the end)."""
    answer = "one two three four five six seven eight"
    stream = await codex.client.chat.completions.create(
        model=MODEL,
        messages=user("count" + fake(answer=answer, chunks=8, delay=0.1)),
        stream=True,
        stream_options={"include_usage": True},
    )
    arrivals: list[tuple[float, str]] = []
    chunks = []
    async for c in stream:
        chunks.append(c)
        if c.choices and c.choices[0].delta.content:
            arrivals.append((asyncio.get_running_loop().time(), c.choices[0].delta.content))
    assert "".join(t for _, t in arrivals) == answer
    assert len(arrivals) >= 4
    assert arrivals[-1][0] - arrivals[0][0] > 0.3  # upstream spread 0.7 s: not one piece
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert finishes[-1] == "stop"
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens > 0


async def test_tool_round_trip_with_native_function_calls(codex: Codex) -> None:
    """The client's function is declared upstream as a plain function tool with its schema
    and no codex tool; the model's call reaches the SDK as a tool call; the second turn
    carries the call and its output as items, and the final text comes back."""
    messages: list[ChatCompletionMessageParam] = user(
        "Weather in Paris?" + fake(tool_calls=[PARIS])
    )
    first = await codex.client.chat.completions.create(
        model=MODEL,
        messages=messages,
        tools=[WEATHER],  # type: ignore[list-item]
    )
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls"
    (call,) = choice.message.tool_calls or []
    assert call.function.name == "get_weather"  # type: ignore[union-attr]
    assert json.loads(call.function.arguments) == {"city": "Paris"}  # type: ignore[union-attr]
    messages = [
        *messages,
        choice.message.model_dump(exclude_none=True),  # type: ignore[list-item]
        {
            "role": "tool",
            "tool_call_id": call.id,
            "content": "rain, 11 C" + fake(answer="It rains."),
        },
    ]
    second = await codex.client.chat.completions.create(
        model=MODEL,
        messages=messages,
        tools=[WEATHER],  # type: ignore[list-item]
    )
    assert second.choices[0].message.content == "It rains."
    assert second.choices[0].finish_reason == "stop"
    bodies = codex.bodies()
    assert len(bodies) == 2  # the interrupt sent nothing more upstream
    for body in bodies:
        assert_sealed_request(body, (WEATHER,))
    items = [i for i in bodies[1]["input"] if i.get("role") != "developer"]
    assert [i["type"] for i in items] == ["message", "function_call", "function_call_output"]
    assert items[1]["call_id"] == call.id and items[1]["name"] == "get_weather"
    assert json.loads(items[1]["arguments"]) == {"city": "Paris"}
    assert items[2]["call_id"] == call.id and items[2]["output"].startswith("rain, 11 C")


async def test_parallel_tool_calls(codex: Codex) -> None:
    r = await codex.client.chat.completions.create(
        model=MODEL,
        messages=user(
            "weather and time" + fake(tool_calls=[PARIS, {"name": "get_time", "arguments": {}}])
        ),
        tools=[WEATHER, TIME],  # type: ignore[list-item]
    )
    calls = r.choices[0].message.tool_calls or []
    assert sorted(c.function.name for c in calls) == ["get_time", "get_weather"]  # type: ignore[union-attr]
    assert len({c.id for c in calls}) == 2
    single = await codex.client.chat.completions.create(
        model=MODEL,
        messages=user(
            "weather and time" + fake(tool_calls=[PARIS, {"name": "get_time", "arguments": {}}])
        ),
        tools=[WEATHER, TIME],  # type: ignore[list-item]
        parallel_tool_calls=False,
    )
    assert len(single.choices[0].message.tool_calls or []) == 1
    assert len(codex.bodies()) == 2


async def test_structured_output_is_the_upstream_format(codex: Codex) -> None:
    from pydantic import BaseModel

    class Person(BaseModel):
        name: str
        age: int

    r = await codex.client.beta.chat.completions.parse(
        model=MODEL,
        messages=user("Ada, 36" + fake(answer='{"name":"Ada","age":36}')),
        response_format=Person,
    )
    assert r.choices[0].message.parsed == Person(name="Ada", age=36)
    body, _ = codex.only_request()
    fmt = body["text"]["format"]
    assert fmt["type"] == "json_schema" and fmt["strict"] is True
    assert set(fmt["schema"]["properties"]) == {"name", "age"}
    assert fmt["schema"]["additionalProperties"] is False
    assert_sealed_request(body)


async def test_png_and_jpeg_arrive_in_place(codex: Codex) -> None:
    r = await codex.client.chat.completions.create(
        model=MODEL,
        messages=[
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "a red square:"},
                    image_part(data_url(PNG)),  # type: ignore[list-item]
                    {"type": "text", "text": "and a photo:"},
                    image_part(data_url(JPEG)),  # type: ignore[list-item]
                    {"type": "text", "text": "which is which?" + fake(answer="Two images.")},
                ],
            }
        ],
    )
    assert r.choices[0].message.content == "Two images."
    body, _ = codex.only_request()
    (message,) = [i for i in body["input"] if i.get("role") == "user"]
    kinds = [(c["type"], c.get("text", c.get("image_url", ""))[:12]) for c in message["content"]]
    assert kinds == [
        ("input_text", "a red square"),
        ("input_image", "data:image/p"),
        ("input_text", "and a photo:"),
        ("input_image", "data:image/j"),
        ("input_text", "which is whi"),
    ]
    images = [c["image_url"] for c in message["content"] if c["type"] == "input_image"]
    # the media type as sniffed from the bytes (the client called the JPEG a PNG)
    assert images == [data_url(PNG), data_url(JPEG, "image/jpeg")]
    assert_sealed_request(body)


async def test_responses_api(codex: Codex) -> None:
    r = await codex.client.responses.create(
        model=MODEL, input="say hi" + fake(answer="Hi from the Responses API.")
    )
    assert r.output_text == "Hi from the Responses API."
    body, _ = codex.only_request()
    assert_sealed_request(body)


async def test_rate_limit_is_429_after_one_upstream_request(codex: Codex) -> None:
    with pytest.raises(openai.RateLimitError) as info:
        await codex.client.chat.completions.create(
            model=MODEL, messages=user("say hi" + fake(status=429, retry_after=3))
        )
    assert info.value.status_code == 429
    assert len(codex.bodies()) == 1  # request_max_retries = 0: codex did not retry


async def test_auth_failure_is_503_cli_auth_failed_not_retried(codex: Codex) -> None:
    """The provider refused the gateway's credential: not the client's fault (errors.py)."""
    with pytest.raises(openai.InternalServerError) as info:
        await codex.client.chat.completions.create(
            model=MODEL, messages=user("say hi" + fake(status=401))
        )
    assert info.value.status_code == 503 and info.value.code == "cli_auth_failed"
    assert info.value.response.headers["x-should-retry"] == "false"
    assert len(codex.bodies()) == 1


def authorizations(api: FakeModelAPI) -> list[str | None]:
    """The Authorization header of each model call the fake API received."""
    return [
        {k.lower(): v for k, v in r["headers"].items()}.get("authorization")
        for r in api.requests
        if r["path"] == "/v1/responses"
    ]


@pytest.mark.parametrize("launcher", LAUNCHERS)
async def test_api_key_is_sent_as_the_bearer_key(
    launcher: str, serve: ServeFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """CODEX_API_KEY reaches the model API as ``Authorization: Bearer <key>``: app-server
    takes it only through the provider's ``env_key`` (before, it sent no Authorization at all
    and the real API refused every call, tests/data/real-cli/codex-0.169.0-api-key.md), and
    nothing of the key is on disk once the call is over."""
    key = "sk-proj-" + secrets.token_hex(16)
    c, api = await start(serve, tmp_path, monkeypatch, launcher=launcher, key=key)
    try:
        r = await c.client.chat.completions.create(
            model=MODEL, messages=user("say hi" + fake(answer="Hi from a key."))
        )
        assert r.choices[0].message.content == "Hi from a key."
        assert authorizations(api) == [f"Bearer {key}"]
        await c.served.gateway.close()
        for path in tmp_path.rglob("*"):  # HOME and the work root (private homes)
            if path.is_file() and not path.is_symlink():
                assert key.encode() not in path.read_bytes(), path
    finally:
        await api.close()


def files_holding(root: Path, secret: bytes) -> set[str]:
    """The files under ``root`` (symlinks not followed) whose bytes hold ``secret``."""
    found = set()
    for path in root.rglob("*"):
        try:
            if path.is_file() and not path.is_symlink() and secret in path.read_bytes():
                found.add(str(path.relative_to(root)))
        except OSError:  # a file the CLI removed meanwhile
            pass
    return found


@pytest.mark.parametrize("launcher", LAUNCHERS)
async def test_the_api_key_is_on_no_disk_while_the_call_runs(
    launcher: str, serve: ServeFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While a call runs (the model answers after 4 s), no file under HOME or the work root
    holds CODEX_API_KEY: codex's shell snapshot (a ``declare -x`` of its whole environment in
    ``shell_snapshots/``, for the shell tool it never gets here) is off."""
    key = "sk-proj-" + secrets.token_hex(16)
    c, api = await start(serve, tmp_path, monkeypatch, launcher=launcher, key=key)
    try:
        call = asyncio.create_task(
            c.client.chat.completions.create(
                model=MODEL, messages=user("say hi" + fake(answer="Hi.", initial_delay=4))
            )
        )
        seen: set[str] = set()
        while not call.done():
            seen |= files_holding(tmp_path, key.encode())
            await asyncio.sleep(0.2)
        assert (await call).choices[0].message.content == "Hi."
        assert authorizations(api) == [f"Bearer {key}"]
        assert not seen, seen
    finally:
        await api.close()


def chatgpt_login(home: Path, expires_at: float) -> dict[str, Any]:
    """A ChatGPT login in ``home/.codex/auth.json``, refreshed a day ago."""
    last = time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime(time.time() - 86400))
    auth = codex_auth_json("rt-0", expires_at, last)
    path = home / ".codex" / "auth.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(auth, indent=2))
    path.chmod(0o600)
    return auth


async def test_api_key_wins_over_a_chatgpt_login(
    serve: ServeFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a key and an expired ChatGPT login, the key is sent and the login is left alone:
    not linked, so codex neither refreshes it (outside the gateway's refresh gate) nor sends
    its token."""
    token = await FakeTokenAPI(live="rt-0").start()
    monkeypatch.setenv("CODEX_REFRESH_TOKEN_URL_OVERRIDE", token.url + "/oauth/token")
    key = "sk-proj-" + secrets.token_hex(16)
    override = ["CODEX_REFRESH_TOKEN_URL_OVERRIDE"]
    c, api = await start(serve, tmp_path, monkeypatch, key=key, pass_env=override)
    try:
        chatgpt_login(c.home, time.time() - 3600)
        before = (c.home / ".codex" / "auth.json").read_bytes()
        r = await c.client.chat.completions.create(
            model=MODEL, messages=user("say hi" + fake(answer="The key answers."))
        )
        assert r.choices[0].message.content == "The key answers."
        assert authorizations(api) == [f"Bearer {key}"]
        assert token.refreshes == 0
        assert (c.home / ".codex" / "auth.json").read_bytes() == before
    finally:
        await token.close()
        await api.close()


@pytest.mark.parametrize("launcher", LAUNCHERS)
async def test_chatgpt_login_sends_its_access_token(
    launcher: str, serve: ServeFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No key: the linked ChatGPT login's access token is the credential (the fake API takes
    no other), with its account id; a login still valid is not refreshed."""
    token = await FakeTokenAPI(live="rt-0").start()
    monkeypatch.setenv("CODEX_REFRESH_TOKEN_URL_OVERRIDE", token.url + "/oauth/token")
    override = ["CODEX_REFRESH_TOKEN_URL_OVERRIDE"]
    c, api = await start(
        serve, tmp_path, monkeypatch, launcher=launcher, key=None, pass_env=override
    )
    try:
        access = chatgpt_login(c.home, time.time() + 3600)["tokens"]["access_token"]
        api.accept_bearer = lambda t: t == access
        r = await c.client.chat.completions.create(
            model=MODEL, messages=user("say hi" + fake(answer="The login answers."))
        )
        assert r.choices[0].message.content == "The login answers."
        assert authorizations(api) == [f"Bearer {access}"]
        (request,) = [r for r in api.requests if r["path"] == "/v1/responses"]
        headers = {k.lower(): v for k, v in request["headers"].items()}
        assert headers.get("chatgpt-account-id") == "acct-test"
        assert token.refreshes == 0
    finally:
        await token.close()
        await api.close()


async def test_warm_call_answers(
    serve: ServeFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pre-started app-server has done its handshake (the warm prefix) and waits for the
    thread and turn with no time limit."""
    c, api = await start(serve, tmp_path, monkeypatch, warm_pool=True)
    try:
        pool = c.served.gateway.pool
        assert pool is not None
        cold = await c.client.chat.completions.create(
            model=MODEL, messages=user("PROMPT_ONE_5b1" + fake(answer="cold answer"))
        )
        assert cold.choices[0].message.content == "cold answer"
        await wait_until(lambda: pool.status()["ready"].get("codex"), 60, "a codex spare")  # type: ignore[attr-defined]
        supervisor = c.served.gateway.supervisor
        await wait_until(lambda: not supervisor.starting, 30, "its start to be over")  # warm
        await asyncio.sleep(3)  # idle a while: it must keep waiting
        warm = await c.client.chat.completions.create(
            model=MODEL, messages=user("PROMPT_TWO_9c4" + fake(answer="warm answer"))
        )
        assert warm.choices[0].message.content == "warm answer"
        assert pool.status()["served_warm"] == 1
        last = json.dumps(c.bodies()[-1])
        assert "PROMPT_TWO_9c4" in last and "PROMPT_ONE_5b1" not in last
    finally:
        await c.served.gateway.close()
        await api.close()


async def test_cli_tool_call_ends_the_call_at_once(
    serve: ServeFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A model call to codex's own tool runs nothing; codex would ask again forever. Its
    stderr is merged into stdout (``merge_stderr``): the first ``unsupported call`` line ends
    the call with a 502, and the CLI is killed within a short grace."""
    c, api = await start(serve, tmp_path, monkeypatch)
    try:
        canary = tmp_path / "work-canary"
        args = {"cmd": f"touch {canary}"}
        with pytest.raises(openai.InternalServerError) as info:
            await c.client.chat.completions.create(
                model=MODEL,
                messages=user("hi" + fake(cli_tool_call="exec_command", cli_tool_args=args)),
            )
        assert info.value.status_code == 502
        body: Any = info.value.body
        assert body["code"] == "invalid_tool_call" and "exec_command" in body["message"]
        assert not canary.exists()
        stats = c.served.gateway.supervisor.running
        assert stats == 0
        # ended within the short grace after the first sign, not by a timeout (the loop
        # ran ~85 requests a second against this fake)
        assert len(c.bodies()) < 100
    finally:
        await api.close()


async def test_sealed_catalog_of_the_real_binary() -> None:
    assert CODEX is not None
    catalog = json.loads(sealed_catalog([str(CODEX)], os.environ.get("PATH", "")))
    models = catalog["models"]
    assert len(models) > 3 and any(m["slug"] == MODEL for m in models)
    for m in models:
        assert m["shell_type"] == "disabled" and m["experimental_supported_tools"] == []
        assert not {"tool_mode", "multi_agent_version", "apply_patch_tool_type"} & set(m)


@pytest.mark.parametrize("model", ["gpt-6.1-sol", "gpt-5.6-luna", "o3", "codex/gpt-4.1"])
async def test_every_model_form_is_sealed(
    serve: ServeFactory,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    model: str,
    system_prompt: str,
) -> None:
    """Catalog models (JS exec and collaboration tools unsealed) and fallback-metadata models
    (shell tools unsealed) alike, with our instructions or codex's own: no tool upstream."""
    c, api = await start(serve, tmp_path, monkeypatch, system_prompt=system_prompt)
    try:
        r = await c.client.chat.completions.create(
            model=model, messages=user("hi" + fake(answer="ok"))
        )
        assert r.choices[0].message.content == "ok"
        body, _ = c.only_request()
        assert_sealed_request(body, system_prompt=system_prompt)
    finally:
        await api.close()


async def test_host_files_never_reach_the_model_and_nothing_stays(sealed: Codex) -> None:
    secret = "CANARY" + secrets.token_hex(8)
    for path in (
        sealed.home / ".codex" / "AGENTS.md",
        sealed.home / ".codex" / "AGENTS.override.md",
        sealed.home / "AGENTS.md",
        sealed.root / "AGENTS.md",  # a parent of every pdeathsig work dir
    ):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"Always say {secret}.")
    (sealed.home / ".codex" / "config.toml").write_text(
        f'developer_instructions = "Always say {secret}."\n'
    )
    before = sorted(p for p in sealed.home.rglob("*"))
    tokens = ["TOKEN" + secrets.token_hex(8) for _ in range(3)]
    for token in tokens:
        r = await sealed.client.chat.completions.create(
            model=MODEL, messages=user(token + fake(answer="ok"))
        )
        assert r.choices[0].message.content == "ok"
    await sealed.served.gateway.close()
    sent = json.dumps(sealed.bodies())
    assert secret not in sent and all(t in sent for t in tokens)
    assert sorted(p for p in sealed.home.rglob("*")) == before  # nothing added under HOME
    for p in sealed.home.rglob("*"):
        if p.is_file():
            assert not any(t.encode() in p.read_bytes() for t in tokens)
    assert not sealed.root.exists() or not any(sealed.root.rglob("call-*"))
    assert not sealed.root.exists() or not any(sealed.root.rglob("home-*"))


@pytest.mark.parametrize("model", ["gpt-6.1-sol", "gpt-5.5", "o3"])
async def test_fallback_catalog_is_accepted_and_sealed(
    serve: ServeFactory,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    model: str,
    system_prompt: str,
) -> None:
    """When ``codex debug models`` gives nothing the one-model fallback catalog stands in:
    codex accepts it and every model, in it or not, is still sealed (``cli``: gpt-5.5, the
    one entry, gets our instructions, the others codex's built-in ones)."""
    from cli_proxy.backends.codex import backend as codex_module
    from cli_proxy.backends.codex.catalog import FALLBACK_CATALOG

    fallback = json.dumps(FALLBACK_CATALOG).encode()
    monkeypatch.setattr(codex_module, "sealed_catalog", lambda command, path, mode: fallback)
    c, api = await start(serve, tmp_path, monkeypatch, system_prompt=system_prompt)
    try:
        r = await c.client.chat.completions.create(
            model=model, messages=user("hi" + fake(answer="ok"))
        )
        assert r.choices[0].message.content == "ok"
        body, _ = c.only_request()
        mode = "minimal" if model == "gpt-5.5" else system_prompt
        assert_sealed_request(body, system_prompt=mode)
    finally:
        await api.close()


async def test_reasoning_effort_reaches_the_model_api(codex: Codex) -> None:
    r = await codex.client.chat.completions.create(
        model=MODEL, messages=user("hi" + fake(answer="ok")), reasoning_effort="low"
    )
    assert r.choices[0].message.content == "ok"
    body, _ = codex.only_request()
    assert body["reasoning"]["effort"] == "low"


def window_headers(used: str, reset: int) -> dict[str, str]:
    """codex's rate-limit headers (tests/data/real-cli/codex-0.169.0-rate-limits.md)."""
    return {
        "x-codex-primary-used-percent": used,
        "x-codex-primary-window-minutes": "300",
        "x-codex-primary-reset-at": str(reset),
        "x-codex-secondary-used-percent": "17",
        "x-codex-secondary-window-minutes": "10080",
        "x-codex-secondary-reset-at": str(reset + 4 * 86400),
    }


async def test_subscription_windows_in_health_and_gauges(
    serve: ServeFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The real codex reads the window headers of the Responses API and tells the gateway
    (``account/rateLimits/updated``): both windows in ``/health`` and the gauges, as claude's
    are; a response without the headers (a sparse update) leaves them; a usage-limit 429 is a
    429 naming the used-up window, its Retry-After running to the window's reset."""
    import aiohttp

    from tests.server.test_metrics import scrape, value

    reset = int(time.time()) + 3600
    api = await QuotaModelAPI(headers=window_headers("42.5", reset), log_unknown=False).start()
    c, _ = await start(serve, tmp_path, monkeypatch, api=api)
    base = c.served.base_url.removesuffix("/v1")

    async def windows() -> dict[str, Any]:
        async with aiohttp.ClientSession() as session, session.get(f"{base}/health") as r:
            health: dict[str, Any] = await r.json()
        return health["rate_limits"].get("codex", {})

    expected = {
        "five_hour": {
            "status": "allowed",
            "utilization": 0.43,  # codex rounds the header's 42.5 to a whole percent
            "resets_at": reset,
            "window_minutes": 300,
        },
        "seven_day": {
            "status": "allowed",
            "utilization": 0.17,
            "resets_at": reset + 4 * 86400,
            "window_minutes": 10080,
        },
    }
    try:
        r = await c.client.chat.completions.create(
            model=MODEL, messages=user("say hi" + fake(answer="windows"))
        )
        assert r.choices[0].message.content == "windows"
        assert await windows() == expected
        s = await scrape(c.served)
        for window, minutes in (("five_hour", 300), ("seven_day", 10080)):
            labels = {"backend": "codex", "window": window}
            assert value(s, "cli_proxy_rate_limit_utilization", **labels) == pytest.approx(
                expected[window]["utilization"]
            )
            assert (
                value(s, "cli_proxy_rate_limit_resets_at_seconds", **labels)
                == (expected[window]["resets_at"])
            )
            assert value(s, "cli_proxy_rate_limit_window_minutes", **labels) == minutes
            assert value(s, "cli_proxy_rate_limit_status", status="allowed", **labels) == 1

        api.headers = {}  # no headers: codex still sends an update, every window null
        r = await c.client.chat.completions.create(
            model=MODEL, messages=user("again" + fake(answer="sparse"))
        )
        assert r.choices[0].message.content == "sparse"
        assert await windows() == expected

        limit_reset = int(time.time()) + 1800
        api.headers = window_headers("100", limit_reset) | {
            "x-codex-active-limit": "codex",
            "x-codex-rate-limit-reached-type": "rate_limit_reached",
        }
        api.error = (
            429,
            {
                "error": {
                    "type": "usage_limit_reached",
                    "message": "The usage limit has been reached",
                    "plan_type": "plus",
                    "resets_at": limit_reset,
                    "resets_in_seconds": 1800,
                }
            },
        )
        sent = time.time()
        async with (
            aiohttp.ClientSession() as session,
            session.post(
                f"{c.served.base_url}/chat/completions",
                json={"model": MODEL, "messages": user("once more")},
            ) as resp,
        ):
            assert resp.status == 429
            retry_after = int(resp.headers["Retry-After"])
            body = await resp.json()
        # the wait to the reset as the gateway saw it while the call ran (between sent and now:
        # a call of several seconds on a busy machine is no error)
        assert limit_reset - time.time() - 60 <= retry_after <= limit_reset - sent + 1
        assert "five_hour (300 min) window is used up" in body["error"]["message"], body
        now = await windows()
        assert now["five_hour"]["status"] == "rejected"
        assert now["five_hour"]["utilization"] == 1.0
        assert now["five_hour"]["resets_at"] == limit_reset
        assert now["seven_day"]["status"] == "allowed"
        assert len(c.bodies()) == 3  # one upstream request per call: nothing retried
    finally:
        await api.close()
