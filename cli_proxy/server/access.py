"""Who is calling: the client's key, read once per request at the edge (docs/keys.md).

The credentials a request presents are ``Authorization: Bearer``, ``x-api-key`` and
``x-goog-api-key`` on every path, and the sources its own wire format adds
(``WireFormat.credentials``: ``?key=`` on the Gemini API's paths only, once that format is in
the table). Two different ones in one request are a 401, as is a wrong
or missing one, in the wire format's own shape (the errors middleware renders it). The key
found is kept on the request (``CLIENT_KEY``) for the handlers: the governor's limits, the
models list, usage. No secret is logged or kept: the key is a name and a digest.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiohttp import web

from cli_proxy.gateway import Gateway
from cli_proxy.run.keys import ClientKey, TwoCredentials
from cli_proxy.server.errors import APIError
from cli_proxy.server.formats import format_for

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
CLIENT_KEY: web.RequestKey[ClientKey] = web.RequestKey("client_key", ClientKey)
ANSWERED_BY: web.RequestKey[str] = web.RequestKey("answered_by", str)
MODEL_HEADER = "x-cli-proxy-model"

NO_KEY = (
    "Incorrect or missing API key: send 'Authorization: Bearer <key>', 'x-api-key: <key>' "
    "or 'x-goog-api-key: <key>'"
)
TWO_KEYS = "Two different API keys in one request (say Bearer and x-api-key): send one"


def presented(request: web.Request) -> list[bytes]:
    """Every credential the request presents, as bytes (surrogates kept: compared, never
    decoded)."""
    out = [
        key.strip().encode("utf-8", "surrogateescape")
        for key in format_for(request.path, request.headers).credentials(request)
    ]
    scheme, _, token = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() == "bearer":
        out.append(token.strip().encode("utf-8", "surrogateescape"))
    for header in ("x-api-key", "x-goog-api-key"):
        value = request.headers.get(header)
        if value is not None:
            out.append(value.strip().encode("utf-8", "surrogateescape"))
    return out


def authenticate(request: web.Request, gateway: Gateway) -> ClientKey | None:
    """The request's key (kept on it as ``CLIENT_KEY``), None when the gateway asks for
    none; ``APIError(401)`` for a wrong, missing or doubled one."""
    ring = gateway.governor.ring
    if not ring.enabled:
        return None
    try:
        key = ring.match(presented(request))
    except TwoCredentials:
        raise APIError(401, TWO_KEYS, code="invalid_api_key") from None
    if key is None:
        raise APIError(401, NO_KEY, code="invalid_api_key")
    request[CLIENT_KEY] = key
    return key


def client_key(request: web.Request) -> ClientKey | None:
    """The key the auth middleware found for this request (None: no keys asked)."""
    return request.get(CLIENT_KEY)


async def name_the_model(request: web.Request, response: web.StreamResponse) -> None:
    """``on_response_prepare``: ``x-cli-proxy-model`` names the model that answered (an
    alias's target), on JSON answers and streams alike."""
    model = request.get(ANSWERED_BY)
    if model is not None:
        response.headers[MODEL_HEADER] = model
