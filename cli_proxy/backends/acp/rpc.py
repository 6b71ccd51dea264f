"""ACP as the gateway speaks it (gemini and copilot alike): JSON-RPC lines, the warm prefix a
spare sends at spawn, and the prompt as content blocks."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from cli_proxy.backends.base import load_json_line
from cli_proxy.plan.prompt import Prompt

# JSON-RPC ids of the three requests the gateway sends.
INITIALIZE, NEW_SESSION, PROMPT = 0, 1, 2
METHOD_NOT_FOUND = -32601


def rpc_line(message: dict[str, Any]) -> bytes:
    """One JSON-RPC message as the single line ACP reads (Unicode line breaks escaped)."""
    text = json.dumps({"jsonrpc": "2.0", **message}, ensure_ascii=False)
    return text.translate(_LINE_BREAKS_ESCAPED).encode("utf-8") + b"\n"


_LINE_BREAKS_ESCAPED = str.maketrans({"\x85": "\\u0085", "\u2028": "\\u2028", "\u2029": "\\u2029"})

# What does not depend on the request, so a spare sends it at spawn and is ready for the
# prompt: the client declares no file system (the CLI cannot ask us for files) and opens
# the session in its own work dir ("." is the process's cwd, private to the call, holding
# our workspace settings; the same bytes for every call, warm or cold, bwrap or not).
ACP_PREFIX = rpc_line(
    {
        "id": INITIALIZE,
        "method": "initialize",
        "params": {
            "protocolVersion": 1,
            "clientCapabilities": {"fs": {"readTextFile": False, "writeTextFile": False}},
        },
    }
) + rpc_line({"id": NEW_SESSION, "method": "session/new", "params": {"cwd": ".", "mcpServers": []}})


def prompt_blocks(prompt: Prompt) -> list[dict[str, Any]]:
    """The prompt's blocks as ACP content blocks, images in place (each right after the text
    that ends with its ``<image n sha256>`` tag). Block boundaries are kept: the CLI sends
    each block as its own part, so a conversation's next call repeats this one's parts
    byte for byte and the provider's implicit prefix cache can match them."""
    blocks: list[dict[str, Any]] = []
    for i in range(len(prompt.blocks)):
        for piece in prompt.pieces(i):
            if isinstance(piece, str):
                blocks.append({"type": "text", "text": piece})
            else:
                blocks.append({"type": "image", "mimeType": piece.media_type, "data": piece.base64})
    return blocks


def agent_version(stdout_lines: Sequence[str]) -> str | None:
    """The agent's version as the ``initialize`` result (among the first lines) names it."""
    for line in stdout_lines[:3]:
        obj = load_json_line(line.encode("utf-8"))
        result = obj.get("result") if obj is not None else None
        info = result.get("agentInfo") if isinstance(result, dict) else None
        if isinstance(info, dict) and isinstance(info.get("version"), str):
            return str(info["version"])
    return None
