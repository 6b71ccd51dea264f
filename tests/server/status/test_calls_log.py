"""The status page's memory of past requests: a ring of the last 50, warm and cold counts,
errors of the last hour; bounded whatever the traffic."""

from __future__ import annotations

from cli_proxy.server.status.calls_log import RECENT_MAX, CallRecord, CallsLog


def record(status: int = 200, code: str = "", warm: bool | None = None) -> CallRecord:
    return CallRecord("chat", "claude", "claude-sonnet-4-6", status, code, 0.5, warm=warm)


def test_the_ring_keeps_the_last_requests_newest_first() -> None:
    now = [1000.0]
    log = CallsLog(clock=lambda: now[0])
    for i in range(RECENT_MAX + 10):
        now[0] += 1
        log.add(record(status=200 + i))
    last = log.last()
    assert len(last) == RECENT_MAX == 50
    assert [r.record.status for r in last[:2]] == [200 + RECENT_MAX + 9, 200 + RECENT_MAX + 8]
    assert last[0].at == now[0]
    assert log.requests == RECENT_MAX + 10


def test_warm_and_cold_count_only_calls_that_reached_a_cli() -> None:
    log = CallsLog()
    log.add(record(warm=True))
    log.add(record(warm=False))
    log.add(record(warm=False))
    log.add(record(status=404, code="model_not_found"))  # refused: no process
    assert log.served == {"warm": 1, "cold": 2}
    assert log.requests == 4


def test_errors_of_the_last_hour_by_kind() -> None:
    now = [3600.0 * 100]
    log = CallsLog(clock=lambda: now[0])
    log.add(record(429, "rate_limit_exceeded"))
    log.add(record(200))
    log.add(record(499, "client_closed"))
    now[0] += 1800
    log.add(record(429, "rate_limit_exceeded"))
    log.add(record(502))  # no code: named by its status
    assert log.errors() == {"rate_limit_exceeded": 2, "client_closed": 1, "http_502": 1}
    now[0] += 1800 + 61  # the first three are more than an hour old now
    assert log.errors() == {"rate_limit_exceeded": 1, "http_502": 1}
    now[0] += 3600
    assert log.errors() == {}
    assert not log._errors  # forgotten, not only hidden
