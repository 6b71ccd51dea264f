"""The limits of a client key at admission (cli_proxy/run/governor.py)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from cli_proxy.failures import NotAllowed, OverLimit
from cli_proxy.read.events import RateLimit
from cli_proxy.run.governor import Governor, LoginFact, estimate_tokens
from cli_proxy.run.keys import parse_keys
from cli_proxy.run.usage import UsageStore

KEYS = """\
[keys.ci]
secret = "sk-ci"
max_concurrent = 1
max_window_percent = 80
tokens_per_day = 1000
models = ["claude-*", "smart", "gemini-2.5-flash"]
[keys.me]
secret = "sk-me"
[models.smart]
try = ["claude-sonnet-4-6", "gpt-5", "gemini-2.5-flash"]
"""
BACKENDS = {"claude-sonnet-4-6": "claude", "gemini-2.5-flash": "gemini", "gpt-5": "codex"}


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def gov(tmp_path: Path) -> Governor:
    clock = Clock()
    return Governor(parse_keys(KEYS), UsageStore(tmp_path, clock), clock)


def keys(gov: Governor) -> tuple:  # type: ignore[type-arg]
    return gov.ring.keys


def test_models_list_is_checked_against_the_name_and_each_target(gov: Governor) -> None:
    ci, me = keys(gov)
    assert gov.targets(ci, "smart") == ("claude-sonnet-4-6", "gemini-2.5-flash")  # not gpt-5
    assert gov.targets(me, "smart") == ("claude-sonnet-4-6", "gpt-5", "gemini-2.5-flash")
    assert gov.targets(ci, "claude-opus-4-1") == ("claude-opus-4-1",)
    with pytest.raises(NotAllowed, match="'ci' may not use the model 'gpt-5'"):
        gov.targets(ci, "gpt-5")


def test_alias_goes_to_the_first_target_that_can_take_it(gov: Governor) -> None:
    ci, me = keys(gov)
    now = gov._clock()
    targets = gov.targets(ci, "smart")
    assert gov.choose(ci, targets, BACKENDS.get) == ("claude-sonnet-4-6", "claude")
    gov.report("claude", [RateLimit("five_hour", "allowed_warning", 0.85, now + 600)])
    assert gov.choose(ci, targets, BACKENDS.get) == ("gemini-2.5-flash", "gemini")
    # no limit of its own: a window counts only once rejected (100 %)
    assert gov.choose(me, gov.targets(me, "smart"), BACKENDS.get)[0] == "claude-sonnet-4-6"
    gov.cool("gemini", 120)
    with pytest.raises(OverLimit) as err:
        gov.choose(ci, targets, BACKENDS.get)
    assert err.value.code == "no_model_available"
    assert err.value.retry_after_s == pytest.approx(120)  # gemini cools first
    # a backend not present is skipped
    assert gov.choose(me, ("nope", "gpt-5"), {"gpt-5": "codex"}.get) == ("gpt-5", "codex")
    # a target that already fell through is skipped
    assert gov.choose(
        me, ("claude-sonnet-4-6", "gpt-5"), BACKENDS.get, skip=("claude-sonnet-4-6",)
    ) == ("gpt-5", "codex")


def test_a_direct_call_is_refused_at_its_window_with_its_reset(gov: Governor) -> None:
    ci, me = keys(gov)
    now = gov._clock()
    gov.report("claude", [RateLimit("five_hour", "allowed", 0.79, now + 900)])
    gov.check_window(ci, "claude-sonnet-4-6", "claude")
    gov.report("claude", [RateLimit("seven_day", "allowed", 0.80, now + 5000)])
    with pytest.raises(OverLimit) as err:
        gov.check_window(ci, "claude-sonnet-4-6", "claude")
    assert err.value.code == "window_limit" and err.value.retry_after_s == pytest.approx(5000)
    gov.check_window(me, "claude-sonnet-4-6", "claude")  # no limit
    gov.report("codex", [RateLimit("primary", "rejected", None, now + 300)])
    with pytest.raises(OverLimit):
        gov.check_window(ci, "gpt-5", "codex")  # rejected = 100 %
    assert gov.cooling("codex") == pytest.approx(300)  # and it cools down until its reset


def test_a_window_that_has_reset_no_longer_counts(gov: Governor) -> None:
    ci, _ = keys(gov)
    clock = gov._clock
    assert isinstance(clock, Clock)
    gov.report("claude", [RateLimit("five_hour", "rejected", 1.0, clock() + 10)])
    with pytest.raises(OverLimit):
        gov.check_window(ci, "claude-sonnet-4-6", "claude")
    clock.now += 11
    gov.check_window(ci, "claude-sonnet-4-6", "claude")
    assert gov.cooling("claude") is None


async def test_concurrency_waits_then_refuses(gov: Governor) -> None:
    ci, me = keys(gov)
    first = await gov.admit(ci, 10, 1.0)
    assert first is not None and gov.running("ci") == 1
    waiter = asyncio.create_task(gov.admit(ci, 10, 5.0))
    await asyncio.sleep(0.05)
    assert not waiter.done()
    first.finish("claude-sonnet-4-6", input_tokens=3, output_tokens=4)
    second = await asyncio.wait_for(waiter, 1)
    assert second is not None
    with pytest.raises(OverLimit) as err:
        await gov.admit(ci, 10, 0.05)
    assert err.value.code == "key_concurrency_limit" and err.value.retry_after_s >= 1
    second.drop()
    assert gov.running("ci") == 0
    assert await gov.admit(me, 10, 0) is not None  # no limits: never waits
    assert await gov.admit(None, 10, 0) is None


async def test_token_budget_counts_estimates_and_files_usage(gov: Governor) -> None:
    ci, _ = keys(gov)
    store = gov.store
    assert store is not None
    a = await gov.admit(ci, 600, 0)
    assert a is not None
    a.finish("claude-sonnet-4-6", input_tokens=500, cached_input_tokens=100, output_tokens=300)
    b = await gov.admit(ci, 250, 0)  # 800 used < 1000: it may start (and overshoot)
    assert b is not None
    b.finish("claude-sonnet-4-6")  # ended before usage: its estimate, never zero
    with pytest.raises(OverLimit) as err:
        await gov.admit(ci, 10, 0)
    assert err.value.code == "token_budget_exhausted" and 1 <= err.value.retry_after_s <= 86400
    usage = store.usage("ci")["last_24h"]
    assert (usage["requests"], usage["input_tokens"], usage["cached_input_tokens"]) == (2, 750, 100)
    assert usage["output_tokens"] == 300
    assert gov.status()[0]["tokens_24h"] == 1050


async def test_calls_fired_at_once_overshoot_by_at_most_one(gov: Governor) -> None:
    ci, _ = keys(gov)
    gov.reload(parse_keys(KEYS.replace("max_concurrent = 1\n", "")))
    ci = gov.ring.keys[0]
    results = await asyncio.gather(
        *(gov.admit(ci, 300, 0) for _ in range(10)), return_exceptions=True
    )
    admitted = [r for r in results if not isinstance(r, BaseException)]
    assert len(admitted) == 4  # 0, 300, 600, 900 < 1000: the fourth overshoots by < one call
    for slot in admitted:
        assert slot is not None
        slot.finish("m", input_tokens=300)


def test_estimate() -> None:
    assert estimate_tokens(100) == 1124
    assert estimate_tokens(100, 50) == 150
    assert estimate_tokens(0, 0) == 1


def test_alias_choice_skips_a_backend_not_logged_in(tmp_path: Path) -> None:
    """Fallback picks a target only if its backend is logged in: no credential at all (and
    no call of it answered yet), or a login its last call found refused (until a call of it
    answers or its login files change)."""
    facts = {"claude": LoginFact(False, "none: run `claude`", 1), "gemini": LoginFact(True)}
    gov = Governor(parse_keys(KEYS), UsageStore(tmp_path), login_check=lambda b: facts[b])
    _, me = keys(gov)
    targets = ("claude-sonnet-4-6", "gemini-2.5-flash")
    assert gov.login_block("claude") == "no login (none: run `claude`)"
    assert gov.choose(me, targets, BACKENDS.get) == ("gemini-2.5-flash", "gemini")
    gov.login_worked("claude")  # a direct call answered: its login serves after all
    assert gov.choose(me, targets, BACKENDS.get) == ("claude-sonnet-4-6", "claude")
    gov.login_refused("claude", "cli_auth_failed")
    assert gov.login_block("claude") == "its login was refused (cli_auth_failed)"
    assert gov.choose(me, targets, BACKENDS.get)[1] == "gemini"
    gov.login_refused("gemini", "login_expired")
    with pytest.raises(OverLimit) as err:
        gov.choose(me, targets, BACKENDS.get)
    assert err.value.code == "no_model_available" and "not logged in" in err.value.message
    # a re-login changes the login's files (its version): the refusal is forgotten
    facts["claude"] = LoginFact(True, "~/.claude/.credentials.json", 2)
    gov._logins.clear()  # the files are looked at every LOGIN_CHECK_S; not wait for it here
    assert gov.choose(me, targets, BACKENDS.get)[1] == "claude"
    # a direct call is never refused for its login: check_window does not look at it
    gov.check_window(me, "gemini-2.5-flash", "gemini")


async def test_max_concurrent_holds_across_workers_sharing_a_state_dir(tmp_path: Path) -> None:
    """Two governors (two workers) on one state dir: one key's max_concurrent is the host's.
    A caller waiting on one worker is let in when the other worker's call ends (it looks
    again every LEASE_POLL_S), and still gets 429 after its wait."""
    a = Governor(parse_keys(KEYS), UsageStore(tmp_path))
    b = Governor(parse_keys(KEYS), UsageStore(tmp_path))
    ci_a, ci_b = a.ring.keys[0], b.ring.keys[0]
    first = await a.admit(ci_a, 10, 0)
    assert first is not None and a.running("ci") == b.running("ci") == 1
    with pytest.raises(OverLimit) as err:
        await b.admit(ci_b, 10, 0.1)
    assert err.value.code == "key_concurrency_limit"
    waiter = asyncio.create_task(b.admit(ci_b, 10, 5.0))
    await asyncio.sleep(0.15)
    assert not waiter.done()
    first.finish("claude-sonnet-4-6", input_tokens=3, output_tokens=4)
    second = await asyncio.wait_for(waiter, 2)
    assert second is not None and a.running("ci") == 1
    assert a.status()[0]["running"] == 1  # /status: the host's count
    second.drop()
    assert b.running("ci") == 0
