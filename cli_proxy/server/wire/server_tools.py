"""Server tools never break a client: the one rule every wire format applies.

A server-side tool (Anthropic's ``web_search_*``, ``code_execution_*``, ``web_fetch_*``;
the Responses API's ``web_search*``, ``file_search``, ``code_interpreter``; Google's
``googleSearch``, ``codeExecution``, ``urlContext``, ...) is one the API provider runs for the
model. The gateway runs each CLI sealed, with its own tools off, so nothing would run it.
Coding agents declare such tools by default beside their own (Cline: ``web_search_20250305``
beside its 25 client tools), so refusing the request breaks the agent outright. Instead the tool
is left out of what the model sees, the call goes on with the client's own tools, and the
response names what was left out (``x-cli-proxy-dropped-tools``, and the request log). Only a
request that forces such a tool (a ``tool_choice`` naming it) is refused: no answer could
honour it. ``server_tools = "refuse"`` (docs/configuration.md) keeps the strict refusal.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from aiohttp import web

from cli_proxy.server.errors import APIError

DROPPED_HEADER = "x-cli-proxy-dropped-tools"
DROPPED: web.RequestKey[tuple[str, ...]] = web.RequestKey("dropped_tools", tuple)

HINT = (
    "the gateway runs each CLI sealed, with its own tools off, so nothing runs a search, "
    "code or a fetch on the server's side; declare a client tool and run it yourself"
)


@dataclass(frozen=True)
class Dropped:
    """A server tool left out of a request: its name (the tool's type, or Google's key) and
    where the client declared it."""

    name: str
    param: str


def enforce(dropped: Sequence[Dropped], mode: str) -> None:
    """``server_tools = "refuse"``: the first server tool declared is a 400."""
    if dropped and mode == "refuse":
        raise refused(dropped[0].name, dropped[0].param)


def refused(kind: str, param: str) -> APIError:
    """The strict refusal of a declared server tool (``server_tools = "refuse"``)."""
    return APIError(
        400,
        f"{param}: server tool {kind!r} is not supported ({HINT}; the gateway is set to refuse "
        "server tools rather than leave them out: server_tools=refuse)",
        param=param,
        code="unsupported_tool",
    )


def forced(kind: str, param: str) -> APIError:
    """A request that forces a server tool: no answer could honour it, whatever the setting."""
    return APIError(
        400,
        f"{param} forces the server tool {kind!r}, which the gateway cannot run ({HINT})",
        param=param,
        code="unsupported_tool_choice",
    )


def header_value(names: Iterable[str]) -> str:
    """The header's value: the dropped tools' names, comma-separated, each once, in order."""
    seen: dict[str, None] = {}
    for name in names:
        seen.setdefault("".join(c for c in name if c.isprintable() and c not in ",\r\n"), None)
    return ", ".join(n for n in seen if n)


async def on_prepare(request: web.Request, response: web.StreamResponse) -> None:
    """Every response of a request whose server tools were left out names them."""
    dropped = request.get(DROPPED)
    if dropped:
        response.headers[DROPPED_HEADER] = header_value(dropped)
