"""Anthropic's Messages API on top of the chat-completion pipeline: the request side, and
its error body.

Claude Code (``ANTHROPIC_BASE_URL``), the ``anthropic`` SDKs, LiteLLM's ``anthropic/``
provider and Agent-SDK apps speak ``POST /v1/messages``. A request is validated here and
converted into a ``ChatCompletionRequest`` (pure), so it runs through the very same prompt
-> CLI -> answer-event pipeline; ``delivery/messages.py`` rebuilds the answer as a Message
or its event stream. This module also holds what the edge writes for the API (error body,
model shape, OpenAPI paths) for its entry in ``formats.py``. What each field becomes, and
what is refused and why: docs/anthropic-api.md.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Annotated, Any, Literal, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    ValidationError,
)

from cli_proxy.protocol import MODEL_NAME, ChatCompletionRequest
from cli_proxy.server import apidoc
from cli_proxy.server.errors import APIError
from cli_proxy.server.wire import server_tools
from cli_proxy.server.wire.chat import ModelCard
from cli_proxy.server.wire.fields import TurnParts, dotted, from_validation_error
from cli_proxy.server.wireformat import under

# ------------------------------------------------------------------ request models


class _Lenient(BaseModel):
    """Unknown keys are accepted and ignored: ``cache_control`` anywhere, ``citations``, and
    whatever a newer client adds."""

    model_config = ConfigDict(extra="ignore")


class TextBlock(_Lenient):
    type: Literal["text"]
    text: str


class Base64Source(_Lenient):
    type: Literal["base64"]
    media_type: str
    data: str


class URLSource(_Lenient):
    type: Literal["url"]
    url: str


class FileSource(_Lenient):
    type: Literal["file"]
    file_id: str


ImageSource = Annotated[Base64Source | URLSource | FileSource, Field(discriminator="type")]


class ImageBlock(_Lenient):
    type: Literal["image"]
    source: ImageSource


class DocumentBlock(_Lenient):
    """Accepted by the model, refused by ``messages_to_chat`` (no CLI channel carries one)."""

    type: Literal["document"]


class ToolUseBlock(_Lenient):
    type: Literal["tool_use"]
    id: str = Field(min_length=1)
    name: str = Field(min_length=1)
    input: dict[str, Any]


class ThinkingBlock(_Lenient):
    """A thinking block sent back: accepted, not shown to the model."""

    type: Literal["thinking"]
    thinking: str = ""
    signature: str | None = None


class RedactedThinkingBlock(_Lenient):
    type: Literal["redacted_thinking"]
    data: str = ""


_KNOWN_TAGS: tuple[str, ...] = ("text", "image", "document", "tool_use", "tool_result")
_KNOWN_TAGS += ("thinking", "redacted_thinking")


class OtherBlock(_Lenient):
    """Any other block type (``server_tool_use``, ``web_search_tool_result``,
    ``search_result``, ``container_upload``, ...): refused by name in ``messages_to_chat``."""

    type: Annotated[str, Field(json_schema_extra={"not": {"enum": list(_KNOWN_TAGS)}})]


def _tag(value: Any) -> str:
    kind = value.get("type") if isinstance(value, dict) else getattr(value, "type", None)
    return kind if kind in _KNOWN_TAGS else "other"


def _part_tag(value: Any) -> str:
    kind = _tag(value)
    return kind if kind in ("text", "image", "document") else "other"


ResultPart = Annotated[
    Annotated[TextBlock, Tag("text")]
    | Annotated[ImageBlock, Tag("image")]
    | Annotated[DocumentBlock, Tag("document")]
    | Annotated[OtherBlock, Tag("other")],
    Discriminator(_part_tag),
]


class ToolResultBlock(_Lenient):
    type: Literal["tool_result"]
    tool_use_id: str = Field(min_length=1)
    content: str | list[ResultPart] | None = None
    is_error: bool | None = None


ContentBlock = Annotated[
    Annotated[TextBlock, Tag("text")]
    | Annotated[ImageBlock, Tag("image")]
    | Annotated[DocumentBlock, Tag("document")]
    | Annotated[ToolUseBlock, Tag("tool_use")]
    | Annotated[ToolResultBlock, Tag("tool_result")]
    | Annotated[ThinkingBlock, Tag("thinking")]
    | Annotated[RedactedThinkingBlock, Tag("redacted_thinking")]
    | Annotated[OtherBlock, Tag("other")],
    Discriminator(_tag),
]


class MessageParam(_Lenient):
    # "system": Claude Code's mid-conversation system turns (beta mid-conversation-system)
    role: Literal["user", "assistant", "system"]
    content: str | list[ContentBlock]


class ToolParam(_Lenient):
    """A client tool (``type`` absent or ``custom``), or a server tool by its ``type``
    (``web_search_20250305``, ``bash_20250124``, ...): refused by name."""

    type: str | None = None
    name: str = Field(min_length=1)
    description: str | None = None
    input_schema: dict[str, Any] | None = None
    strict: bool | None = None


class ToolChoiceParam(_Lenient):
    type: Literal["auto", "any", "tool", "none"]
    name: str | None = None
    disable_parallel_tool_use: bool | None = None


class ThinkingParam(_Lenient):
    type: Literal["enabled", "adaptive", "disabled", "between_tools"]
    budget_tokens: int | None = None
    display: Literal["summarized", "omitted"] | None = None


class OutputConfigParam(_Lenient):
    effort: Literal["low", "medium", "high", "xhigh", "max"] | None = None
    format: dict[str, Any] | None = None


class MessagesRequest(_Lenient):
    model: str = Field(min_length=1, max_length=128, pattern=MODEL_NAME)
    max_tokens: int = Field(ge=1)
    messages: list[MessageParam] = Field(min_length=1)
    system: str | list[TextBlock] | None = None
    tools: list[ToolParam] | None = None
    tool_choice: ToolChoiceParam | None = None
    stop_sequences: list[str] | None = None
    stream: bool | None = False
    thinking: ThinkingParam | None = None
    output_config: OutputConfigParam | None = None
    output_format: dict[str, Any] | None = None  # the structured-outputs beta's older name
    # accepted like chat's sampling knobs: the CLIs expose none of them
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    metadata: dict[str, Any] | None = None
    service_tier: str | None = None
    # server-side features: refused when they would change the answer (messages_to_chat)
    mcp_servers: list[dict[str, Any]] | None = None
    container: str | dict[str, Any] | None = None
    context_management: dict[str, Any] | None = None


class CountTokensRequest(MessagesRequest):
    """``POST /v1/messages/count_tokens``: a Messages request without ``max_tokens``."""

    max_tokens: int | None = Field(default=None, ge=1)  # type: ignore[assignment]


# ------------------------------------------------------------------ validation

M = TypeVar("M", bound=BaseModel)

_UNION_NAMES = frozenset({"str", "int", "float", "bool", "dict", "list", "none"})


def checked(model: type[M], data: Any) -> M:
    """``model`` from request data, or the 400 naming the field as the client sent it (the
    most specific of pydantic's errors: a bad block rather than "not a string")."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        errors = exc.errors(include_url=False)
        err = max(errors, key=lambda e: len(_path(e["loc"])))
        param = dotted(_path(err["loc"])) or None
        message = err["msg"]
        if param:
            message = f"Invalid value for '{param}': {message}"
        raise APIError(400, message, param=param, code="invalid_value") from None


def _path(loc: tuple[int | str, ...]) -> list[str]:
    """The loc without pydantic's union member names and block tags."""
    out: list[str] = []
    for i, part in enumerate(loc):
        if isinstance(part, str):
            prev = loc[i - 1] if i else None
            if part in _UNION_NAMES or "[" in part or part[:1].isupper():
                continue
            if isinstance(prev, int) and (part in _KNOWN_TAGS or part == "other"):
                continue  # the block's tag, after its index
            if prev == "source" and part in ("base64", "url", "file"):
                continue
        out.append(str(part))
    return out


# ------------------------------------------------------------------ request -> chat


class Translated:
    """The chat request, and where each chat message (and content part) came from, so an
    error found later (an image the planner refuses) names the field the client sent."""

    def __init__(
        self,
        request: ChatCompletionRequest,
        origins: dict[str, str],
        dropped: list[server_tools.Dropped] | None = None,
    ) -> None:
        self.request = request
        self.origins = origins
        self.dropped = dropped or []  # server tools left out (wire/server_tools.py)

    def param(self, chat_param: str | None) -> str | None:
        """A chat field path (``messages[3].content[1].image_url.url``) as the client's."""
        return _origin(self.origins, chat_param)


def _origin(origins: dict[str, str], chat_param: str | None) -> str | None:
    if not chat_param:
        return chat_param
    for key in sorted(origins, key=len, reverse=True):
        if chat_param == key or chat_param.startswith((key + ".", key + "[")):
            rest = re.sub(r"^\.image_url\.url$", ".source", chat_param[len(key) :])
            return origins[key] + rest
    return chat_param


_SERVER_TOOL_HINT = (
    "server tools are not supported: the gateway runs each CLI sealed, with its own tools "
    "off, so nothing runs a search, a shell or an editor on the server's side; declare a "
    "client tool (name, description, input_schema) and run it yourself"
)
_DOCUMENT_HINT = (
    "document blocks are not supported: no CLI channel the gateway uses carries a document; "
    "send its text as a text block"
)


def thinking_shown(req: MessagesRequest) -> bool:
    """Whether the answer carries ``thinking`` blocks: the request asks for thinking
    (``enabled`` or ``adaptive``) and not with ``display: omitted``."""
    t = req.thinking
    return t is not None and t.type in ("enabled", "adaptive") and t.display != "omitted"


_EFFORT = {"low": "low", "medium": "medium", "high": "high", "xhigh": "xhigh", "max": "xhigh"}


def messages_to_chat(req: MessagesRequest) -> Translated:
    """The Messages request as the gateway's one conversation model (pure). Server tools
    (a ``type`` other than ``custom``) are left out and named in ``dropped``
    (wire/server_tools.py); a ``tool_choice`` forcing one is refused."""
    if req.mcp_servers:
        raise APIError(
            400,
            "mcp_servers is not supported: the gateway does not call MCP servers for the model; "
            "declare their tools as client tools and run them yourself",
            param="mcp_servers",
            code="unsupported_parameter",
        )
    messages: list[dict[str, Any]] = []
    origins: dict[str, str] = {}
    if req.system:
        origins[f"messages[{len(messages)}]"] = "system"
        messages.append({"role": "system", "content": _system(req.system)})
    for i, msg in enumerate(req.messages):
        where = f"messages[{i}]"
        if isinstance(msg.content, str):
            origins[f"messages[{len(messages)}]"] = where
            messages.append({"role": msg.role, "content": msg.content})
        elif msg.role == "assistant":
            turn = _assistant(msg.content, where)
            if turn is not None:
                origins[f"messages[{len(messages)}]"] = where
                messages.append(turn)
        else:
            _user(msg.role, msg.content, where, messages, origins)
    chat: dict[str, Any] = {"model": req.model, "messages": messages, "stream": req.stream}
    chat["max_tokens"] = req.max_tokens
    for knob in ("temperature", "top_p"):
        if getattr(req, knob) is not None:
            chat[knob] = getattr(req, knob)
    if req.stop_sequences:
        chat["stop"] = req.stop_sequences
    user = (req.metadata or {}).get("user_id")
    if isinstance(user, str):
        chat["user"] = user
    dropped: dict[str, server_tools.Dropped] = {}  # by the server tool's name
    if req.tools:
        tools: list[dict[str, Any]] = []
        for i, t in enumerate(req.tools):
            if t.type not in (None, "custom"):
                dropped[t.name] = server_tools.Dropped(t.type, f"tools[{i}].type")
                continue
            origins[f"tools[{len(tools)}]"] = f"tools[{i}]"
            tools.append(_messages_tool(t, i))
        if tools:
            chat["tools"] = tools
    if req.tool_choice is not None:
        choice = req.tool_choice
        if choice.type == "tool" and choice.name in dropped:
            raise server_tools.forced(dropped[choice.name].name, "tool_choice.name")
        if choice.type in ("any", "tool") and "tools" not in chat and dropped:
            raise server_tools.forced(next(iter(dropped.values())).name, "tool_choice.type")
        if choice.type == "tool":
            if not choice.name:
                raise APIError(400, "tool_choice of type 'tool' needs a name", param="tool_choice")
            chat["tool_choice"] = {"type": "function", "function": {"name": choice.name}}
        else:
            chat["tool_choice"] = {"auto": "auto", "any": "required", "none": "none"}[choice.type]
        if choice.disable_parallel_tool_use:
            chat["parallel_tool_calls"] = False
    effort = req.output_config.effort if req.output_config else None
    if effort is not None:
        chat["reasoning_effort"] = _EFFORT[effort]
    fmt = (req.output_config.format if req.output_config else None) or req.output_format
    if fmt is not None:
        chat["response_format"] = _messages_text_format(fmt)
    try:
        request = ChatCompletionRequest.model_validate(chat)
    except ValidationError as exc:
        raise _chat_error(exc, origins) from None
    return Translated(request, origins, list(dropped.values()))


def _chat_error(exc: ValidationError, origins: dict[str, str]) -> APIError:
    """A chat-model refusal of the translated request, naming the client's field."""
    err = from_validation_error(exc)
    if err.param:
        new = re.sub(r"^(tools\[\d+\])\.function\.parameters\b", r"\1.input_schema", err.param)
        new = re.sub(r"^(tools\[\d+\])\.function\b", r"\1", new)
        new = _origin(origins, new) or new
        err.message = err.message.replace(f"'{err.param}'", f"'{new}'")
        err.param = new
    return err


def _system(system: str | list[TextBlock]) -> str | list[dict[str, Any]]:
    if isinstance(system, str):
        return system
    return [{"type": "text", "text": b.text} for b in system]


def _assistant(blocks: list[Any], where: str) -> dict[str, Any] | None:
    """An assistant turn: its text, and its tool_use blocks as calls; thinking is dropped."""
    texts: list[dict[str, Any]] = []
    calls: list[dict[str, Any]] = []
    for j, block in enumerate(blocks):
        if isinstance(block, TextBlock):
            texts.append({"type": "text", "text": block.text})
        elif isinstance(block, ToolUseBlock):
            arguments = json.dumps(block.input, ensure_ascii=False, separators=(",", ":"))
            fn = {"name": block.name, "arguments": arguments}
            calls.append({"id": block.id, "type": "function", "function": fn})
        elif isinstance(block, ThinkingBlock | RedactedThinkingBlock):
            continue  # accepted, not shown to the model (another model's signed thoughts)
        else:
            raise _refused(block, f"{where}.content[{j}]", "assistant")
    if not texts and not calls:
        return None
    turn: dict[str, Any] = {"role": "assistant", "content": texts or None}
    if calls:
        turn["tool_calls"] = calls
    return turn


def _user(
    role: str,
    blocks: list[Any],
    where: str,
    messages: list[dict[str, Any]],
    origins: dict[str, str],
) -> None:
    """A user (or system) turn: its tool results become tool messages, in place; the rest
    one turn of text and image parts between them."""
    turn = TurnParts(role, where, messages, origins)
    for j, block in enumerate(blocks):
        here = f"{where}.content[{j}]"
        if isinstance(block, ToolResultBlock) and role == "user":
            turn.flush()
            n = len(messages)
            origins[f"messages[{n}]"] = here
            content, sources = _result_content(block, here)
            for k, origin in enumerate(sources):
                origins[f"messages[{n}].content[{k}]"] = origin
            messages.append({"role": "tool", "tool_call_id": block.tool_use_id, "content": content})
        elif isinstance(block, TextBlock):
            turn.add({"type": "text", "text": block.text}, here)
        elif isinstance(block, ImageBlock) and role == "user":
            turn.add(_image(block, here), here)
        else:
            raise _refused(block, here, role)
    turn.flush()


def _result_content(
    block: ToolResultBlock, where: str
) -> tuple[str | list[dict[str, Any]], list[str]]:
    """A tool result's content as chat content (text and image parts), and the origin of
    each part. ``is_error`` is said in words: chat has no such flag."""
    content = block.content
    prefix = "[tool error] " if block.is_error else ""
    if content is None or isinstance(content, str):
        return prefix + (content or ""), []
    parts: list[dict[str, Any]] = []
    sources: list[str] = []
    if prefix:
        parts.append({"type": "text", "text": prefix.strip()})
        sources.append(where)
    for k, part in enumerate(content):
        here = f"{where}.content[{k}]"
        if isinstance(part, TextBlock):
            parts.append({"type": "text", "text": part.text})
        elif isinstance(part, ImageBlock):
            parts.append(_image(part, here))
        else:
            raise _refused(part, here, "tool_result")
        sources.append(here)
    return parts, sources


def _image(block: ImageBlock, where: str) -> dict[str, Any]:
    source = block.source
    if isinstance(source, Base64Source):
        url = f"data:{source.media_type};base64,{source.data}"
    elif isinstance(source, URLSource):
        url = source.url  # fetched only under the image URL policy (image_fetch)
    else:
        raise APIError(
            400,
            "image source 'file' is not supported: there is no Files API here; send the image "
            "as base64 (or a URL, when the gateway fetches images)",
            param=f"{where}.source",
            code="invalid_image",
        )
    return {"type": "image_url", "image_url": {"url": url}}


def _refused(block: Any, where: str, role: str) -> APIError:
    kind = getattr(block, "type", "?")
    if kind == "document":
        return APIError(400, _DOCUMENT_HINT, param=where, code="unsupported_content")
    if kind in ("server_tool_use", "web_search_tool_result", "web_fetch_tool_result") or (
        kind.endswith("_tool_result")
    ):
        return APIError(
            400,
            f"content block type {kind!r} is not supported: {_SERVER_TOOL_HINT}",
            param=where,
            code="unsupported_content",
        )
    return APIError(
        400,
        f"content block type {kind!r} is not supported in {role} content",
        param=where,
        code="unsupported_content",
    )


def _messages_tool(tool: ToolParam, index: int) -> dict[str, Any]:
    if tool.input_schema is None:
        raise APIError(
            400,
            f"tool {tool.name!r} needs an input_schema (a JSON Schema of type 'object')",
            param=f"tools[{index}].input_schema",
        )
    fn: dict[str, Any] = {"name": tool.name, "parameters": tool.input_schema}
    if tool.description is not None:
        fn["description"] = tool.description
    if tool.strict is not None:
        fn["strict"] = tool.strict
    return {"type": "function", "function": fn}


def _messages_text_format(fmt: dict[str, Any]) -> dict[str, Any]:
    """Structured outputs (``output_config.format``): the chat ``json_schema`` format."""
    if fmt.get("type") != "json_schema" or not isinstance(fmt.get("schema"), dict):
        raise APIError(
            400,
            f"unsupported output format {fmt.get('type')!r}: only "
            "{type: 'json_schema', schema: {...}}",
            param="output_config.format",
        )
    return {"type": "json_schema", "json_schema": {"name": "output", "schema": fmt["schema"]}}


# ------------------------------------------------------------------ errors

_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    408: "timeout_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    504: "timeout_error",
    529: "overloaded_error",
}


