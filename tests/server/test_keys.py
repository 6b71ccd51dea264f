"""Keys, budgets and fallback over real HTTP (issue 47, docs/keys.md): the official SDKs
against a gateway with a keys file, fake CLIs whose reported windows and failures the test
sets (``fake(...)``; ``per_cli`` scripts each CLI of an alias on its own)."""

from __future__ import annotations

import asyncio
import hashlib
import json
import sqlite3
import time
from pathlib import Path
from typing import Any

import aiohttp
import anthropic
import openai
import pytest

from cli_proxy.config import Settings
from cli_proxy.gateway import Gateway, live_backends, reload_keys
from tests.conftest import Served, ServeFactory, fake, fake_settings

ME, CI, TINY, OTHER = "sk-me-0123", "sk-ci-4567", "sk-tiny-89ab", "sk-other-cdef"
KEYS = f"""\
[keys.me]
secret = "{ME}"

[keys.ci]
secret_sha256 = "{hashlib.sha256(CI.encode()).hexdigest()}"
max_concurrent = 1
max_window_percent = 80
models = ["claude-*", "smart"]

[keys.tiny]
secret = "{TINY}"
tokens_per_day = 60

[models.smart]
try = ["claude-sonnet-4-6", "gemini-2.5-flash"]
"""
CLAUDE, GEMINI = "claude-sonnet-4-6", "gemini-2.5-flash"


