"""The usage store (cli_proxy/run/usage.py): SQLite per state dir, rolling 24 h, totals,
reservations of calls in flight, shared by several connections (workers)."""

from __future__ import annotations

import os
import sqlite3
import stat
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cli_proxy.run.usage import DAY_S, DB_NAME, Entry, StateError, UsageStore


class Clock:
    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_usage_is_per_key_by_model_and_survives_reopening(tmp_path: Path) -> None:
    clock = Clock()
    store = UsageStore(tmp_path, clock)
    store.record(
        "ci", Entry("claude-sonnet-4-6", input_tokens=100, cached_input_tokens=40, output_tokens=10)
    )
    store.record("ci", Entry("gemini-2.5-flash", errors=1))
    store.record("me", Entry("claude-sonnet-4-6", input_tokens=7, output_tokens=3))
    store.close()
    clock.now += DAY_S + 1  # the first calls leave the last 24 h but stay in the total
    store = UsageStore(tmp_path, clock)
    store.record("ci", Entry("claude-sonnet-4-6", input_tokens=1, output_tokens=2))
    body = store.usage("ci")
    assert body["key"] == "ci"
    assert body["last_24h"] == {
        "requests": 1,
        "errors": 0,
        "input_tokens": 1,
        "cached_input_tokens": 0,
        "output_tokens": 2,
        "by_model": {
            "claude-sonnet-4-6": {
                "requests": 1,
                "errors": 0,
                "input_tokens": 1,
                "cached_input_tokens": 0,
                "output_tokens": 2,
            }
        },
    }
    total = body["total"]
    assert (total["requests"], total["errors"], total["input_tokens"]) == (3, 1, 101)
    assert total["by_model"]["gemini-2.5-flash"]["errors"] == 1
    assert store.usage("nobody")["total"]["requests"] == 0
    assert "me" not in str(body)


def test_budget_counts_calls_in_flight_and_says_when_it_frees(tmp_path: Path) -> None:
    clock = Clock()
    store = UsageStore(tmp_path, clock)
    store.record("k", Entry("m", input_tokens=600, output_tokens=0))
    clock.now += 3600
    store.record("k", Entry("m", input_tokens=300, output_tokens=0))
    seen = store.admit("k", 1000, 50)
    rid = seen.lease
    assert seen.budget and seen.budget.retry_after_s is None and rid is not None  # 900 < 1000
    seen = store.admit("k", 1000, 50)
    rid2 = seen.lease
    assert seen.budget and seen.budget.retry_after_s is None and rid2 is not None  # 950: starts
    seen = store.admit("k", 1000, 50)
    b = seen.budget
    assert seen.lease is None and b is not None and b.used == 900 and b.inflight == 100
    # the 600 drop out at 24 h after they were spent: 23 h from now
    assert b.retry_after_s == pytest.approx(DAY_S - 3600)
    store.release(rid)
    store.record("k", Entry("m", input_tokens=10, output_tokens=5), rid2)
    b = store.budget("k", 1000)
    assert (b.used, b.inflight, b.retry_after_s) == (915, 0, None)


def test_retry_after_is_at_most_a_day(tmp_path: Path) -> None:
    clock = Clock()
    store = UsageStore(tmp_path, clock)
    store.reserve("k", 5000)  # in flight alone over the budget
    b = store.budget("k", 1000)
    assert b.retry_after_s == DAY_S


@settings(max_examples=30, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 500), st.integers(0, 7200)), max_size=12),
    st.integers(1, 2000),
)
def test_retry_after_frees_enough(
    tmp_path_factory: pytest.TempPathFactory, calls: list[tuple[int, int]], limit: int
) -> None:
    clock = Clock()
    store = UsageStore(tmp_path_factory.mktemp("s"), clock)
    for tokens, gap in calls:
        clock.now += gap
        store.record("k", Entry("m", input_tokens=tokens))
    b = store.budget("k", limit)
    if b.retry_after_s is None:
        assert b.used < limit
        return
    assert 1 <= b.retry_after_s <= DAY_S
    if b.retry_after_s < DAY_S:
        clock.now += b.retry_after_s + 0.001
        assert store.budget("k", limit).retry_after_s is None


def test_two_workers_share_one_store(tmp_path: Path) -> None:
    a, b = UsageStore(tmp_path), UsageStore(tmp_path)
    ra = a.admit("k", 100, 60).lease
    rb = b.admit("k", 100, 60).lease  # sees a's reservation: 60 < 100 still admits one more
    assert ra is not None and rb is not None
    assert b.admit("k", 100, 60).lease is None  # 120 >= 100
    a.record("k", Entry("m", input_tokens=1), ra)
    assert b.usage("k")["total"]["requests"] == 1
    mode = sqlite3.connect(tmp_path / DB_NAME).execute("PRAGMA journal_mode").fetchone()[0]
    assert mode == "wal"