def messages_error_status(err: APIError) -> int:
    """The status an Anthropic client gets: the gateway's, except that the CLI's provider
    being overloaded is Anthropic's 529 ``overloaded_error`` (the SDKs retry it as they
    retry every 5xx)."""
    return 529 if err.code == "cli_overloaded" else err.status


def messages_error_body(err: APIError) -> dict[str, Any]:
    """``{"type": "error", "error": {"type", "message"}}``, the type by status (4xx not
    listed: ``invalid_request_error``; 5xx: ``api_error``); the field at fault is named in
    the message, as Anthropic's own messages do."""
    status = messages_error_status(err)
    kind = _ERROR_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")
    message = err.message
    if err.param and err.param not in message:
        message = f"{err.param}: {message}"
    return {"type": "error", "error": {"type": kind, "message": message}}


# ------------------------------------------------------------------ what the edge writes


def messages_model_list(cards: list[ModelCard]) -> dict[str, Any]:
    """The models as Anthropic's ``GET /v1/models`` lists them (the anthropic SDK's
    ``models.list()``, which sends ``anthropic-version``)."""
    data = [messages_model_card(c) for c in cards]
    return {
        "data": data,
        "has_more": False,
        "first_id": data[0]["id"] if data else None,
        "last_id": data[-1]["id"] if data else None,
    }


