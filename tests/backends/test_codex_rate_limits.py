"""codex's subscription windows, read like claude's: ``account/rateLimits/updated`` (no longer
opted out of) -> one ``RateLimit`` per window, in ``/health`` and the ``cli_proxy_rate_limit_*``
gauges with ``backend="codex"``; a sparse update keeps what is known; a usage-limit 429 names
the used-up window and waits for its reset. The parser is fed the real codex 0.169.0 captures
(tests/data/real-cli/codex-0.169.0-rate-limits.md); the gateway runs the codex stand-in."""

from __future__ import annotations

import json
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from cli_proxy.backends.codex.parser import (
    WARN_AT,
    CodexParser,
    _text_reset,
    exhausted,
    rate_limit_windows,
)
from cli_proxy.backends.codex.rpc import QUIET, WARM_PREFIX
from cli_proxy.failures import FailureKind
from cli_proxy.read.events import CliEvent, Failure, RateLimit
from tests.backends.test_codex_backend import served_codex, user
from tests.conftest import ServeFactory, fake
from tests.server.test_metrics import scrape, value

DATA = Path(__file__).resolve().parents[1] / "data" / "real-cli"
NOW = 1795800000  # "now" in the captures' values


def notifications(case: str) -> list[dict[str, Any]]:
    """The notifications of a capture (its own extra requests left out)."""
    lines = (DATA / f"codex-0.169.0-rate-limits-{case}.stdout.jsonl").read_text().splitlines()
    objs = [json.loads(line) for line in lines if line.startswith("{")]
    return [o for o in objs if "method" in o and "id" not in o]


def feed(parser: CodexParser, objs: list[dict[str, Any]]) -> list[CliEvent]:
    events: list[CliEvent] = []
    for obj in objs:
        events += parser.feed(json.dumps(obj).encode())
    return events


def windows(events: list[CliEvent]) -> list[RateLimit]:
    return [e for e in events if isinstance(e, RateLimit)]


def test_the_gateway_no_longer_opts_out_of_rate_limit_updates() -> None:
    init = json.loads(WARM_PREFIX.splitlines()[0])
    quiet = init["params"]["capabilities"]["optOutNotificationMethods"]
    assert "account/rateLimits/updated" not in quiet
    assert quiet == list(QUIET) and "remoteControl/status/changed" in quiet  # the others stay
    assert {"thread/status/changed", "thread/started", "mcpServer/startupStatus/updated"} <= set(
        quiet
    )


def test_a_captured_update_gives_both_windows() -> None:
    events = feed(CodexParser(), notifications("headers"))
    assert windows(events) == [
        RateLimit("five_hour", "allowed", 0.43, 1795803600.0, 300),
        RateLimit("seven_day", "allowed", 0.17, None, 10080),
    ]


def test_a_sparse_update_says_nothing_of_any_window() -> None:
    objs = notifications("no-headers")
    assert any(o["method"] == "account/rateLimits/updated" for o in objs)  # it did come
    assert windows(feed(CodexParser(), objs)) == []


def test_a_window_of_another_limit_is_named_by_its_id() -> None:
    assert windows(feed(CodexParser(), notifications("two-limits"))) == [
        RateLimit("codex_other.60_min", "allowed", 0.7, 1795801800.0, 60)
    ]


@pytest.mark.parametrize(
    ("used", "reached", "status"),
    [
        (74, None, "allowed"),
        (WARN_AT * 100, None, "allowed_warning"),
        (99, None, "allowed_warning"),
        (100, None, "rejected"),
        (99, "rate_limit_reached", "rejected"),  # the fullest window is the one reached
    ],
)
def test_status_by_used_share(used: float, reached: str | None, status: str) -> None:
    limits = {
        "limitId": "codex",
        "primary": {"usedPercent": used, "windowDurationMins": 300, "resetsAt": NOW},
        "secondary": {"usedPercent": 10, "windowDurationMins": 10080, "resetsAt": None},
        "rateLimitReachedType": reached,
    }
    five, seven = rate_limit_windows(limits)
    assert (five.window, five.status, five.utilization) == ("five_hour", status, used / 100)
    assert (seven.window, seven.status) == ("seven_day", "allowed")


def test_a_length_without_a_name_and_a_window_without_a_length() -> None:
    limits = {
        "primary": {"usedPercent": 5, "windowDurationMins": 1440, "resetsAt": None},
        "secondary": {"usedPercent": 6, "windowDurationMins": None, "resetsAt": None},
    }
    assert [(w.window, w.window_minutes) for w in rate_limit_windows(limits)] == [
        ("1440_min", 1440),
        ("secondary", None),
    ]


