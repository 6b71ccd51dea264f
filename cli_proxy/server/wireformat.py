"""What one wire format (one API a client speaks) is to the edge: a ``WireFormat`` entry.

The edge (``app``, ``listener``, ``errors``, ``openapi``) loops over the table of entries
(``formats.py``) and names no format, as uvicorn's core loops over ``HTTP_PROTOCOLS``: a new
API is its own modules (``wire/<name>.py``, ``delivery/<name>.py``) plus one entry. What an
entry can say was chosen for the APIs served and the next one (Google's ``generateContent``:
path parameters and a query-dependent stream mode, a header claim on the shared models path,
its own credential sources, keep-alives and error body); docs/architecture.md walks it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from aiohttp import web
from pydantic import BaseModel

from cli_proxy.config import Settings
from cli_proxy.protocol import ChatCompletionRequest
from cli_proxy.server.apidoc import ModelSchemas
from cli_proxy.server.errors import APIError
from cli_proxy.server.wire.chat import ModelCard

if TYPE_CHECKING:
    from cli_proxy.run.call import Call
    from cli_proxy.server.delivery import Format

RouteKind = Literal["call", "count", "models", "model"]
Refs = dict[type[BaseModel], Any]  # a model -> its ``$ref`` in the OpenAPI document


def same(param: str | None) -> str | None:
    return param


def no_credentials(request: web.Request) -> list[str]:
    return []


def no_paths(ref: Refs) -> dict[str, Any]:
    return {}


@dataclass(frozen=True)
class Inbound:
    """One request of an API, read and translated: the one conversation, and what the edge
    does with its answer (``answer`` on call routes, ``count`` on count routes)."""

    conversation: ChatCompletionRequest  # its ``stream`` decides JSON or a stream
    answer: Callable[[Call, Settings], Format] | None = None
    count: Callable[[int], dict[str, Any]] | None = None  # the body for a token estimate
    param: Callable[[str | None], str | None] = same  # a planner's field path, as the API names it


Reader = Callable[[dict[str, Any], web.Request], Inbound]


@dataclass(frozen=True)
class Route:
    """One route of an API: an aiohttp path pattern, served under each of ``prefixes``.
    ``call`` runs a CLI, ``count`` estimates tokens (nothing runs), ``models`` and ``model``
    list the models or give one in the API's ``ModelShape``."""

    method: Literal["GET", "POST"]
    path: str
    kind: RouteKind
    read: Reader | None = None  # call and count routes
    prefixes: tuple[str, ...] = ("/v1", "")


@dataclass(frozen=True)
class ModelShape:
    """The models as the API lists them."""

    listing: Callable[[list[ModelCard]], dict[str, Any]]
    one: Callable[[ModelCard], dict[str, Any]]
    model_id: Callable[[str], str] = str  # the path's model name -> the gateway's model id


@dataclass(frozen=True)
class WireFormat:
    """One API: its routes, how it reads requests (``Route.read``), renders errors, lists
    models, takes API keys and describes itself in ``/openapi.json``. ``name`` is its one
    name: the log's ``api`` field and the metrics' ``endpoint`` label."""

    name: str
    routes: tuple[Route, ...]
    claims: Callable[[str, Mapping[str, str]], bool]  # (path, headers): its error body there
    error_status: Callable[[APIError], int]
    error_body: Callable[[APIError], dict[str, Any]]  # before the stream head (``Format.fail``
    # renders one after it)
    log_event: str  # the event name of the request's log line
    models: ModelShape | None = None
    models_claim: Callable[[Mapping[str, str]], bool] | None = None  # the shared models path
    credentials: Callable[[web.Request], list[str]] = no_credentials  # beyond Bearer, x-api-key
    cors_headers: tuple[str, ...] = ()  # request headers its browser clients send (preflight)
    openapi_models: ModelSchemas = ()  # its error body's model too (``error_model``)
    error_model: type[BaseModel] | None = None  # the schema of ``error_body`` in OpenAPI
    openapi_paths: Callable[[Refs], dict[str, Any]] = no_paths
    fallback: bool = False  # the body of paths no entry claims (one entry is)


def under(*roots: str) -> Callable[[str], bool]:
    """Whether a path is one of ``roots`` or below one: a ``claims`` building block."""

    def test(path: str) -> bool:
        return any(path == r or path.startswith(r + "/") for r in roots)

    return test