@pytest.fixture(autouse=True)
def logged_in(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fake CLIs need no login, but alias choice skips a backend with none (doctor's
    check): each backend here has one, a key variable the fakes never send anywhere."""
    for var in ("ANTHROPIC_API_KEY", "GEMINI_API_KEY"):
        monkeypatch.setenv(var, "sk-fake-login")


def user(text: str) -> list[dict[str, Any]]:
    return [{"role": "user", "content": text}]


def window(used: float, resets_in: float, status: str = "allowed_warning") -> dict[str, Any]:
    return {
        "status": status,
        "rateLimitType": "five_hour",
        "utilization": used,
        "resetsAt": int(time.time() + resets_in),
    }


@pytest.fixture
def keys_file(tmp_path: Path) -> Path:
    path = tmp_path / "keys.toml"
    path.write_text(KEYS)
    return path


@pytest.fixture
async def keyed(serve: ServeFactory, keys_file: Path, tmp_path: Path) -> Served:
    return await serve(
        keys_file=keys_file, state_dir=tmp_path / "state", queue_timeout_s=0.5, max_concurrency=8
    )


def oai(served: Served, key: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=served.base_url, api_key=key, max_retries=0, timeout=30)


def ant(served: Served, key: str) -> anthropic.AsyncAnthropic:
    root = served.base_url.removesuffix("/v1")
    return anthropic.AsyncAnthropic(base_url=root, api_key=key, max_retries=0, timeout=30)


async def raw(
    served: Served, method: str, path: str, headers: dict[str, str], body: Any = None
) -> tuple[int, dict[str, str], Any]:
    url = served.base_url.removesuffix("/v1") + path
    async with (
        aiohttp.ClientSession() as s,
        s.request(method, url, headers=headers, json=body) as resp,
    ):
        text = await resp.text()
        try:
            data = json.loads(text)
        except ValueError:
            data = text
        return resp.status, dict(resp.headers), data


async def usage_of(served: Served, key: str) -> dict[str, Any]:
    status, _, usage = await raw(served, "GET", "/v1/usage", {"x-api-key": key})
    assert status == 200, usage
    return dict(usage)


# ---------------------------------------------------------------- auth


async def test_wrong_missing_and_doubled_keys_are_401_in_each_shape(keyed: Served) -> None:
    for key in ("wrong", ""):
        with pytest.raises(openai.AuthenticationError) as err:
            await oai(keyed, key or "x").chat.completions.create(model=CLAUDE, messages=user("hi"))
        assert err.value.code == "invalid_api_key"
        with pytest.raises(anthropic.AuthenticationError) as aerr:
            await ant(keyed, key or "x").messages.create(
                model=CLAUDE, max_tokens=10, messages=[{"role": "user", "content": "hi"}]
            )
        assert aerr.value.body["error"]["type"] == "authentication_error"  # type: ignore[index]
    body = {"model": CLAUDE, "messages": user("hi")}
    status, _, data = await raw(keyed, "POST", "/v1/chat/completions", {}, body)
    assert status == 401 and data["error"]["code"] == "invalid_api_key"
    # two different credentials: a right one beside a wrong one, or two right ones
    for other in ("wrong", CI):
        headers = {"Authorization": f"Bearer {ME}", "x-api-key": other}
        status, _, data = await raw(keyed, "POST", "/v1/chat/completions", headers, body)
        assert status == 401, data
        assert "Two different API keys" in data["error"]["message"]
    # the same one twice is one credential
    headers = {"Authorization": f"Bearer {ME}", "x-api-key": ME}
    status, _, data = await raw(keyed, "POST", "/v1/chat/completions", headers, body)
    assert status == 200, data
    # x-goog-api-key is a credential on every path
    status, _, data = await raw(keyed, "POST", "/v1/chat/completions", {"x-goog-api-key": ME}, body)
    assert status == 200, data
    # ?key= is not, outside the Gemini API's paths
    status, _, _ = await raw(keyed, "POST", f"/v1/chat/completions?key={ME}", {}, body)
    assert status == 401


async def test_api_key_beside_keys_is_one_unlimited_key(
    serve: ServeFactory, keys_file: Path, tmp_path: Path
) -> None:
    served = await serve(keys_file=keys_file, state_dir=tmp_path / "s", api_keys=["sk-op"])
    r = await oai(served, "sk-op").chat.completions.create(model=GEMINI, messages=user("hi"))
    assert r.choices[0].message.content == "ok"
    status, _, usage = await raw(served, "GET", "/v1/usage", {"Authorization": "Bearer sk-op"})
    assert status == 200 and usage["key"] == "api-key"
    assert usage["total"]["requests"] == 1


# ---------------------------------------------------------------- models


async def test_model_list_is_filtered_per_key(keyed: Served) -> None:
    ci = [m.id for m in (await oai(keyed, CI).models.list()).data]
    assert ci and all(m.startswith("claude-") or m == "smart" for m in ci)
    assert "smart" in ci and GEMINI not in ci
    me = [m.id for m in (await oai(keyed, ME).models.list()).data]
    assert GEMINI in me and "smart" in me and set(ci) < set(me)


async def test_a_model_outside_the_list_is_403_in_each_shape(keyed: Served) -> None:
    with pytest.raises(openai.PermissionDeniedError) as err:
        await oai(keyed, CI).chat.completions.create(model=GEMINI, messages=user("hi"))
    assert err.value.code == "model_not_allowed"
    assert err.value.body["type"] == "permission_error"  # type: ignore[index]
    with pytest.raises(openai.PermissionDeniedError):
        await oai(keyed, CI).responses.create(model=GEMINI, input="hi")
    with pytest.raises(anthropic.PermissionDeniedError) as aerr:
        await ant(keyed, CI).messages.create(
            model=GEMINI, max_tokens=10, messages=[{"role": "user", "content": "hi"}]
        )
    assert aerr.value.body["error"]["type"] == "permission_error"  # type: ignore[index]
    usage = await usage_of(keyed, CI)
    assert usage["last_24h"]["requests"] == 3 and usage["last_24h"]["errors"] == 3


# ---------------------------------------------------------------- concurrency


async def test_max_concurrent_waits_its_turn_then_429(keyed: Served) -> None:
    client = oai(keyed, CI)
    slow = asyncio.create_task(
        client.chat.completions.create(model=CLAUDE, messages=user(fake(answer="slow", hang=2)))
    )
    await asyncio.sleep(0.3)
    with pytest.raises(openai.RateLimitError) as err:
        await client.chat.completions.create(model=CLAUDE, messages=user("hi"))
    assert err.value.code == "key_concurrency_limit"
    assert int(err.value.response.headers["retry-after"]) >= 1
    # another key is not held up by ci's call
    r = await oai(keyed, ME).chat.completions.create(model=CLAUDE, messages=user("hi"))
    assert r.choices[0].message.content == "ok"
    assert (await slow).choices[0].message.content == "slow"


async def test_a_call_over_max_concurrent_waits_within_the_queue_time(
    serve: ServeFactory, keys_file: Path, tmp_path: Path
) -> None:
    served = await serve(keys_file=keys_file, state_dir=tmp_path / "s", queue_timeout_s=20)
    client = oai(served, CI)
    first = asyncio.create_task(
        client.chat.completions.create(model=CLAUDE, messages=user(fake(answer="a", hang=1)))
    )
    await asyncio.sleep(0.2)
    second = await client.chat.completions.create(model=CLAUDE, messages=user("b"))
    assert first.done() and second.choices[0].message.content == "ok"


# ---------------------------------------------------------------- windows and fallback


async def test_refused_at_the_window_with_retry_after_at_its_reset(keyed: Served) -> None:
    me, ci = oai(keyed, ME), oai(keyed, CI)
    await me.chat.completions.create(
        model=CLAUDE, messages=user(fake(answer="ok", rate_limit=window(0.85, 1234)))
    )
    with pytest.raises(openai.RateLimitError) as err:
        await ci.chat.completions.create(model=CLAUDE, messages=user("hi"))
    assert err.value.code == "window_limit"
    assert 1200 <= int(err.value.response.headers["retry-after"]) <= 1240
    with pytest.raises(anthropic.RateLimitError) as aerr:
        await ant(keyed, CI).messages.create(
            model=CLAUDE, max_tokens=10, messages=[{"role": "user", "content": "hi"}]
        )
    assert 1200 <= int(aerr.value.response.headers["retry-after"]) <= 1240
    # a key without a window limit still goes through
    assert (await me.chat.completions.create(model=CLAUDE, messages=user("hi"))).choices


async def test_a_rejected_window_counts_as_full(keyed: Served) -> None:
    await oai(keyed, ME).chat.completions.create(
        model=CLAUDE, messages=user(fake(answer="ok", rate_limit=window(0.3, 600, "rejected")))
    )
    with pytest.raises(openai.RateLimitError) as err:
        await oai(keyed, CI).chat.completions.create(model=CLAUDE, messages=user("hi"))
    assert err.value.code == "window_limit"


async def test_alias_falls_back_on_a_window(keyed: Served) -> None:
    me, ci = oai(keyed, ME), oai(keyed, CI)
    r = await ci.chat.completions.with_raw_response.create(model="smart", messages=user("hi"))
    assert r.headers["x-cli-proxy-model"] == CLAUDE and r.parse().model == CLAUDE
    await me.chat.completions.create(
        model=CLAUDE, messages=user(fake(answer="ok", rate_limit=window(0.9, 900)))
    )
    # ci's models list allows "smart" and its claude target, not gemini: nothing can answer
    with pytest.raises(openai.RateLimitError) as err:
        await ci.chat.completions.create(model="smart", messages=user("hi"))
    assert err.value.code == "no_model_available"
    assert 880 <= int(err.value.response.headers["retry-after"]) <= 905
    # me may use gemini: at 90 % claude is no longer "rejected", so claude still answers me;
    # an alias for me falls back once claude's window is rejected
    await me.chat.completions.create(
        model=CLAUDE, messages=user(fake(answer="ok", rate_limit=window(1.0, 900, "rejected")))
    )
    r = await me.chat.completions.with_raw_response.create(model="smart", messages=user("hi"))
    assert r.headers["x-cli-proxy-model"] == GEMINI and r.parse().model == GEMINI
    m = await ant(keyed, ME).messages.with_raw_response.create(
        model="smart", max_tokens=10, messages=[{"role": "user", "content": "hi"}]
    )
    assert m.headers["x-cli-proxy-model"] == GEMINI and (await m.parse()).model == GEMINI
    usage = await usage_of(keyed, ME)
    by_model = usage["total"]["by_model"]
    assert by_model[GEMINI]["requests"] == 2 and "smart" not in by_model


async def test_alias_falls_back_on_a_usage_limit_error_before_the_first_byte(
    keyed: Served,
) -> None:
    limit = {"is_error": True, "api_error_status": 429, "error_message": "usage limit reached"}
    script = fake(per_cli={"claude": limit, "gemini": {"answer": "from gemini"}})
    me = oai(keyed, ME)
    for stream in (False, True):
        keyed.gateway.governor.cool_until.clear()
        if stream:
            chunks = await me.chat.completions.create(
                model="smart", messages=user(script), stream=True
            )
            parts = [c async for c in chunks]
            text = "".join(c.choices[0].delta.content or "" for c in parts if c.choices)
            assert text == "from gemini" and parts[0].model == GEMINI
        else:
            r = await me.chat.completions.with_raw_response.create(
                model="smart", messages=user(script)
            )
            assert r.parse().choices[0].message.content == "from gemini"
            assert r.headers["x-cli-proxy-model"] == GEMINI
    # the failed attempt started a cool-down: the next alias call goes to gemini at once
    assert keyed.gateway.governor.cooling("claude") is not None
    # a direct call still goes through and gets the backend's own answer
    r2 = await me.chat.completions.create(model=CLAUDE, messages=user("direct"))
    assert r2.choices[0].message.content == "ok"
    usage = await usage_of(keyed, ME)
    day = usage["last_24h"]
    assert day["errors"] == 0  # the fall-through attempts are not the key's errors
    assert day["by_model"][GEMINI]["requests"] == 2 and day["by_model"][CLAUDE]["requests"] == 1


async def test_alias_skips_a_backend_whose_login_is_missing_or_refused(
    keyed: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fallback picks a target only if its backend is logged in; a direct call still goes
    through and gets the backend's own answer (docs/keys.md, How fallback chooses)."""
    gov, me = keyed.gateway.governor, oai(keyed, ME)
    refused = {"is_error": True, "api_error_status": 401, "error_message": "Invalid API key"}
    script = fake(per_cli={"claude": refused, "gemini": {"answer": "from gemini"}})
    # claude's login refused before the first byte: the alias tries gemini, no error filed
    r = await me.chat.completions.with_raw_response.create(model="smart", messages=user(script))
    assert r.headers["x-cli-proxy-model"] == GEMINI
    assert r.parse().choices[0].message.content == "from gemini"
    assert gov.login_block("claude") == "its login was refused (cli_auth_failed)"
    r = await me.chat.completions.with_raw_response.create(model="smart", messages=user("hi"))
    assert r.headers["x-cli-proxy-model"] == GEMINI  # skipped without trying it
    # a direct call goes through and gets the backend's own answer: here it serves again
    assert (await me.chat.completions.create(model=CLAUDE, messages=user("hi"))).choices
    r = await me.chat.completions.with_raw_response.create(model="smart", messages=user("hi"))
    assert r.headers["x-cli-proxy-model"] == CLAUDE
    # no credential at all (doctor says "no login"), and no call of it answered here
    monkeypatch.delenv("GEMINI_API_KEY")
    monkeypatch.setenv("HOME", str(keyed.gateway.settings.state_dir))  # no ~/.gemini there
    gov._logins.clear()
    gov.answered.discard("gemini")
    assert (gov.login_block("gemini") or "").startswith("no login")
    with pytest.raises(openai.InternalServerError) as err:  # the direct call: claude's answer
        await me.chat.completions.create(model=CLAUDE, messages=user(fake(**refused)))
    assert err.value.code == "cli_auth_failed"
    with pytest.raises(openai.RateLimitError) as limited:  # claude refused, gemini no login
        await me.chat.completions.create(model="smart", messages=user("hi"))
    assert limited.value.code == "no_model_available"
    usage = await usage_of(keyed, ME)
    assert usage["last_24h"]["by_model"][GEMINI]["errors"] == 0  # fall-throughs not errors


async def test_nothing_can_answer_an_alias(keyed: Served) -> None:
    limit = {"is_error": True, "api_error_status": 429, "error_message": "usage limit reached"}
    script = fake(per_cli={"claude": limit, "gemini": limit})
    with pytest.raises(openai.RateLimitError) as err:
        await oai(keyed, ME).chat.completions.create(model="smart", messages=user(script))
    assert int(err.value.response.headers["retry-after"]) >= 1
    with pytest.raises(openai.RateLimitError) as err:
        await oai(keyed, ME).chat.completions.create(model="smart", messages=user("hi"))
    assert err.value.code == "no_model_available"  # both cool down now


# ---------------------------------------------------------------- tokens


async def test_daily_token_budget(keyed: Served) -> None:
    tiny = oai(keyed, TINY)
    r = await tiny.chat.completions.create(model=CLAUDE, messages=user("x" * 400))
    assert r.usage is not None and r.usage.prompt_tokens + r.usage.completion_tokens >= 60
    with pytest.raises(openai.RateLimitError) as err:
        await tiny.chat.completions.create(model=CLAUDE, messages=user("hi"))
    assert err.value.code == "token_budget_exhausted"
    assert 86000 <= int(err.value.response.headers["retry-after"]) <= 86400
    usage = await usage_of(keyed, TINY)
    day = usage["last_24h"]
    assert day["requests"] == 2 and day["errors"] == 1
    assert day["input_tokens"] == r.usage.prompt_tokens
    assert day["output_tokens"] == r.usage.completion_tokens


async def test_tokens_count_when_the_client_asked_for_no_usage_and_when_it_left(
    keyed: Served,
) -> None:
    me = oai(keyed, ME)
    chunks = await me.chat.completions.create(model=CLAUDE, messages=user("abc" * 100), stream=True)
    async for _ in chunks:
        pass  # no stream_options: the client sees no usage, the key's usage has it
    usage = await usage_of(keyed, ME)
    assert usage["total"]["input_tokens"] > 0 and usage["total"]["output_tokens"] > 0
    # a client that leaves mid-answer: the CLI is ended; what it read still counts
    before = usage["total"]["input_tokens"]
    body = {
        "model": CLAUDE,
        "stream": True,
        "messages": user("y" * 2000 + fake(answer="z" * 50, chunks=50, delay=0.2)),
    }
    url = keyed.base_url + "/chat/completions"
    async with (
        aiohttp.ClientSession() as s,
        s.post(url, json=body, headers={"x-api-key": ME}) as resp,
    ):
        await resp.content.readline()
    for _ in range(50):
        usage = await usage_of(keyed, ME)
        if usage["total"]["requests"] == 2:
            break
        await asyncio.sleep(0.1)
    assert usage["total"]["requests"] == 2
    assert usage["total"]["input_tokens"] - before >= 400  # never zero


# ---------------------------------------------------------------- usage


async def test_usage_is_each_keys_own_and_survives_a_restart(
    serve: ServeFactory, keys_file: Path, tmp_path: Path
) -> None:
    state = tmp_path / "state"
    served = await serve(keys_file=keys_file, state_dir=state)
    await oai(served, ME).chat.completions.create(model=CLAUDE, messages=user("hi"))
    await oai(served, CI).chat.completions.create(model=CLAUDE, messages=user("hi"))
    await oai(served, CI).chat.completions.create(model="smart", messages=user("hi"))
    status, _, ci = await raw(served, "GET", "/v1/usage", {"x-api-key": CI})
    assert status == 200
    assert set(ci) == {"key", "last_24h", "total"} and ci["key"] == "ci"
    fields = {"requests", "errors", "input_tokens", "cached_input_tokens", "output_tokens"}
    assert set(ci["last_24h"]) == fields | {"by_model"}
    assert set(ci["last_24h"]["by_model"][CLAUDE]) == fields
    assert ci["last_24h"]["requests"] == 2  # /v1/usage itself is not counted
    # another key's name in the query: still one's own usage
    status, _, again = await raw(served, "GET", "/v1/usage?key=me", {"x-api-key": CI})
    assert again["key"] == "ci" and again["total"] == ci["total"]
    status, _, _ = await raw(served, "GET", "/v1/usage", {})
    assert status == 401
    await served.server.close()
    await served.gateway.close()
    again_served = await serve(keys_file=keys_file, state_dir=state)
    status, _, after = await raw(again_served, "GET", "/v1/usage", {"x-api-key": CI})
    assert after["total"] == ci["total"] and after["last_24h"] == ci["last_24h"]


async def test_no_secret_in_logs_metrics_status_or_state(
    keyed: Served, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    await oai(keyed, ME).chat.completions.create(model=CLAUDE, messages=user("hi"))
    with pytest.raises(openai.AuthenticationError):
        await oai(keyed, OTHER).chat.completions.create(model=CLAUDE, messages=user("hi"))
    with pytest.raises(openai.PermissionDeniedError):
        await oai(keyed, CI).chat.completions.create(model=GEMINI, messages=user("hi"))
    _, _, metrics = await raw(keyed, "GET", "/metrics", {"x-api-key": ME})
    assert 'cli_proxy_key_requests_total{key="me"} 1.0' in metrics
    assert 'cli_proxy_key_errors_total{key="ci"} 1.0' in metrics
    _, _, page = await raw(keyed, "GET", "/status", {"Authorization": f"Bearer {ME}"})
    assert 'data-key="tiny"' in page and "0 of 60 tokens a day" in page
    _, _, health = await raw(keyed, "GET", "/health", {})
    state = b"".join(p.read_bytes() for p in (tmp_path / "state").iterdir())
    logs = capsys.readouterr()
    digest = hashlib.sha256(CI.encode()).hexdigest()
    for secret in (ME, CI, TINY, OTHER, digest):
        for where, text in (
            ("metrics", metrics),
            ("status", page),
            ("health", json.dumps(health)),
            ("logs", logs.out + logs.err),
        ):
            assert secret not in text, where
        assert secret.encode() not in state
    rows = sqlite3.connect(tmp_path / "state" / "usage.sqlite3").execute(
        "SELECT DISTINCT key FROM totals"
    )
    assert {k for (k,) in rows} == {"me", "ci"}


# ---------------------------------------------------------------- start and reload


def test_a_broken_keys_file_or_state_dir_stops_the_start(tmp_path: Path) -> None:
    from cli_proxy.run.keys import KeysFileError
    from cli_proxy.run.usage import StateError

    bad = tmp_path / "bad.toml"
    bad.write_text('[keys.a]\nsecret = " padded"\n')
    with pytest.raises(KeysFileError, match=r"bad.toml, line 2: .*leading or trailing spaces"):
        Gateway(fake_settings(keys_file=bad, state_dir=tmp_path / "s"), live_backends(Settings()))
    good = tmp_path / "good.toml"
    good.write_text(KEYS)
    (tmp_path / "afile").write_text("")
    with pytest.raises(StateError, match=str(tmp_path / "afile")):
        Gateway(
            fake_settings(keys_file=good, state_dir=tmp_path / "afile" / "s"),
            live_backends(Settings()),
        )


async def test_reload_swaps_keys_and_keeps_them_when_broken(keyed: Served, keys_file: Path) -> None:
    gw = keyed.gateway
    keys_file.write_text(KEYS + f'\n[keys.new]\nsecret = "{OTHER}"\n')
    assert reload_keys(gw) is None
    r = await oai(keyed, OTHER).chat.completions.create(model=CLAUDE, messages=user("hi"))
    assert r.choices
    keys_file.write_text(KEYS + '\n[keys.new]\nsecret = ""\n')
    problem = reload_keys(gw)
    line = len(KEYS.splitlines()) + 3
    assert problem is not None and f"line {line}:" in problem and "empty or blank secret" in problem
    r = await oai(keyed, OTHER).chat.completions.create(model=CLAUDE, messages=user("hi"))
    assert r.choices  # the old keys stay


def test_an_alias_in_a_path_parameter_is_retargeted_there() -> None:
    """A format whose model is a path parameter (Gemini's ``/models/{model}:verb``) reads
    the request again with the target in that parameter, so its answer names the target."""
    from aiohttp.test_utils import make_mocked_request

    from cli_proxy.protocol import ChatCompletionRequest
    from cli_proxy.server.handlers import _retarget
    from cli_proxy.server.wireformat import Inbound

    def read(data: dict[str, Any], request: Any) -> Inbound:
        conversation = ChatCompletionRequest.model_validate(
            {"model": request.match_info["model"], "messages": user(data["text"])}
        )
        return Inbound(conversation)

    request = make_mocked_request("POST", "/v1/models/smart:say", match_info={"model": "smart"})
    data = {"text": "hi"}
    again = _retarget(read(data, request), data, GEMINI, read, request)
    assert again.conversation.model == GEMINI and request.match_info["model"] == GEMINI
    body = {"model": "smart", "messages": user("hi")}
    chat = ChatCompletionRequest.model_validate(body)
    by_body = _retarget(
        Inbound(chat),
        body,
        CLAUDE,
        lambda d, r: Inbound(ChatCompletionRequest.model_validate(d)),
        request,
    )
    assert by_body.conversation.model == CLAUDE
