"""Usage per client key, kept in SQLite (``--state-dir``; docs/keys.md).

One database file, ``usage.sqlite3``, in WAL mode with a busy timeout, so several gateway
workers on one host share it safely: each write is one short transaction. It holds

- ``calls``: one row per finished call (key, model, time, request/error, tokens) for the
  rolling 24 h, pruned once older than that;
- ``rolling``: per key, the tokens of its ``calls`` newer than ``horizon``. Admission moves
  the horizon to 24 h ago and subtracts only the rows that dropped out since the last
  admission, so checking a budget costs the same with ten calls a day or ten thousand
  (summing the rows cost 1.6-2.4 ms a call at 10,000: docs/performance.md);
- ``totals``: running sums per key and model since the store began;
- ``inflight``: the calls admitted and not yet finished (a lease each: key, estimate,
  worker pid and that process's start time), so that a token budget counts every worker's
  calls in flight at admission, and ``max_concurrent`` counts them on the host. A worker
  that died leaves rows with its pid; they are dropped when the store opens, and when a key
  is seen at its ``max_concurrent`` (a pid gone, or reused by a later process).

No secret is stored: keys are named.
"""

from __future__ import annotations

import contextlib
import math
import os
import sqlite3
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

DAY_S = 86400.0
DB_NAME = "usage.sqlite3"
BUSY_TIMEOUT_MS = 5000
PRUNE_EVERY_S = 60.0  # rows older than 24 h only cost space: dropped at most this often
FIELDS = ("requests", "errors", "input_tokens", "cached_input_tokens", "output_tokens")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS calls (
    key TEXT NOT NULL, model TEXT NOT NULL, at REAL NOT NULL,
    requests INTEGER NOT NULL, errors INTEGER NOT NULL,
    input_tokens INTEGER NOT NULL, cached_input_tokens INTEGER NOT NULL,
    output_tokens INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS calls_key_at ON calls (key, at, input_tokens, output_tokens);
CREATE TABLE IF NOT EXISTS totals (
    key TEXT NOT NULL, model TEXT NOT NULL,
    requests INTEGER NOT NULL DEFAULT 0, errors INTEGER NOT NULL DEFAULT 0,
    input_tokens INTEGER NOT NULL DEFAULT 0, cached_input_tokens INTEGER NOT NULL DEFAULT 0,
    output_tokens INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (key, model));
CREATE TABLE IF NOT EXISTS inflight (
    id INTEGER PRIMARY KEY, key TEXT NOT NULL, at REAL NOT NULL,
    tokens INTEGER NOT NULL, pid INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS rolling (
    key TEXT PRIMARY KEY, tokens INTEGER NOT NULL, horizon REAL NOT NULL);
"""
_BORN = "ALTER TABLE inflight ADD COLUMN born REAL NOT NULL DEFAULT 0"  # stores before leases
_DAY_SUM = "SELECT COALESCE(SUM(input_tokens + output_tokens), 0) FROM calls WHERE key = ?"
_INFLIGHT = "SELECT COALESCE(SUM(tokens), 0), COUNT(*) FROM inflight WHERE key = ?1"
# admission's one read (``UsageStore._seen``): the key's running sum, the tokens of its rows
# that dropped out since its horizon (?2: 24 h ago), and its leases (tokens, how many)
_LOOK = (
    "SELECT r.tokens, (SELECT COALESCE(SUM(c.input_tokens + c.output_tokens), 0) FROM calls c "
    "WHERE c.key = ?1 AND c.at > r.horizon AND c.at <= ?2), i.* FROM rolling r, "
    f"({_INFLIGHT}) i WHERE r.key = ?1"
)


def _born(pid: int) -> float:
    """When process ``pid`` started (0.0: gone or unknown): with the pid, names a worker."""
    try:
        return round(psutil.Process(pid).create_time(), 2)
    except psutil.Error:
        return 0.0


def _alive(pid: int, born: float) -> bool:
    """Whether the worker that wrote a lease (``pid``, started at ``born``) still runs: its
    pid exists and, when the lease says when it started, is still that process."""
    if not psutil.pid_exists(pid):
        return False
    return born == 0.0 or _born(pid) in (0.0, born)


class StateError(Exception):
    """The state dir or its database cannot be used; the message names the path."""


@dataclass(frozen=True, slots=True)
class Entry:
    """What one call adds to a key's usage."""

    model: str
    requests: int = 1
    errors: int = 0
    input_tokens: int = 0
    cached_input_tokens: int = 0
    output_tokens: int = 0


@dataclass(frozen=True, slots=True)
class Admission:
    """What admission saw: the key's token budget (None: none asked), its calls in flight on
    the host before this one, and this call's lease (None: refused, by the budget when its
    ``retry_after_s`` is set, else by ``max_concurrent``)."""

    budget: Budget | None
    running: int
    lease: int | None


@dataclass(frozen=True, slots=True)
class Budget:
    """A key's rolling-24 h tokens at admission: used (finished calls) + in flight."""

    used: int
    inflight: int
    retry_after_s: float | None
    """When enough of the window drops out for a call to start (None: it may start now)."""


def default_state_dir() -> Path:
    """A per-user data dir: ``$XDG_DATA_HOME/cli-proxy``, else ``~/.local/share/cli-proxy``."""
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "cli-proxy"


class UsageStore:
    """The usage database of one state dir (one connection per store; the gateway's event
    loop is its only user in a worker)."""

    def __init__(self, state_dir: Path, clock: Any = time.time) -> None:
        self.path = state_dir / DB_NAME
        self._clock = clock
        self._pruned = -math.inf
        self._pid = os.getpid()
        self._me = _born(self._pid)
        try:
            state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        except OSError as exc:
            raise StateError(
                f"state dir {state_dir} cannot be created: {exc.strerror or exc}"
            ) from None
        if not os.access(state_dir, os.W_OK | os.X_OK):
            raise StateError(f"state dir {state_dir} is not writable")
        try:
            self._db = sqlite3.connect(
                self.path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None
            )
            self._db.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            self._db.execute("PRAGMA journal_mode = WAL")
            self._db.execute("PRAGMA synchronous = NORMAL")
            self._db.executescript(_SCHEMA)
            columns = {row[1] for row in self._db.execute("PRAGMA table_info(inflight)")}
            if "born" not in columns:
                self._db.execute(_BORN)
            self._drop_dead()
        except sqlite3.Error as exc:
            raise StateError(f"usage database {self.path} cannot be used: {exc}") from None
        with contextlib.suppress(OSError):
            os.chmod(self.path, 0o600)

    def close(self) -> None:
        self._db.close()

    @contextlib.contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield self._db
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    def _drop_dead(self, key: str | None = None) -> int:
        """Drop the leases of workers that are gone (all, or ``key``'s); how many."""
        sql = "SELECT DISTINCT pid, born FROM inflight"
        rows = self._db.execute(sql + (" WHERE key = ?" if key else ""), (key,) if key else ())
        dead = [(p, b) for p, b in rows if p != self._pid and not _alive(p, b)]
        if not dead:
            return 0
        drop = "DELETE FROM inflight WHERE pid = ? AND born = ?"
        if self._db.in_transaction:
            self._db.executemany(drop, dead)
        else:
            with self._write() as db:
                db.executemany(drop, dead)
        return len(dead)

    # ---------------------------------------------------------------- budget

    def _seen(self, key: str, now: float) -> tuple[int, int, int]:
        """The key's tokens of the rolling 24 h (its running sum, ``rolling``), the tokens of
        its calls in flight and how many they are: one read. The running sum moves past the
        rows that dropped out since the last look (usually none: then nothing is written,
        and its horizon stays where it was, which keeps the sum exact). In a write
        transaction."""
        cut = now - DAY_S
        row = self._db.execute(_LOOK, (key, cut)).fetchone()
        if row is None:  # the key's first admission here: one sum of its rows
            (used,) = self._db.execute(_DAY_SUM + " AND at > ?", (key, cut)).fetchone()
            self._db.execute("INSERT INTO rolling VALUES (?, ?, ?)", (key, used, cut))
            inflight, running = self._db.execute(_INFLIGHT, (key,)).fetchone()
            return int(used), int(inflight), int(running)
        used, gone, inflight, running = row
        if gone:
            used -= gone
            self._db.execute(
                "UPDATE rolling SET tokens = ?, horizon = ? WHERE key = ?", (used, cut, key)
            )
        return int(used), int(inflight), int(running)

    def budget(self, key: str, limit: int) -> Budget:
        """The key's rolling-24 h tokens now, and when a call may start if it may not."""
        if not self._db.in_transaction:
            with self._write():
                return self.budget(key, limit)
        now = self._clock()
        used, inflight, _ = self._seen(key, now)
        return self._budget(key, limit, used, inflight, now)

    def _budget(self, key: str, limit: int, used: int, inflight: int, now: float) -> Budget:
        if used + inflight < limit:
            return Budget(used, inflight, None)
        rows = self._db.execute(  # over: when do enough of them drop out? (rare)
            "SELECT at, input_tokens + output_tokens FROM calls WHERE key = ? AND at > ? "
            "ORDER BY at",
            (key, now - DAY_S),
        ).fetchall()
        remaining = used + inflight
        retry = DAY_S
        for at, tokens in rows:  # the oldest drop out first
            remaining -= tokens
            if remaining < limit:
                retry = at + DAY_S - now
                break
        return Budget(used, inflight, max(1.0, min(DAY_S, retry)))

    def _lease(self, key: str, tokens: int) -> int:
        cur = self._db.execute(
            "INSERT INTO inflight (key, at, tokens, pid, born) VALUES (?, ?, ?, ?, ?)",
            (key, self._clock(), tokens, self._pid, self._me),
        )
        return int(cur.lastrowid or 0)

    def reserve(self, key: str, tokens: int) -> int:
        """Count a call being admitted at ``tokens`` (its estimate); the id to release."""
        with self._write():
            return self._lease(key, tokens)

    def running(self, key: str) -> int:
        """The key's calls in flight on the host (every worker's leases); a read, no lock."""
        (n,) = self._db.execute("SELECT COUNT(*) FROM inflight WHERE key = ?", (key,)).fetchone()
        return int(n)

    def running_all(self) -> dict[str, int]:
        """Every key's calls in flight on the host (``/status``, ``/metrics``)."""
        rows = self._db.execute("SELECT key, COUNT(*) FROM inflight GROUP BY key")
        return {k: int(n) for k, n in rows}

    def admit(
        self, key: str, limit: int | None, tokens: int, max_running: int | None = None
    ) -> Admission:
        """Check the token budget (``limit``) and the calls in flight (``max_running``) and,
        if a call may start, lease it at ``tokens`` (its estimate), in one transaction:
        workers racing for the last of a budget or of a key's concurrency see each other's
        leases."""
        with self._write():
            now = self._clock()
            used, inflight, running = self._seen(key, now)
            budget = None if limit is None else self._budget(key, limit, used, inflight, now)
            if budget is not None and budget.retry_after_s is not None:
                return Admission(budget, 0, None)
            if max_running is None:
                running = 0
            elif running >= max_running and self._drop_dead(key):  # a dead worker's?
                running = self.running(key)
            if max_running is not None and running >= max_running:
                return Admission(budget, running, None)
            return Admission(budget, running, self._lease(key, tokens))

    # ---------------------------------------------------------------- record

    def record(self, key: str, entry: Entry, reservation: int | None = None) -> None:
        """File one call's usage under ``key`` (and drop its reservation)."""
        now = self._clock()
        values = (
            entry.requests,
            entry.errors,
            entry.input_tokens,
            entry.cached_input_tokens,
            entry.output_tokens,
        )
        with self._write() as db:
            if reservation is not None:
                db.execute("DELETE FROM inflight WHERE id = ?", (reservation,))
            db.execute(
                "INSERT INTO calls VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (key, entry.model, now, *values),
            )
            tokens = entry.input_tokens + entry.output_tokens
            if tokens:
                db.execute(
                    "UPDATE rolling SET tokens = tokens + ? WHERE key = ? AND horizon < ?",
                    (tokens, key, now),
                )
            db.execute(
                "INSERT INTO totals VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (key, model) DO "
                "UPDATE SET requests = requests + excluded.requests, "
                "errors = errors + excluded.errors, "
                "input_tokens = input_tokens + excluded.input_tokens, "
                "cached_input_tokens = cached_input_tokens + excluded.cached_input_tokens, "
                "output_tokens = output_tokens + excluded.output_tokens",
                (key, entry.model, *values),
            )
            if now - self._pruned >= PRUNE_EVERY_S:  # rows older than a day: now and then
                self._pruned = now
                cut = now - DAY_S
                # every running sum past the rows about to go first, then drop them
                db.execute(
                    "UPDATE rolling SET tokens = tokens - (SELECT COALESCE(SUM("
                    "c.input_tokens + c.output_tokens), 0) FROM calls c WHERE c.key = "
                    "rolling.key AND c.at > rolling.horizon AND c.at <= ?), horizon = ? "
                    "WHERE horizon < ?",
                    (cut, cut, cut),
                )
                db.execute("DELETE FROM calls WHERE at <= ?", (cut,))

    def release(self, reservation: int) -> None:
        """Drop a reservation whose call is not filed (a fallen-through attempt)."""
        with self._write() as db:
            db.execute("DELETE FROM inflight WHERE id = ?", (reservation,))

    # ---------------------------------------------------------------- report

    def usage(self, key: str) -> dict[str, Any]:
        """``GET /v1/usage``'s body for ``key``: last 24 h and total, each with ``by_model``."""
        since = self._clock() - DAY_S
        cols = ", ".join(f"SUM({f})" for f in FIELDS)
        recent = self._db.execute(
            f"SELECT model, {cols} FROM calls WHERE key = ? AND at > ? GROUP BY model",
            (key, since),
        ).fetchall()
        total = self._db.execute(
            f"SELECT model, {', '.join(FIELDS)} FROM totals WHERE key = ?", (key,)
        ).fetchall()
        return {"key": key, "last_24h": _summary(recent), "total": _summary(total)}

    def tokens_24h(self) -> dict[str, int]:
        """Every key's rolling-24 h tokens (for ``/metrics`` and ``/status``)."""
        rows = self._db.execute(
            "SELECT key, SUM(input_tokens + output_tokens) FROM calls WHERE at > ? GROUP BY key",
            (self._clock() - DAY_S,),
        ).fetchall()
        return {k: int(t or 0) for k, t in rows}

    def totals(self) -> dict[str, dict[str, int]]:
        """Every key's totals since the store began, summed over models (``/metrics``)."""
        cols = ", ".join(f"SUM({f})" for f in FIELDS)
        rows = self._db.execute(f"SELECT key, {cols} FROM totals GROUP BY key").fetchall()
        return {r[0]: {f: int(v or 0) for f, v in zip(FIELDS, r[1:], strict=True)} for r in rows}


def _summary(rows: list[tuple[Any, ...]]) -> dict[str, Any]:
    out: dict[str, Any] = {f: 0 for f in FIELDS}
    by_model: dict[str, dict[str, int]] = {}
    for model, *values in rows:
        counts = {f: int(v or 0) for f, v in zip(FIELDS, values, strict=True)}
        by_model[model] = counts
        for f in FIELDS:
            out[f] += counts[f]
    out["by_model"] = by_model
    return out
