"""Operate it: ``GET /metrics`` after a known mix of calls, read back with prometheus-client's
own parser; a subscription's ``rate_limit_event`` in the gauges and ``/health``; a captured
billing refusal mapped to its own error, counted, and not retried."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import aiohttp
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from cli_proxy.backends.claude.parser import ClaudeParser
from cli_proxy.failures import CliFailed, FailureKind
from cli_proxy.read.events import Failure, RateLimit
from cli_proxy.server.errors import api_error
from tests.conftest import Served, ServeFactory, fake

DATA = Path(__file__).resolve().parents[1] / "data" / "real-cli"
BILLING = (
    "API Error: 400 Third-party apps now draw from your extra usage, not your plan limits. "
    "Add funds or enable extra usage at claude.ai/settings/usage to keep going."
)


async def scrape(
    served: Served, **headers: str
) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    url = f"{served.base_url.removesuffix('/v1')}/metrics"
    async with aiohttp.ClientSession() as s, s.get(url, headers=headers) as r:
        assert r.status == 200, await r.text()
        assert r.content_type == "text/plain"
        text = await r.text()
    samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def value(samples: dict[Any, float], name: str, **labels: str) -> float:
    """The sum over samples of ``name`` whose labels include ``labels``."""
    return sum(v for (n, ls), v in samples.items() if n == name and set(labels.items()) <= set(ls))


def user(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


async def test_a_known_mix_of_calls(serve: ServeFactory) -> None:
    served = await serve(warm_pool=True)
    client = served.client
    model = "claude-sonnet-4-6"
    await client.chat.completions.create(model=model, messages=user("a" + fake(answer="one two")))  # type: ignore[arg-type]
    # the spare for the next call like it: wait until it is ready and its start is over (no
    # start slot held), so the next call is warm
    for _ in range(200):
        pool = served.gateway.pool
        if (
            pool is not None
            and pool.ready().get("claude")
            and not served.gateway.supervisor.starting
        ):
            break
        await asyncio.sleep(0.05)
    stream = await client.chat.completions.create(
        model=model,
        messages=user("b" + fake(answer="streamed", cached=4)),
        stream=True,  # type: ignore[arg-type]
    )
    async for _ in stream:
        pass
    with pytest.raises(openai.RateLimitError):
        await client.chat.completions.create(
            model=model,
            messages=user(
                "c"
                + fake(
                    is_error=True,
                    api_error_status=429,
                    error_message="API Error: 429 rate limited",
                    exit=1,
                    print_before_exit=True,
                )
            ),  # type: ignore[arg-type]
        )
    with pytest.raises(openai.BadRequestError):
        await client.chat.completions.create(model=model, messages=[], n=1)  # type: ignore[arg-type]
    with pytest.raises(openai.NotFoundError):
        await client.chat.completions.create(model="nope-1", messages=user("d"))  # type: ignore[arg-type]

    s = await scrape(served)
    req = "cli_proxy_requests_total"
    assert value(s, req, endpoint="chat", backend="claude", model=model, status="200") == 2
    assert (
        value(s, req, endpoint="chat", backend="claude", status="429", code="rate_limit_exceeded")
        == 1
    )
    assert value(s, req, endpoint="chat", backend="", status="400") == 1
    assert value(s, req, endpoint="chat", backend="", status="404", code="model_not_found") == 1
    assert value(s, req) == 5
    cold = value(s, "cli_proxy_calls_served_total", backend="claude", start="cold")
    warm = value(s, "cli_proxy_calls_served_total", backend="claude", start="warm")
    warming = value(s, "cli_proxy_calls_served_total", backend="claude", start="warming")
    pool = served.gateway.pool
    assert pool is not None
    # the pool's own count; the third call's spare may still be starting (a busy machine)
    assert (cold, warm, warming) == (pool.served_cold, pool.served_warm, pool.served_warming)
    assert cold >= 1 and warm >= 1 and cold + warm + warming == 3
    assert (
        value(s, "cli_proxy_request_duration_seconds_count", endpoint="chat", backend="claude") == 3
    )
    assert value(s, "cli_proxy_time_to_first_content_seconds_count", backend="claude") == 2
    assert value(s, "cli_proxy_queue_wait_seconds_count", backend="claude") == 3
    assert value(s, "cli_proxy_cli_start_seconds_count", backend="claude", start="warm") == warm
    assert value(s, "cli_proxy_cli_exits_total", backend="claude", kind="ok") == 2
    assert value(s, "cli_proxy_cli_exits_total", backend="claude", kind="error") == 1
    assert value(s, "cli_proxy_tokens_total", backend="claude", kind="cached") == 4
    assert value(s, "cli_proxy_tokens_total", backend="claude", kind="output") > 0
    assert value(s, "cli_proxy_tokens_total", backend="claude", kind="input") > 4
    assert value(s, "cli_proxy_calls_running") == 0
    assert value(s, "cli_proxy_calls_waiting") == 0
    assert value(s, "cli_proxy_max_concurrency") == served.gateway.supervisor.max_concurrency
    assert value(s, "cli_proxy_max_queue") == served.gateway.settings.max_queue
    assert value(s, "cli_proxy_max_starting") == served.gateway.supervisor.bounds.max_starting
    # spares may be starting or stopping meanwhile: the bounds hold whatever the moment
    bounds = served.gateway.supervisor.bounds
    assert 0 <= value(s, "cli_proxy_cli_processes") <= bounds.max_processes
    assert 0 <= value(s, "cli_proxy_clis_starting") <= bounds.max_starting
    assert ("cli_proxy_spares_ready", (("backend", "claude"),)) in s
    # a scrape is not a request
    again = await scrape(served)
    assert value(again, req) == 5


async def test_metrics_needs_the_api_key_when_one_is_set(serve: ServeFactory) -> None:
    served = await serve(api_keys=["sekret"])
    url = f"{served.base_url.removesuffix('/v1')}/metrics"
    async with aiohttp.ClientSession() as s, s.get(url) as r:
        assert r.status == 401
        body = await r.json()
        assert body["error"]["code"] == "invalid_api_key"
    samples = await scrape(served, Authorization="Bearer sekret")
    assert value(samples, "cli_proxy_calls_running") == 0


async def test_rate_limit_event_reaches_gauges_and_health(served: Served) -> None:
    resets = int(time.time()) + 3600
    info = {
        "status": "allowed_warning",
        "rateLimitType": "five_hour",
        "utilization": 0.91,
        "resetsAt": resets,
    }
    r = await served.client.chat.completions.create(
        model="claude-sonnet-4-6",
        messages=user("x" + fake(answer="ok", rate_limit=info)),  # type: ignore[arg-type]
    )
    assert r.choices[0].message.content == "ok"
    s = await scrape(served)
    labels = {"backend": "claude", "window": "five_hour"}
    assert value(s, "cli_proxy_rate_limit_utilization", **labels) == pytest.approx(0.91)
    assert value(s, "cli_proxy_rate_limit_resets_at_seconds", **labels) == resets
    assert value(s, "cli_proxy_rate_limit_status", status="allowed_warning", **labels) == 0.5
    url = f"{served.base_url.removesuffix('/v1')}/health"
    async with aiohttp.ClientSession() as session, session.get(url) as resp:
        health = await resp.json()
    assert value(s, "cli_proxy_rate_limit_window_minutes", **labels) == 300  # by its name
    window = health["rate_limits"]["claude"]["five_hour"]
    assert window == {
        "status": "allowed_warning",
        "utilization": 0.91,
        "resets_at": resets,
        "window_minutes": 300,
    }


async def test_a_rejected_window_sets_retry_after_from_its_reset(served: Served) -> None:
    info = {"status": "rejected", "rateLimitType": "seven_day", "resetsAt": int(time.time()) + 120}
    directive = fake(
        rate_limit=info, is_error=True, api_error_status=429, error_message="API Error: 429 limit"
    )
    async with (
        aiohttp.ClientSession() as s,
        s.post(
            f"{served.base_url}/chat/completions",
            json={"model": "claude-sonnet-4-6", "messages": user("y" + directive)},
        ) as r,
    ):
        assert r.status == 429
        assert 100 <= int(r.headers["Retry-After"]) <= 120


def test_rate_limit_event_inside_another_line_is_read() -> None:
    """Seen once in the wild: the event written into the middle of another output line."""
    event = json.dumps(
        {"type": "rate_limit_event", "rate_limit_info": {"status": "allowed"}},
        separators=(",", ":"),
    )
    result = json.dumps({"type": "result", "subtype": "success", "result": "hi", "usage": {}})
    line = (result[:20] + event + result[20:]).encode()
    events = ClaudeParser().feed(line)
    assert RateLimit("unknown", "allowed") in events
    assert any(getattr(e, "text", None) == "hi" for e in events)


@pytest.mark.parametrize(
    "stem", ["claude-400-extra-usage", "claude-400-oauth-cli-only", "claude-400-out-of-extra-usage"]
)
def test_captured_billing_refusals_map_to_their_own_error(stem: str) -> None:
    parser = ClaudeParser()
    events = []
    for line in (DATA / f"{stem}.stdout.jsonl").read_bytes().splitlines():
        events += parser.feed(line)
    code = int((DATA / f"{stem}.rc").read_text())
    events += parser.finish(code, (DATA / f"{stem}.stderr.txt").read_text())
    failures = [e for e in events if isinstance(e, Failure)]
    assert [f.kind for f in failures] == [FailureKind.BILLING]
    err = api_error(CliFailed(failures[0].kind, failures[0].message))
    assert (err.status, err.type, err.code) == (
        402,
        "billing_error",
        "subscription_billing_refused",
    )
    assert "extra usage" in err.message and "API key" in err.message


async def test_billing_refusal_is_not_retried_and_is_counted(served: Served) -> None:
    client = openai.AsyncOpenAI(base_url=served.base_url, api_key="x", max_retries=2)
    try:
        with pytest.raises(openai.APIStatusError) as caught:
            await client.chat.completions.create(
                model="claude-sonnet-4-6",
                messages=user(
                    "z" + fake(is_error=True, api_error_status=400, error_message=BILLING)
                ),  # type: ignore[arg-type]
            )
    finally:
        await client.close()
    assert caught.value.status_code == 402
    assert caught.value.code == "subscription_billing_refused"
    s = await scrape(served)
    assert value(s, "cli_proxy_requests_total", status="402") == 1  # one request: no retry
    assert value(s, "cli_proxy_billing_refusals_total", backend="claude") == 1
    assert value(s, "cli_proxy_calls_served_total", backend="claude") == 1