def test_leases_count_calls_in_flight_on_the_host(tmp_path: Path) -> None:
    """max_concurrent across workers: each store (a worker) sees the others' leases."""
    a, b = UsageStore(tmp_path), UsageStore(tmp_path)
    first = a.admit("k", None, 10, max_running=2)
    second = b.admit("k", None, 10, max_running=2)
    assert first.lease is not None and second.lease is not None and second.running == 1
    third = a.admit("k", None, 10, max_running=2)
    assert third.lease is None and third.running == 2 and third.budget is None
    assert a.running("k") == b.running("k") == 2 and a.running_all() == {"k": 2}
    b.record("k", Entry("m", input_tokens=1), second.lease)  # filing ends the lease
    assert a.admit("k", None, 10, max_running=2).lease is not None
    assert a.admit("other", None, 10, max_running=1).lease is not None  # per key
    # a budget and a concurrency limit together: the budget refuses first, at once
    over = b.admit("k", 5, 10, max_running=1)
    assert over.lease is None and over.budget is not None and over.budget.retry_after_s


def test_a_dead_or_reused_pid_frees_its_leases_when_seen(tmp_path: Path) -> None:
    store = UsageStore(tmp_path)
    insert = "INSERT INTO inflight (key, at, tokens, pid, born) VALUES ('k', 0, 1, ?, ?)"
    store._db.execute(insert, (999999999, 0))  # gone
    store._db.execute(insert, (1, 12345.0))  # pid 1 lives, but was not born then: reused
    assert store.running("k") == 2
    seen = store.admit("k", None, 10, max_running=1)
    assert seen.lease is not None and seen.running == 0
    assert store.running("k") == 1  # only the new lease


def test_a_store_from_before_leases_is_upgraded(tmp_path: Path) -> None:
    db = sqlite3.connect(tmp_path / DB_NAME)
    db.execute(
        "CREATE TABLE inflight (id INTEGER PRIMARY KEY AUTOINCREMENT, key TEXT NOT NULL, "
        "at REAL NOT NULL, tokens INTEGER NOT NULL, pid INTEGER NOT NULL)"
    )
    db.execute("INSERT INTO inflight (key, at, tokens, pid) VALUES ('k', 0, 7, ?)", (os.getpid(),))
    db.commit()
    db.close()
    store = UsageStore(tmp_path)
    assert store.budget("k", 100).inflight == 7  # this process's old row kept
    assert store.admit("k", 100, 5, max_running=2).lease is not None


def test_the_running_sum_matches_the_rows(tmp_path: Path) -> None:
    """The per-key running sum (``rolling``) against a plain sum of the rows, as calls age
    out, the rows are pruned and the store is reopened."""
    clock = Clock()
    store = UsageStore(tmp_path, clock)

    def plain() -> int:
        (n,) = store._db.execute(
            "SELECT COALESCE(SUM(input_tokens + output_tokens), 0) FROM calls "
            "WHERE key = 'k' AND at > ?",
            (clock.now - DAY_S,),
        ).fetchone()
        return int(n)

    for i in range(60):
        clock.now += 1800 + (i % 7) * 300  # 30-60 min apart: rows keep ageing out
        store.record("k", Entry("m", input_tokens=i, output_tokens=i % 3))
        if i % 5 == 0:
            assert store.budget("k", 10**9).used == plain()
        if i == 30:
            store.close()
            store = UsageStore(tmp_path, clock)
    assert store.budget("k", 10**9).used == plain() > 0


def test_reservations_of_a_dead_worker_are_dropped(tmp_path: Path) -> None:
    store = UsageStore(tmp_path)
    store._db.execute("INSERT INTO inflight (key, at, tokens, pid) VALUES ('k', 0, 999, 999999999)")
    store.close()
    assert UsageStore(tmp_path).budget("k", 100).inflight == 0


def test_a_state_dir_under_a_file_is_named(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(StateError, match=str(tmp_path / "file" / "state")):
        UsageStore(tmp_path / "file" / "state")


def test_an_unwritable_state_dir_is_named(tmp_path: Path) -> None:
    if os.geteuid() == 0:
        pytest.skip("root writes anywhere")
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(stat.S_IRUSR | stat.S_IXUSR)
    try:
        with pytest.raises(StateError, match=str(locked)):
            UsageStore(locked)
        with pytest.raises(StateError, match=str(locked / "sub")):
            UsageStore(locked / "sub")
    finally:
        locked.chmod(0o700)


def test_an_unreadable_database_is_named(tmp_path: Path) -> None:
    (tmp_path / DB_NAME).write_bytes(b"this is not a database" * 100)
    with pytest.raises(StateError, match=str(tmp_path / DB_NAME)):
        UsageStore(tmp_path)