def test_the_captured_usage_limit_names_the_window_and_waits_for_its_reset() -> None:
    """The captured 429 (primary at 100 %, then the failed turn), its reset moved an hour
    ahead of now: Retry-After from the update, not from the error's text."""
    reset = int(time.time()) + 3600
    objs = notifications("usage-limit")
    for obj in objs:
        if obj["method"] == "account/rateLimits/updated":
            obj["params"]["rateLimits"]["primary"]["resetsAt"] = reset
    events = feed(CodexParser(), objs)
    assert windows(events)[0] == RateLimit("five_hour", "rejected", 1.0, float(reset), 300)
    (failure,) = [e for e in events if isinstance(e, Failure)]
    assert failure.kind is FailureKind.RATE_LIMITED
    assert "five_hour (300 min) window is used up" in failure.message
    assert failure.retry_after_s is not None and 3590 <= failure.retry_after_s <= 3600


def test_without_an_update_the_wait_is_the_reset_the_text_names() -> None:
    """No update before the 429 (no headers on it): the text's local-time reset."""
    at = datetime.fromtimestamp(time.time() + 2 * 3600).replace(second=0, microsecond=0)
    text = at.strftime("try again at %b %-d") + at.strftime("th, %Y %-I:%M %p.")
    failure = exhausted(Failure(FailureKind.RATE_LIMITED, f"You've hit your limit. {text}"), [])
    assert failure.retry_after_s is not None
    assert abs(failure.retry_after_s - (at.timestamp() - time.time())) < 5
    assert failure.message == f"You've hit your limit. {text}"  # no window to name
    same_day = datetime.now().replace(second=0, microsecond=0)
    assert _text_reset(same_day.strftime("or try again at %-I:%M %p.")) == same_day.timestamp()
    assert _text_reset("or try again later.") is None


async def get_health(served: Any) -> dict[str, Any]:
    url = f"{served.base_url.removesuffix('/v1')}/health"
    async with aiohttp.ClientSession() as session, session.get(url) as resp:
        health: dict[str, Any] = await resp.json()
    return health


async def test_windows_reach_health_and_gauges_and_a_sparse_update_keeps_them(
    serve: ServeFactory,
) -> None:
    served = await served_codex(serve)
    reset = int(time.time()) + 3600
    update = {
        "limitId": "codex",
        "primary": {"usedPercent": 42, "windowDurationMins": 300, "resetsAt": reset},
        "secondary": {"usedPercent": 80, "windowDurationMins": 10080, "resetsAt": reset + 86400},
        "rateLimitReachedType": None,
    }
    sparse = {"limitId": "codex", "primary": None, "secondary": None}
    for limits in (update, sparse):
        r = await served.client.chat.completions.create(
            model="gpt-5.5",
            messages=user("hi" + fake(answer="ok", rate_limits=limits)),
        )
        assert r.choices[0].message.content == "ok"
        health = (await get_health(served))["rate_limits"]["codex"]
        assert health == {
            "five_hour": {
                "status": "allowed",
                "utilization": 0.42,
                "resets_at": reset,
                "window_minutes": 300,
            },
            "seven_day": {
                "status": "allowed_warning",
                "utilization": 0.8,
                "resets_at": reset + 86400,
                "window_minutes": 10080,
            },
        }
        s = await scrape(served)
        five = {"backend": "codex", "window": "five_hour"}
        seven = {"backend": "codex", "window": "seven_day"}
        assert value(s, "cli_proxy_rate_limit_utilization", **five) == pytest.approx(0.42)
        assert value(s, "cli_proxy_rate_limit_utilization", **seven) == pytest.approx(0.8)
        assert value(s, "cli_proxy_rate_limit_resets_at_seconds", **five) == reset
        assert value(s, "cli_proxy_rate_limit_window_minutes", **seven) == 10080
        assert value(s, "cli_proxy_rate_limit_status", status="allowed", **five) == 1
        assert value(s, "cli_proxy_rate_limit_status", status="allowed_warning", **seven) == 0.5


async def test_a_usage_limit_is_a_429_with_retry_after_from_the_window(
    serve: ServeFactory,
) -> None:
    served = await served_codex(serve)
    reset = int(time.time()) + 1800
    limits = {
        "limitId": "codex",
        "primary": {"usedPercent": 100, "windowDurationMins": 300, "resetsAt": reset},
        "secondary": {"usedPercent": 17, "windowDurationMins": 10080, "resetsAt": None},
        "rateLimitReachedType": "rate_limit_reached",
    }
    message = "You\u2019ve hit your usage limit. Upgrade to Pro or try again later."
    directive = fake(error_message=message, error_info="usageLimitExceeded", rate_limits=limits)
    async with (
        aiohttp.ClientSession() as s,
        s.post(
            f"{served.base_url}/chat/completions",
            json={"model": "gpt-5.5", "messages": user("hi" + directive)},
        ) as r,
    ):
        assert r.status == 429
        assert 1790 <= int(r.headers["Retry-After"]) <= 1800
        body = await r.json()
    assert "five_hour (300 min) window is used up" in body["error"]["message"]
    health = (await get_health(served))["rate_limits"]["codex"]
    assert health["five_hour"]["status"] == "rejected"
    assert health["seven_day"]["status"] == "allowed"