def messages_model_card(card: ModelCard) -> dict[str, Any]:
    """A model as Anthropic's ``GET /v1/models`` lists one."""
    created = datetime.fromtimestamp(card.created, UTC).isoformat().replace("+00:00", "Z")
    return {
        "type": "model",
        "id": card.id,
        "display_name": card.id,
        "created_at": created,
        "lifecycle": "active",
    }


def messages_models_claim(headers: Mapping[str, str]) -> bool:
    """The anthropic SDK's model requests carry ``anthropic-version``."""
    return "anthropic-version" in headers


_OWN_PATHS = under("/v1/messages", "/messages")
_MODEL_PATHS = under("/v1/models", "/models")


def messages_claims(path: str, headers: Mapping[str, str]) -> bool:
    """Errors in this API's body: on ``/v1/messages*`` (and ``/messages*``), and on the models
    paths when the request carries ``anthropic-version``."""
    return _OWN_PATHS(path) or (messages_models_claim(headers) and _MODEL_PATHS(path))


class AnthropicMessage(BaseModel):
    """Anthropic's Messages API answer (``delivery/messages.py``); content blocks are
    ``text``, ``tool_use`` (``input`` an object) and, when asked for, ``thinking``."""

    model_config = ConfigDict(extra="allow")

    id: str
    type: Literal["message"]
    role: Literal["assistant"]
    model: str
    content: list[dict[str, Any]]
    stop_reason: Literal["end_turn", "max_tokens", "stop_sequence", "tool_use"] | None
    stop_sequence: str | None
    usage: dict[str, int]


