"""Usage per client key, kept in SQLite (``--state-dir``; docs/keys.md).

One database file, ``usage.sqlite3``, in WAL mode with a busy timeout, so several gateway
workers on one host share it safely: each write is one short transaction. It holds

- ``calls``: one row per finished call (key, model, time, request/error, tokens) for the
  rolling 24 h, pruned once older than that;
- ``totals``: running sums per key and model since the store began;
- ``inflight``: the calls admitted and not yet finished, each at an estimate of its size,
  so that a token budget counts them (every worker's) at admission. A worker that died
  leaves rows with its pid; they are dropped when the store opens and when seen.

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
    id INTEGER PRIMARY KEY AUTOINCREMENT, key TEXT NOT NULL, at REAL NOT NULL,
    tokens INTEGER NOT NULL, pid INTEGER NOT NULL);
"""


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

    def _drop_dead(self) -> None:
        pids = [p for (p,) in self._db.execute("SELECT DISTINCT pid FROM inflight")]
        dead = [p for p in pids if p != os.getpid() and not psutil.pid_exists(p)]
        if dead:
            with self._write() as db:
                db.executemany("DELETE FROM inflight WHERE pid = ?", [(p,) for p in dead])

    # ---------------------------------------------------------------- budget

    def budget(self, key: str, limit: int) -> Budget:
        """The key's rolling-24 h tokens now, and when a call may start if it may not."""
        now = self._clock()
        since = now - DAY_S
        (used,) = self._db.execute(  # an index-only sum (the index covers the tokens)
            "SELECT COALESCE(SUM(input_tokens + output_tokens), 0) FROM calls "
            "WHERE key = ? AND at > ?",
            (key, since),
        ).fetchone()
        (inflight,) = self._db.execute(
            "SELECT COALESCE(SUM(tokens), 0) FROM inflight WHERE key = ?", (key,)
        ).fetchone()
        if used + inflight < limit:
            return Budget(used, inflight, None)
        rows = self._db.execute(  # over: when do enough of them drop out? (rare)
            "SELECT at, input_tokens + output_tokens FROM calls WHERE key = ? AND at > ? "
            "ORDER BY at",
            (key, since),
        ).fetchall()
        remaining = used + inflight
        retry = DAY_S
        for at, tokens in rows:  # the oldest drop out first
            remaining -= tokens
            if remaining < limit:
                retry = at + DAY_S - now
                break
        return Budget(used, inflight, max(1.0, min(DAY_S, retry)))

    def reserve(self, key: str, tokens: int) -> int:
        """Count a call being admitted at ``tokens`` (its estimate); the id to release."""
        with self._write() as db:
            cur = db.execute(
                "INSERT INTO inflight (key, at, tokens, pid) VALUES (?, ?, ?, ?)",
                (key, self._clock(), tokens, os.getpid()),
            )
        return int(cur.lastrowid or 0)

    def admit(self, key: str, limit: int, tokens: int) -> tuple[Budget, int | None]:
        """Check the budget and, if a call may start, reserve its ``tokens`` (estimate), in
        one transaction: workers racing for the last of a budget see each other's
        reservations. Returns the budget seen and the reservation's id (None: refused)."""
        with self._write() as db:
            b = self.budget(key, limit)
            if b.retry_after_s is not None:
                return b, None
            cur = db.execute(
                "INSERT INTO inflight (key, at, tokens, pid) VALUES (?, ?, ?, ?)",
                (key, self._clock(), tokens, os.getpid()),
            )
        return b, int(cur.lastrowid or 0)

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
                db.execute("DELETE FROM calls WHERE at <= ?", (now - DAY_S,))

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
