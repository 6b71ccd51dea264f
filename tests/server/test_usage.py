"""Usage tells the truth about caching: prompt_tokens includes cached tokens and
prompt_tokens_details.cached_tokens carries the CLI's cache-read count (chat, stream and not;
Responses input_tokens_details), for every backend whose CLI reports it (gemini --acp 0.61.0
gives input and output tokens only: its cached count is 0, see docs/real-clis.md)."""

from __future__ import annotations

import pytest

from tests.conftest import Served, fake

MODELS = ["claude-sonnet-4-6"]


@pytest.mark.parametrize("model", MODELS)
async def test_chat_usage_reports_cached_tokens(served: Served, model: str) -> None:
    r = await served.client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": fake(answer="ok", cached=1234)}]
    )
    u = r.usage
    assert u is not None and u.prompt_tokens_details is not None
    assert u.prompt_tokens_details.cached_tokens == 1234
    assert u.prompt_tokens > 1234 and u.total_tokens == u.prompt_tokens + u.completion_tokens


@pytest.mark.parametrize("model", MODELS)
async def test_streamed_usage_reports_cached_tokens(served: Served, model: str) -> None:
    stream = await served.client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": fake(answer="ok", cached=77)}],
        stream=True,
        stream_options={"include_usage": True},
    )
    usage = [c.usage async for c in stream if c.usage is not None]
    assert len(usage) == 1 and usage[0].prompt_tokens_details is not None
    assert usage[0].prompt_tokens_details.cached_tokens == 77


@pytest.mark.parametrize("model", MODELS)
async def test_responses_usage_reports_cached_tokens(served: Served, model: str) -> None:
    r = await served.client.responses.create(model=model, input=fake(answer="ok", cached=55))
    assert r.usage is not None
    assert r.usage.input_tokens_details.cached_tokens == 55
    assert r.usage.input_tokens > 55


async def test_no_cache_reads_zero(served: Served) -> None:
    r = await served.client.chat.completions.create(
        model=MODELS[0], messages=[{"role": "user", "content": fake(answer="ok")}]
    )
    assert r.usage is not None and r.usage.prompt_tokens_details is not None
    assert r.usage.prompt_tokens_details.cached_tokens == 0


async def test_gemini_reports_tokens_without_a_cache_count(served: Served) -> None:
    r = await served.client.chat.completions.create(
        model="gemini-2.5-flash", messages=[{"role": "user", "content": fake(answer="ok")}]
    )
    u = r.usage
    assert u is not None and u.prompt_tokens > 0 and u.completion_tokens > 0
    assert u.prompt_tokens_details is not None and u.prompt_tokens_details.cached_tokens == 0