class AnthropicStreamEvent(BaseModel):
    """One event of a streamed Message: its ``type`` is also the SSE ``event:`` name
    (message_start, content_block_start, ping, content_block_delta, content_block_stop,
    message_delta, message_stop; or error)."""

    model_config = ConfigDict(extra="allow")

    type: str


class TokenCount(BaseModel):
    """``POST /v1/messages/count_tokens``: an estimate (docs/anthropic-api.md)."""

    input_tokens: int


class AnthropicErrorDetail(BaseModel):
    type: str
    message: str


class AnthropicErrorBody(BaseModel):
    """Every error on the Messages API's paths."""

    type: Literal["error"]
    error: AnthropicErrorDetail


OPENAPI_MODELS: apidoc.ModelSchemas = (
    (MessagesRequest, "validation"),
    (CountTokensRequest, "validation"),
    (AnthropicMessage, "serialization"),
    (AnthropicStreamEvent, "serialization"),
    (TokenCount, "serialization"),
    (AnthropicErrorBody, "serialization"),
)
_CALL_ERRORS = (*apidoc.CALL_ERRORS, 529)


def messages_openapi_paths(ref: dict[type[BaseModel], Any]) -> dict[str, Any]:
    """``/v1/messages`` and ``/v1/messages/count_tokens``."""
    error = ref[AnthropicErrorBody]
    return {
        "/v1/messages": apidoc.call(
            ref,
            "createMessage",
            "Create a message (Anthropic's Messages API, on the same pipeline; "
            "docs/anthropic-api.md)",
            (MessagesRequest, AnthropicMessage),
            "Anthropic's events ('event: message_start' ... 'event: message_stop'); a failure "
            "after the first event is an 'error' event",
            apidoc.sse(apidoc.json_text(ref[AnthropicStreamEvent]), {"type": "string"}),
            apidoc.errors(_CALL_ERRORS, error),
        ),
        "/v1/messages/count_tokens": apidoc.post(
            "countTokens",
            "Estimate the input tokens of a Messages request (nothing runs)",
            ref[CountTokensRequest],
            apidoc.answer(
                "The estimate: the rendered prompt's characters / 4",
                {apidoc.JSON: {"schema": ref[TokenCount]}},
            ),
            apidoc.errors(apidoc.COUNT_ERRORS, error),
        ),
    }
