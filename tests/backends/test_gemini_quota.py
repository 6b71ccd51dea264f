"""What gemini 0.61.0 tells of its quota over ACP (tests/data/real-cli/gemini-0.61.0-quota.md):
no window, no used share; only a model's 429 and its text. The parser reads the captures into
the model's quota state (``RateLimit``, window = the model: ``rejected`` on a 429, until the
reset when the text names it, ``allowed`` once the model answered), the wait (Retry-After)
and, for the daily quota whose wait the CLI drops, the next midnight Pacific time. Through
the gateway with the fake gemini: the 429, ``/health`` and the gauges."""

from __future__ import annotations

import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import aiohttp
import pytest

from cli_proxy.backends.gemini.parser import GeminiParser
from cli_proxy.failures import FailureKind
from cli_proxy.read.events import CliEvent, Failure, RateLimit
from tests.conftest import Served, fake
from tests.server.test_metrics import scrape, value

DATA = Path(__file__).resolve().parents[1] / "data" / "real-cli"
MODEL = "gemini-2.5-flash"


def replay(case: str, model: str = MODEL) -> list[CliEvent]:
    """A captured ACP stdout through the parser (replies dropped, as the capture's run had)."""
    parser = GeminiParser([{"type": "text", "text": "say hi"}], model)
    events: list[CliEvent] = []
    for line in (DATA / f"gemini-0.61.0-quota-{case}.stdout.jsonl").read_bytes().splitlines():
        events += parser.feed(line)
        parser.replies()
    return events + parser.finish(0, "")


def next_pacific_midnight() -> float:
    now = datetime.now(ZoneInfo("America/Los_Angeles"))
    return (now.replace(hour=0, minute=0, second=0, microsecond=0) + timedelta(days=1)).timestamp()


def split(events: list[CliEvent]) -> tuple[RateLimit, Failure]:
    (window,) = [e for e in events if isinstance(e, RateLimit)]
    (failure,) = [e for e in events if isinstance(e, Failure)]
    assert failure.kind is FailureKind.RATE_LIMITED
    return window, failure


@pytest.mark.parametrize("case", ["apikey-text", "oauth-text"])
def test_an_answer_says_the_models_quota_let_it_through(case: str) -> None:
    windows = [e for e in replay(case) if isinstance(e, RateLimit)]
    assert windows == [RateLimit(MODEL, "allowed")]
    assert not [e for e in replay(case, model="") if isinstance(e, RateLimit)]  # no model named


def test_the_daily_quota_waits_for_midnight_pacific_and_says_so() -> None:
    """The CLI's own text, its RetryInfo (20000 s upstream) dropped: the Gemini API's daily
    quotas reset at midnight Pacific time."""
    window, failure = split(replay("apikey-429-per-day"))
    midnight = next_pacific_midnight()
    assert window == RateLimit(MODEL, "rejected", None, midnight, 1440)
    assert failure.retry_after_s is not None
    assert abs(failure.retry_after_s - (midnight - time.time())) < 5
    assert failure.message.startswith("You have exhausted your daily quota on this model. (")
    assert f"gemini's daily quota of {MODEL} is used up" in failure.message
    assert "midnight Pacific time" in failure.message


def test_the_per_minute_quota_waits_what_the_cli_suggests() -> None:
    window, failure = split(replay("apikey-429-per-minute"))
    assert failure.retry_after_s == pytest.approx(37.2)  # "Please retry in 37.2s."
    assert window.status == "rejected" and window.window_minutes is None
    assert window.resets_at is not None and abs(window.resets_at - (time.time() + 37)) < 5
    assert "daily" not in failure.message


def test_code_assist_quota_waits_until_its_reset() -> None:
    """Login with Google: "Your quota will reset after 2h30m0s." (its RetryInfo on stderr only)."""
    window, failure = split(replay("oauth-429-quota-exhausted"))
    assert failure.retry_after_s == 9000
    assert window.resets_at is not None and abs(window.resets_at - (time.time() + 9000)) < 5


def test_a_rate_limit_without_a_time_has_no_wait() -> None:
    window, failure = split(replay("oauth-429-rate-limit"))
    assert failure.retry_after_s is None
    assert window == RateLimit(MODEL, "rejected")


async def health(served: Served) -> dict[str, Any]:
    url = f"{served.base_url.removesuffix('/v1')}/health"
    async with aiohttp.ClientSession() as session, session.get(url) as resp:
        body: dict[str, Any] = await resp.json()
    return body


async def test_a_daily_quota_429_then_an_answer_through_the_gateway(served: Served) -> None:
    daily = fake(
        is_error=True,
        api_error_status=429,
        error_message="You have exhausted your daily quota on this model.",
    )
    async with (
        aiohttp.ClientSession() as s,
        s.post(
            f"{served.base_url}/chat/completions",
            json={"model": MODEL, "messages": [{"role": "user", "content": "hi" + daily}]},
        ) as r,
    ):
        assert r.status == 429
        wait = next_pacific_midnight() - time.time()
        assert wait - 5 <= int(r.headers["Retry-After"]) <= wait + 5
        body = await r.json()
    assert f"gemini's daily quota of {MODEL} is used up" in body["error"]["message"]
    state = (await health(served))["rate_limits"]["gemini"][MODEL]
    assert state["status"] == "rejected" and state["window_minutes"] == 1440
    assert state["resets_at"] == next_pacific_midnight()
    s = await scrape(served)
    labels = {"backend": "gemini", "window": MODEL}
    assert value(s, "cli_proxy_rate_limit_status", status="rejected", **labels) == 0
    assert value(s, "cli_proxy_rate_limit_resets_at_seconds", **labels) == state["resets_at"]
    assert value(s, "cli_proxy_rate_limit_window_minutes", **labels) == 1440

    r2 = await served.client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "again" + fake(answer="ok")}]
    )
    assert r2.choices[0].message.content == "ok"
    state = (await health(served))["rate_limits"]["gemini"][MODEL]
    assert state == {
        "status": "allowed",
        "utilization": None,
        "resets_at": None,
        "window_minutes": None,
    }


def test_a_key_the_api_does_not_know_is_an_auth_failure() -> None:
    """The Gemini API refuses an unknown key with a 400 (``API_KEY_INVALID``), which gemini
    passes on as a JSON-RPC error of code 400: the gateway's key was refused (AUTH, as on the
    other backends), not the client's request (BAD_REQUEST)."""
    events = replay("apikey-400-key-invalid")
    (failure,) = [e for e in events if isinstance(e, Failure)]
    assert failure.kind is FailureKind.AUTH
    assert failure.message == "API key not valid. Please pass a valid API key."
    assert not [e for e in events if isinstance(e, RateLimit)]
