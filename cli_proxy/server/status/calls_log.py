"""What the status page shows of past requests, kept in memory and bounded.

Fed from the one record per request the log line and the metrics are made from
(``CallRecord``, via ``Metrics.observe``): calls that ran and requests refused before a
backend ran alike. A record holds no prompt or answer text, no key and no token; the model
name is the client's, so whoever shows it escapes it.

Bounded whatever the traffic: the last ``RECENT_MAX`` requests, and errors counted per
minute for the last hour (at most 61 minute buckets of a few error codes each).
"""

from __future__ import annotations

import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass

from cli_proxy.protocol import Usage

RECENT_MAX = 50
ERROR_WINDOW_S = 3600


@dataclass(frozen=True, slots=True)
class CallRecord:
    """One request as the log line and the metrics see it."""

    endpoint: str  # chat, responses
    backend: str  # "" when the request was refused before it reached a backend
    model: str
    status: int
    code: str  # the error code, "" for a success
    duration_s: float
    queue_wait_s: float | None = None
    start_s: float | None = None  # spawn or warm hand-over
    first_content_s: float | None = None
    warm: bool | None = None
    warming: bool = False  # warm, but its spare was still starting
    exit_kind: str | None = None  # ok, error, or why the gateway killed it
    usage: Usage | None = None
    billing_refused: bool = False
    answer_refused: str | None = None  # answer_too_large, oversized_output

    @property
    def start_kind(self) -> str | None:
        """How its CLI started: ``cold`` (spawned for it), ``warm`` (a spare ready for it),
        ``warming`` (a spare still starting: the call waited for part of a start); None when
        no CLI was reached."""
        if self.warm is None:
            return None
        return ("warming" if self.warming else "warm") if self.warm else "cold"


@dataclass(frozen=True, slots=True)
class Recent:
    """One past request: when it ended (Unix time) and its record."""

    at: float
    record: CallRecord


def error_kind(rec: CallRecord) -> str | None:
    """How the page names a failed request: its error code (``http_<status>`` without
    one); None for a success."""
    if rec.status < 400:
        return None
    return rec.code or f"http_{rec.status}"


class CallsLog:
    """The last requests (a ring), calls served warm and cold, errors of the last hour."""

    def __init__(self, size: int = RECENT_MAX, clock: Callable[[], float] = time.time) -> None:
        self.recent: deque[Recent] = deque(maxlen=size)
        self.requests = 0  # every request observed, refused ones included
        self.served: Counter[str] = Counter()  # warm / cold: calls that reached a CLI
        self._errors: dict[int, Counter[str]] = {}  # minute -> error kind -> count
        self._clock = clock

    def add(self, rec: CallRecord) -> None:
        now = self._clock()
        self.recent.append(Recent(now, rec))
        self.requests += 1
        if rec.start_kind is not None:
            self.served[rec.start_kind] += 1
        kind = error_kind(rec)
        if kind is not None:
            minute = int(now // 60)
            self._errors.setdefault(minute, Counter())[kind] += 1
            self._forget(minute)

    def _forget(self, minute: int) -> None:
        oldest = minute - ERROR_WINDOW_S // 60
        for m in [m for m in self._errors if m < oldest]:
            del self._errors[m]

    def errors(self) -> dict[str, int]:
        """Failed requests of the last hour (to the minute) by kind, most frequent first."""
        minute = int(self._clock() // 60)
        self._forget(minute)
        total: Counter[str] = Counter()
        for counts in self._errors.values():
            total.update(counts)
        return dict(total.most_common())

    def last(self) -> list[Recent]:
        """The recent requests, newest first."""
        return list(reversed(self.recent))
