"""Copilot's logins: a token in the environment, a stored ``copilot login``, or BYOK (a model
provider of the user's own, ``COPILOT_PROVIDER_*``). None of them is refreshed by the gateway:
a GitHub token does not expire on a timer the gateway could read."""

from __future__ import annotations

RELOGIN = "copilot login"
"""The command that logs copilot in again, named in a login error."""

TOKEN_VARS = ("COPILOT_GITHUB_TOKEN", "GH_TOKEN", "GITHUB_TOKEN")
"""Tokens copilot takes, in its order of precedence, over a stored login."""

BYOK_VAR = "COPILOT_PROVIDER_BASE_URL"
"""Set: copilot sends the model calls to that provider and needs no GitHub login."""

LOGIN_FILE = "config.json"
"""Where ``copilot login`` keeps its token under ~/.copilot when no system keychain is there
(with the user's consent, plaintext); a keychain login is not reachable from the gateway's
sandbox."""

NO_LOGIN = (
    "the gateway's copilot has no login: on the gateway host run `copilot login`, or set "
    "COPILOT_GITHUB_TOKEN (or GH_TOKEN / GITHUB_TOKEN), or a model provider of your own "
    "(COPILOT_PROVIDER_BASE_URL and its key)"
)
