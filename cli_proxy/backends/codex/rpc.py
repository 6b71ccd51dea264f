"""The app-server's JSON-RPC on stdio: our fixed request ids, the notifications we opt out
of, and the handshake every process gets first (warm or cold)."""

from __future__ import annotations

import json
from typing import Any

from cli_proxy import __version__

# JSON-RPC ids of our requests: fixed, so a recorded run replays with the same parser.
INIT_ID, THREAD_ID, INJECT_ID, TURN_ID, INTERRUPT_ID = 1, 2, 3, 4, 5
CLIENT_NAME = "cli_proxy"  # codex puts it in the upstream originator / user-agent headers


QUIET = (
    "remoteControl/status/changed",  # names the host and its installation id
    "thread/status/changed",
    "thread/started",
    "mcpServer/startupStatus/updated",
)
"""Notifications the parser never reads: not sent, not recorded in fixtures.
``account/rateLimits/updated`` is read (the subscription's windows), so it is not here."""


def rpc(msg_id: int | None, method: str, params: dict[str, Any] | None = None) -> bytes:
    """One JSON-RPC message as app-server reads it: one JSON object per line."""
    obj: dict[str, Any] = {"method": method}
    if msg_id is not None:
        obj = {"id": msg_id, **obj}
    if params is not None:
        obj["params"] = params
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"


WARM_PREFIX = rpc(
    INIT_ID,
    "initialize",
    {
        "clientInfo": {"name": CLIENT_NAME, "title": "cli-proxy", "version": __version__},
        # dynamicTools (the client's functions as native tools) are an experimental field
        "capabilities": {"experimentalApi": True, "optOutNotificationMethods": list(QUIET)},
    },
) + rpc(None, "initialized")
"""What every codex process gets first, warm or cold: nothing in it depends on the request,
so a pre-started app-server has done its start-up and its handshake before a call comes."""
