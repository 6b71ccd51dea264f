"""Gemini's login: "Login with Google" in ``~/.gemini/oauth_creds.json`` (refreshed by the
CLI), or an API key / Vertex AI (nothing to refresh)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from cli_proxy.run.logins import Login, file_key, number, read_json

RELOGIN = "gemini, then choose Login with Google"
"""The command that logs gemini in again, named in a ``login_expired`` error."""

OAUTH_TYPES = ("oauth-personal", "cloud-shell")


def gemini_login(creds: Path, auth_type: str | None, env: Mapping[str, str]) -> Login | None:
    """The Google login in ``oauth_creds.json`` (``expiry_date``, in ms), when it is the one
    in use (not an API key or Vertex AI)."""
    if auth_type is not None and auth_type not in OAUTH_TYPES:
        return None
    if auth_type is None and (env.get("GEMINI_API_KEY") or env.get("GOOGLE_API_KEY")):
        return None
    data = read_json(creds)
    if data is None or not data.get("refresh_token"):
        return None
    ms = number(data.get("expiry_date"))
    expires = ms / 1000 if ms is not None else None
    return Login("gemini", str(creds), "google oauth", expires, file_key(creds), RELOGIN)
