"""What a gemini 429's text tells: the wait, a daily quota, the model's quota state."""

from __future__ import annotations

import re
import time
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cli_proxy.read.events import (
    Failure,
    RateLimit,
)

# 0.61.0's own text for a per-day quota (``TerminalQuotaError``: the API's RetryInfo dropped)
_DAILY = re.compile(r"exhausted your daily quota", re.I)
# Code Assist's QUOTA_EXHAUSTED text: "Your quota will reset after 2h30m0s." (a Go duration)
_RESET_AFTER = re.compile(r"reset after ((?:\d+(?:\.\d+)?[hms])+)", re.I)
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)([hms])")
PACIFIC = "America/Los_Angeles"
"""Daily (RPD) quotas of the Gemini API reset at midnight Pacific time
(https://ai.google.dev/gemini-api/docs/rate-limits)."""


def quota_failure(failure: Failure, model: str) -> tuple[Failure, RateLimit | None]:
    """A gemini 429, with what its text tells: the wait (the CLI's "Suggested retry after Ns",
    the API's "Please retry in Ns" or "Your quota will reset after 2h30m0s"; for the daily
    quota, whose wait the CLI drops, the next midnight Pacific time), a message naming a
    daily quota, and the model's quota state (``rejected``, until then when known)."""
    wait = failure.retry_after_s
    message = failure.message
    minutes = None
    m = _RESET_AFTER.search(message)
    if wait is None and m is not None:
        wait = sum(
            float(n) * {"h": 3600, "m": 60, "s": 1}[unit]
            for n, unit in _DURATION_PART.findall(m.group(1))
        )
    resets = float(round(time.time() + wait)) if wait is not None else None
    if _DAILY.search(message):
        minutes = 1440
        midnight = _next_midnight(PACIFIC)
        if wait is None and midnight is not None:
            resets, wait = midnight, max(1.0, midnight - time.time())
        what = f"gemini's daily quota of {model}" if model else "gemini's daily quota"
        message += f" ({what} is used up: it resets at midnight Pacific time"
        if midnight is not None:
            when = datetime.fromtimestamp(midnight).astimezone()
            message += ", " + when.isoformat(timespec="minutes")
        message += ")"
    window = RateLimit(model, "rejected", None, resets, minutes) if model else None
    return Failure(failure.kind, message, wait), window


def _next_midnight(zone: str) -> float | None:
    """The next midnight in ``zone`` as Unix time (None without the time zone database)."""
    try:
        tz = ZoneInfo(zone)
    except (ZoneInfoNotFoundError, ValueError):
        return None
    now = datetime.now(tz)
    return (now.replace(hour=0, minute=0, second=0, microsecond=0) + timedelta(days=1)).timestamp()
