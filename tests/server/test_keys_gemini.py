"""Keys, budgets and aliases through Google's Gemini API (issue 47, docs/keys.md), judged by
the official ``google-genai`` SDK against a gateway with the keys file of test_keys.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from google.genai import errors

from tests.conftest import Served, ServeFactory, fake
from tests.server.test_generate_content import (
    google_error,
    make_client,
    raw_post,
    sse_payloads,
    strict,
)
from tests.server.test_generate_content import user as gemini_user
from tests.server.test_keys import CI, CLAUDE, GEMINI, KEYS, ME, TINY, raw, usage_of, window
from tests.server.test_keys import logged_in as logged_in  # autouse: each backend logged in

VERSIONS = ["v1beta", "v1"]


@pytest.fixture
async def keyed(serve: ServeFactory, tmp_path: Path) -> Served:
    keys_file = tmp_path / "keys.toml"
    keys_file.write_text(KEYS)
    return await serve(
        keys_file=keys_file, state_dir=tmp_path / "state", queue_timeout_s=0.5, max_concurrency=8
    )


def path(model: str, version: str = "v1beta", verb: str = "generateContent") -> str:
    return f"/{version}/models/{model}:{verb}"


@pytest.mark.parametrize("version", VERSIONS)
async def test_a_named_key_as_x_goog_api_key_and_a_wrong_one(keyed: Served, version: str) -> None:
    good = make_client(keyed, version, api_key=ME)
    r = await good.aio.models.generate_content(model=CLAUDE, contents="hi " + fake(answer="me"))
    assert r.text == "me" and r.model_version == CLAUDE
    bad = make_client(keyed, version, api_key="sk-wrong")
    with pytest.raises(errors.ClientError) as info:
        await bad.aio.models.generate_content(model=CLAUDE, contents="hi")
    assert info.value.code == 401 and info.value.status == "UNAUTHENTICATED"
    google_error(info.value.details, 401, "UNAUTHENTICATED")
    # a right key beside a different one is two credentials: 401 too
    status, _, body = await raw_post(
        keyed,
        path(CLAUDE, version),
        {"contents": [gemini_user("hi")]},
        {"x-goog-api-key": ME, "Authorization": f"Bearer {CI}"},
    )
    assert status == 401
    google_error(json.loads(body), 401, "UNAUTHENTICATED")


async def test_query_key_counts_on_gemini_paths_only(keyed: Served) -> None:
    body = {"contents": [gemini_user("hi " + fake(answer="by query"))]}
    for version in VERSIONS:
        status, _, raw_body = await raw_post(keyed, path(CLAUDE, version) + f"?key={ME}", body)
        assert status == 200, raw_body
        assert strict(json.loads(raw_body)).text == "by query"
        status, _, raw_body = await raw_post(
            keyed, path(CLAUDE, version, "streamGenerateContent") + f"?alt=sse&key={ME}", body
        )
        texts = [
            part.get("text", "")
            for chunk in sse_payloads(raw_body)
            for cand in chunk.get("candidates", [])
            for part in cand.get("content", {}).get("parts", [])
        ]
        assert status == 200 and "".join(texts) == "by query"
        status, _, raw_body = await raw_post(keyed, path(CLAUDE, version) + "?key=sk-wrong", body)
        assert status == 401
        google_error(json.loads(raw_body), 401, "UNAUTHENTICATED")
    # the model list of the Gemini API takes it too
    status, _, models = await raw(keyed, "GET", f"/v1beta/models?key={ME}", {})
    assert status == 200 and "models" in models
    # outside the Gemini API's paths ?key= is not a credential
    chat = {"model": CLAUDE, "messages": [{"role": "user", "content": "hi"}]}
    status, _, data = await raw(keyed, "POST", f"/v1/chat/completions?key={ME}", {}, chat)
    assert status == 401 and data["error"]["code"] == "invalid_api_key"
    msgs = {"model": CLAUDE, "max_tokens": 10, "messages": chat["messages"]}
    status, _, data = await raw(keyed, "POST", f"/v1/messages?key={ME}", {}, msgs)
    assert status == 401 and data["type"] == "error"
    # ... and the usage page is not a Gemini path either
    status, _, _ = await raw(keyed, "GET", f"/v1/usage?key={ME}", {})
    assert status == 401


async def test_a_model_outside_the_keys_list_is_permission_denied(keyed: Served) -> None:
    ci = make_client(keyed, api_key=CI)
    with pytest.raises(errors.ClientError) as info:
        await ci.aio.models.generate_content(model=GEMINI, contents="hi")
    assert info.value.code == 403 and info.value.status == "PERMISSION_DENIED"
    google_error(info.value.details, 403, "PERMISSION_DENIED")
    assert GEMINI in (info.value.message or "")
    with pytest.raises(errors.ClientError) as info:
        async for _ in await ci.aio.models.generate_content_stream(model=GEMINI, contents="hi"):
            pass
    assert info.value.code == 403 and info.value.status == "PERMISSION_DENIED"
    # the same model through a key without a list goes through
    me = make_client(keyed, api_key=ME)
    r = await me.aio.models.generate_content(model=GEMINI, contents="hi " + fake(answer="ok"))
    assert r.text == "ok"


def retry_after(err: errors.APIError) -> int:
    return int(err.response.headers["retry-after"])  # type: ignore[union-attr]


async def test_daily_token_budget_is_resource_exhausted(keyed: Served) -> None:
    tiny = make_client(keyed, api_key=TINY)
    r = await tiny.aio.models.generate_content(model=CLAUDE, contents="x" * 400)
    u = r.usage_metadata
    assert u is not None and (u.prompt_token_count or 0) + (u.candidates_token_count or 0) >= 60
    with pytest.raises(errors.ClientError) as info:
        await tiny.aio.models.generate_content(model=CLAUDE, contents="hi")
    assert info.value.code == 429 and info.value.status == "RESOURCE_EXHAUSTED"
    google_error(info.value.details, 429, "RESOURCE_EXHAUSTED")
    assert 86000 <= retry_after(info.value) <= 86400
    retry = [d for d in info.value.details["error"]["details"] if "RetryInfo" in d["@type"]]
    assert retry and retry[0]["retryDelay"].endswith("s")


async def test_window_limit_is_resource_exhausted_at_its_reset(keyed: Served) -> None:
    me, ci = make_client(keyed, api_key=ME), make_client(keyed, api_key=CI)
    await me.aio.models.generate_content(
        model=CLAUDE, contents=fake(answer="ok", rate_limit=window(0.85, 1234))
    )
    with pytest.raises(errors.ClientError) as info:
        await ci.aio.models.generate_content(model=CLAUDE, contents="hi")
    assert info.value.code == 429 and info.value.status == "RESOURCE_EXHAUSTED"
    assert 1200 <= retry_after(info.value) <= 1240


async def test_an_alias_in_the_path_answers_from_its_target(keyed: Served) -> None:
    ci = make_client(keyed, api_key=CI)
    r = await ci.aio.models.generate_content(model="smart", contents="hi " + fake(answer="alias"))
    assert r.text == "alias" and r.model_version == CLAUDE
    headers = r.sdk_http_response.headers if r.sdk_http_response else {}
    assert (headers or {}).get("x-cli-proxy-model") == CLAUDE
    body = {"contents": [gemini_user("hi " + fake(answer="raw alias"))]}
    for version in VERSIONS:
        status, head, raw_body = await raw_post(
            keyed, path("smart", version), body, {"x-goog-api-key": CI}
        )
        assert status == 200, raw_body
        assert head["x-cli-proxy-model"] == CLAUDE
        assert strict(json.loads(raw_body)).model_version == CLAUDE
    # the stream names the target in every chunk
    chunks = [
        c
        async for c in await ci.aio.models.generate_content_stream(
            model="smart", contents="hi " + fake(answer="streamed")
        )
    ]
    assert "".join(c.text or "" for c in chunks) == "streamed"
    assert {c.model_version for c in chunks} == {CLAUDE}
    # ci may not use gemini: at claude's window over ci's limit nothing can answer it
    me = make_client(keyed, api_key=ME)
    await me.aio.models.generate_content(
        model=CLAUDE, contents=fake(answer="ok", rate_limit=window(0.9, 900))
    )
    with pytest.raises(errors.ClientError) as info:
        await ci.aio.models.generate_content(model="smart", contents="hi")
    assert info.value.code == 429 and info.value.status == "RESOURCE_EXHAUSTED"
    assert 880 <= retry_after(info.value) <= 905
    # me may: once claude's window is rejected its alias falls through to gemini, named so
    await me.aio.models.generate_content(
        model=CLAUDE, contents=fake(answer="ok", rate_limit=window(1.0, 900, "rejected"))
    )
    r = await me.aio.models.generate_content(model="smart", contents="hi " + fake(answer="g"))
    assert r.text == "g" and r.model_version == GEMINI
    headers = r.sdk_http_response.headers if r.sdk_http_response else {}
    assert (headers or {}).get("x-cli-proxy-model") == GEMINI
    status, head, raw_body = await raw_post(
        keyed, path("smart", "v1"), {"contents": [gemini_user("hi")]}, {"x-goog-api-key": ME}
    )
    assert status == 200 and head["x-cli-proxy-model"] == GEMINI
    assert strict(json.loads(raw_body)).model_version == GEMINI


async def test_usage_files_gemini_calls_under_the_key(keyed: Served) -> None:
    ci = make_client(keyed, api_key=CI)
    r = await ci.aio.models.generate_content(model=CLAUDE, contents="hi " + fake(answer="one"))
    await ci.aio.models.generate_content(model="smart", contents="hi " + fake(answer="two"))
    with pytest.raises(errors.ClientError):
        await ci.aio.models.generate_content(model=GEMINI, contents="hi")
    usage = await usage_of(keyed, CI)
    assert usage["key"] == "ci"
    day = usage["last_24h"]
    assert day["requests"] == 3 and day["errors"] == 1
    by_model = day["by_model"]
    assert "smart" not in by_model  # an alias call is filed under its target
    assert by_model[CLAUDE]["requests"] == 2 and by_model[CLAUDE]["errors"] == 0
    u = r.usage_metadata
    assert u is not None and by_model[CLAUDE]["input_tokens"] >= (u.prompt_token_count or 0) > 0
    assert by_model[CLAUDE]["output_tokens"] > 0
    # the other keys' usage is untouched
    me = await usage_of(keyed, ME)
    assert me["key"] == "me" and me["last_24h"]["requests"] == 0
