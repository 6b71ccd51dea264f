"""Codex's login: a ChatGPT login in ``~/.codex/auth.json`` (refreshed by the CLI), or an API
key (``CODEX_API_KEY``: nothing to refresh)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path

from cli_proxy.run.logins import Login, file_key, iso_time, jwt_claims, number, read_json

RELOGIN = "codex login"  # `codex login --device-auth` on a host without a browser
"""The command that logs codex in again, named in a ``login_expired`` error."""

REFRESH_INTERVAL_S = 8 * 24 * 3600.0
"""codex refreshes a login whose ``last_refresh`` is older than 8 days, expired or not."""


def codex_login(auth: Path, env: Mapping[str, str]) -> Login | None:
    """A ChatGPT login in ``auth.json`` (None for an API key: nothing to refresh)."""
    if env.get("CODEX_API_KEY"):
        return None
    data = read_json(auth)
    tokens = data.get("tokens") if data is not None else None
    if not isinstance(tokens, dict) or not tokens.get("refresh_token"):
        return None
    claims = jwt_claims(tokens.get("access_token")) or {}
    ends = [
        t
        for t in (
            number(claims.get("exp")),
            (iso_time((data or {}).get("last_refresh")) or math.nan) + REFRESH_INTERVAL_S,
        )
        if t is not None and math.isfinite(t)
    ]
    return Login(
        "codex", str(auth), "chatgpt", min(ends) if ends else None, file_key(auth), RELOGIN
    )


def chatgpt_login(auth: Path) -> bool:
    """Whether ``auth.json`` holds a ChatGPT login (tokens, no API key)."""
    data = read_json(auth)  # cached: one stat while the file is unchanged
    if data is None:
        return False
    return bool(
        data.get("auth_mode") == "chatgpt"
        or (isinstance(data.get("tokens"), dict) and not data.get("OPENAI_API_KEY"))
    )
