"""Claude's login: the claude.ai OAuth login in ``~/.claude/.credentials.json`` (refreshed by
the CLI), or a key or long-lived token in the environment (never refreshed)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from cli_proxy.run.logins import Login, file_key, number, read_json

RELOGIN = (
    "claude, then /login (for an unattended gateway: `claude setup-token` and "
    "CLI_PROXY_CLAUDE__OAUTH_TOKEN)"
)
"""The command that logs claude in again, named in a ``login_expired`` error."""

ENV_LOGINS = ("CLAUDE_CODE_OAUTH_TOKEN", "ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN")
"""Any of these in the CLI's environment replaces the refreshing login (never refreshed)."""


def claude_credentials(home: str, env: Mapping[str, str]) -> Path:
    config = env.get("CLAUDE_CONFIG_DIR")
    return Path(config or os.path.join(home, ".claude")) / ".credentials.json"


def claude_login(home: str, env: Mapping[str, str]) -> Login | None:
    """The claude.ai login in ``.credentials.json`` (``claudeAiOauth.expiresAt``, in ms)."""
    if any(env.get(name) for name in ENV_LOGINS):
        return None
    path = claude_credentials(home, env)
    data = read_json(path)
    oauth = data.get("claudeAiOauth") if data is not None else None
    if not isinstance(oauth, dict) or not oauth.get("refreshToken"):
        return None
    ms = number(oauth.get("expiresAt"))
    expires = ms / 1000 if ms is not None else None
    return Login("claude", str(path), "claude.ai oauth", expires, file_key(path), RELOGIN)
