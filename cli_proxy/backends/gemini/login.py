"""Gemini's login: "Login with Google" in ``~/.gemini/oauth_creds.json`` (refreshed by the
CLI), or an API key / Vertex AI (nothing to refresh)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

from cli_proxy.run.logins import Login, file_key, number, read_json

RELOGIN = "gemini, then choose Login with Google"
"""The command that logs gemini in again, named in a ``login_expired`` error."""

OAUTH_TYPES = ("oauth-personal", "cloud-shell")

# What still serves the gemini backend since 2026-06-18, when Code Assist stopped serving the
# Gemini CLI to individual Google accounts (tests/data/real-cli/gemini-0.61.0-code-assist-
# ineligible.md): named in the refusal's error and in doctor's and /status's warning. Over
# ACP, 0.61.0 authenticates as ~/.gemini/settings.json's ``security.auth.selectedType`` says
# (measured: with ``oauth-personal`` selected, GEMINI_API_KEY is ignored and the login is
# refused all the same), so a key needs that setting changed too.
STILL_WORKS = (
    "what still works: a Gemini API key (GEMINI_API_KEY), Vertex AI "
    "(GOOGLE_GENAI_USE_VERTEXAI=true with GOOGLE_CLOUD_PROJECT and GOOGLE_CLOUD_LOCATION, or "
    "GOOGLE_API_KEY) - for either, set security.auth.selectedType in ~/.gemini/settings.json "
    "to gemini-api-key or vertex-ai (a selected Login with Google ignores keys) - a Gemini Code "
    "Assist Standard or Enterprise licence (Login with Google plus GOOGLE_CLOUD_PROJECT), or "
    "the copilot backend for Gemini models (copilot/gemini-...)"
)
PERSONAL_REFUSED = (
    "since 2026-06-18 Google refuses the Gemini CLI for individual Google accounts (Google AI "
    "Pro, Ultra and the free tier of Gemini Code Assist for individuals)"
)
# A Google login with the project of a Code Assist Standard/Enterprise licence.
PROJECT_VARS = ("GOOGLE_CLOUD_PROJECT", "GOOGLE_CLOUD_PROJECT_ID")
# What serves gemini without a Google login, when no auth type is selected.
KEY_VARS = ("GEMINI_API_KEY", "GOOGLE_API_KEY")


# Code Assist's refusal of a Google account's tier, as 0.61.0 passes it on: the ineligible
# tier's ``reasonMessage`` as the ACP error of ``session/new`` (code -32000; capture
# gemini-0.61.0-code-assist-ineligible). The older reasons (location, age, account type) say
# "not eligible for Gemini Code Assist".
INELIGIBLE = re.compile(
    r"no longer supported for Gemini Code Assist|not eligible for Gemini Code Assist|"
    r"IneligibleTierError",
    re.I,
)


def ineligible_message(reason: str) -> str:
    """The ``cli_auth_failed`` message for a Google login Code Assist refuses as ineligible:
    Google's reason, then what still serves this backend."""
    return (
        f"gemini's Google login was refused by Gemini Code Assist: {reason.strip()} "
        f"({PERSONAL_REFUSED}; not your API key, and retrying will not help); {STILL_WORKS}"
    )


def personal_login_warning(
    auth_type: str | None, has_oauth_file: bool, env: Mapping[str, str], drop: frozenset[str]
) -> str | None:
    """Doctor's and /status's warning when gemini would serve with a personal "Login with
    Google" (no Code Assist project; no key, or a key the selected Google login ignores),
    which Code Assist now refuses as ineligible; None otherwise. ``auth_type``: the user's
    ``selectedType``."""

    def given(var: str) -> bool:
        return bool(env.get(var)) and var not in drop

    if not has_oauth_file or auth_type not in (None, "oauth-personal"):
        return None
    if any(given(var) for var in PROJECT_VARS):
        return None  # Code Assist Standard/Enterprise: served on the project's licence
    vertex = given("GOOGLE_GENAI_USE_VERTEXAI") and env["GOOGLE_GENAI_USE_VERTEXAI"].lower() in (
        "true",
        "1",
    )
    keys = [var for var in KEY_VARS if given(var)] + (
        ["GOOGLE_GENAI_USE_VERTEXAI"] if vertex else []
    )
    if auth_type is None:
        if keys:
            return None  # no auth type selected: gemini serves with the key
        return (
            "a Google login but no key, and ~/.gemini/settings.json selects no auth type (gemini "
            f"then wants GEMINI_API_KEY); a Google login would not serve either: "
            f"{PERSONAL_REFUSED}; {STILL_WORKS}"
        )
    if keys:
        what = (
            f"{', '.join(keys)} set, but ~/.gemini/settings.json selects Login with Google "
            "(security.auth.selectedType oauth-personal), which gemini uses instead"
        )
    else:
        what = "only a Google login and no key"
    return (
        f"{what}: {PERSONAL_REFUSED}, so unless this account has a Code Assist "
        f"Standard/Enterprise licence, calls fail with cli_auth_failed; {STILL_WORKS}"
    )


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
