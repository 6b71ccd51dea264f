"""Reasoning out, on the real CLIs: a fake model API thinks before it answers (Anthropic: a
``thinking`` block with a signature, streamed as thinking deltas; Gemini: parts marked
``thought``, which gemini --acp sends as ``agent_thought_chunk``; Responses: a reasoning
summary, which codex app-server sends as reasoning deltas); the thought reaches the client
as ``reasoning_content`` (chat, with ``reasoning_output``) and as a Responses reasoning item
(on request), never in the content.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from openai import AsyncOpenAI

from cli_proxy.config import Settings
from cli_proxy.gateway import Gateway, LiveBackends
from tests.conftest import ServeFactory, fake
from tests.fakes.fake_model_api import start_fake_model_api
from tests.realcli.test_real_cli import CLI_DIR, point_clis_at

pytestmark = [
    pytest.mark.realcli,
    pytest.mark.skipif(CLI_DIR is None, reason="real CLI binaries not found (make real-clis)"),
]

THOUGHT = "The user greets me; a short greeting back is right."
ANSWER = "Hello, thinker!"


@pytest.fixture
async def thinker(serve: ServeFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    assert CLI_DIR is not None
    api = await start_fake_model_api()
    point_clis_at(api, tmp_path / "home", monkeypatch)
    settings = Settings(
        claude_bin=str(CLI_DIR / "claude"),
        timeout_s=60,
        idle_timeout_s=45,
        kill_grace_s=1,
        reasoning_output=True,
        warm_pool=False,  # a spare after the last call is a CLI start nobody takes
    )  # type: ignore[call-arg]
    served = await serve(Gateway(settings, LiveBackends.from_settings(settings, ["claude"])))
    strict = AsyncOpenAI(
        base_url=served.base_url, api_key="x", max_retries=0, _strict_response_validation=True
    )
    try:
        yield served, strict
    finally:
        await strict.close()
        await api.close()


def question() -> str:
    return "say hi" + fake(answer=ANSWER, thinking=THOUGHT)


async def test_chat_reasoning_content_whole(thinker: Any) -> None:
    served, _ = thinker
    r = await served.client.chat.completions.create(
        model="claude-sonnet-4-6", messages=[{"role": "user", "content": question()}]
    )
    message = r.choices[0].message
    assert message.content == ANSWER
    assert (message.model_extra or {}).get("reasoning_content") == THOUGHT


async def test_chat_reasoning_content_streamed(thinker: Any) -> None:
    served, _ = thinker
    stream = await served.client.chat.completions.create(
        model="claude-sonnet-4-6",
        messages=[{"role": "user", "content": question()}],
        stream=True,
    )
    thought, content = "", ""
    async for chunk in stream:
        if chunk.choices:
            delta = chunk.choices[0].delta
            thought += (delta.model_extra or {}).get("reasoning_content") or ""
            content += delta.content or ""
    assert thought == THOUGHT and content == ANSWER


async def test_responses_reasoning_item_streamed_and_whole(thinker: Any) -> None:
    _, strict = thinker
    whole = await strict.responses.create(
        model="claude-sonnet-4-6", input=question(), reasoning={"summary": "auto"}
    )
    assert [i.type for i in whole.output] == ["reasoning", "message"]
    assert whole.output[0].summary[0].text == THOUGHT  # type: ignore[union-attr]
    assert whole.output_text == ANSWER
    async with strict.responses.stream(
        model="claude-sonnet-4-6", input=question(), reasoning={"summary": "auto"}
    ) as stream:
        async for _ in stream:
            pass
        final = await stream.get_final_response()
    assert [i.type for i in final.output] == ["reasoning", "message"]
    assert final.output_text == ANSWER


async def test_without_the_setting_the_thought_stays_out(
    serve: ServeFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert CLI_DIR is not None
    api = await start_fake_model_api()
    point_clis_at(api, tmp_path / "home", monkeypatch)
    settings = Settings(
        claude_bin=str(CLI_DIR / "claude"), timeout_s=60, kill_grace_s=1, warm_pool=False
    )  # type: ignore[call-arg]
    served = await serve(Gateway(settings, LiveBackends.from_settings(settings, ["claude"])))
    try:
        r = await served.client.chat.completions.create(
            model="claude-sonnet-4-6", messages=[{"role": "user", "content": question()}]
        )
    finally:
        await api.close()
    assert r.choices[0].message.content == ANSWER
    assert "reasoning_content" not in (r.choices[0].message.model_extra or {})
    assert THOUGHT not in r.model_dump_json()


async def real_gateway(
    serve: ServeFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, backend: str
) -> tuple[Any, Any]:
    assert CLI_DIR is not None
    api = await start_fake_model_api(openai_key="test")
    point_clis_at(api, tmp_path / "home", monkeypatch)
    monkeypatch.setenv("CODEX_API_KEY", "test")
    options: dict[str, Any] = {"bin": str(CLI_DIR / backend)}
    if backend == "codex":
        options["base_url"] = api.url + "/v1"
    settings = Settings(
        backends=[backend],
        timeout_s=90,
        idle_timeout_s=60,
        kill_grace_s=1,
        reasoning_output=True,
        warm_pool=False,  # a spare after the last call is a CLI start nobody takes
        launcher="pdeathsig",
        **{backend: options},
    )  # type: ignore[arg-type]
    served = await serve(Gateway(settings, LiveBackends.from_settings(settings, [backend])))
    return served, api


DIRECTIVE = {"gemini": "thought", "codex": "reasoning"}
MODEL = {"gemini": "gemini-2.5-flash", "codex": "gpt-5.5"}


@pytest.mark.parametrize("backend", ["gemini", "codex"])
async def test_thoughts_of_gemini_and_codex_reach_the_client(
    serve: ServeFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, backend: str
) -> None:
    if not (CLI_DIR is not None and (CLI_DIR / backend).exists()):
        pytest.skip(f"no real {backend} binary")
    served, api = await real_gateway(serve, tmp_path, monkeypatch, backend)
    question = "say hi" + fake(answer=ANSWER, **{DIRECTIVE[backend]: THOUGHT})
    messages: list[Any] = [{"role": "user", "content": question}]
    try:
        whole = await served.client.chat.completions.create(model=MODEL[backend], messages=messages)
        stream = await served.client.chat.completions.create(
            model=MODEL[backend], messages=messages, stream=True
        )
        thought, content = "", ""
        async for chunk in stream:
            if chunk.choices:
                delta = chunk.choices[0].delta
                thought += (delta.model_extra or {}).get("reasoning_content") or ""
                content += delta.content or ""
        responses = await served.client.responses.create(
            model=MODEL[backend], input=question, reasoning={"summary": "auto"}
        )
    finally:
        await api.close()
    message = whole.choices[0].message
    assert message.content == ANSWER and THOUGHT not in (message.content or "")
    assert (message.model_extra or {}).get("reasoning_content") == THOUGHT
    assert thought == THOUGHT and content == ANSWER
    assert [i.type for i in responses.output] == ["reasoning", "message"]
    assert responses.output[0].summary[0].text == THOUGHT  # type: ignore[union-attr]
    assert responses.output_text == ANSWER
