"""The chat completions API (OpenAI's) on the wire: its answer, chunk, model list and error
models, its error body, and its OpenAPI paths. Its request is the one conversation itself
(``protocol.ChatCompletionRequest``, which every layer below reads), validated as is; so
the request model stays below the server, and this module holds what only the edge writes.
OpenAI's error body is also the gateway's default (``formats.py``: the fallback entry)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel

from cli_proxy.protocol import ChatCompletionRequest, Usage
from cli_proxy.server import apidoc
from cli_proxy.server.errors import APIError
from cli_proxy.server.wire.fields import validated


class ResponseFunction(BaseModel):
    name: str
    arguments: str


class ResponseToolCall(BaseModel):
    id: str
    type: Literal["function"] = "function"
    function: ResponseFunction


class ResponseMessage(BaseModel):
    role: Literal["assistant"] = "assistant"
    content: str | None
    refusal: None = None
    tool_calls: list[ResponseToolCall] | None = None


class Choice(BaseModel):
    index: int = 0
    message: ResponseMessage
    finish_reason: Literal["stop", "length", "tool_calls"]
    logprobs: None = None


class ChatCompletion(BaseModel):
    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    choices: list[Choice]
    usage: Usage
    system_fingerprint: str | None = None


class ModelCard(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]


class ErrorDetail(BaseModel):
    message: str
    type: str
    param: str | None = None
    code: str | None = None


class ErrorBody(BaseModel):
    error: ErrorDetail


class ChunkFunction(BaseModel):
    name: str | None = None
    arguments: str | None = None


class ChunkToolCall(BaseModel):
    index: int
    id: str | None = None
    type: Literal["function"] | None = None
    function: ChunkFunction


class ChunkDelta(BaseModel):
    role: Literal["assistant"] | None = None
    content: str | None = None
    reasoning_content: str | None = None  # only with the setting reasoning_output
    tool_calls: list[ChunkToolCall] | None = None


class ChunkChoice(BaseModel):
    index: int
    delta: ChunkDelta
    logprobs: None
    finish_reason: Literal["stop", "length", "tool_calls"] | None


class ChatCompletionChunk(BaseModel):
    """One ``data:`` event of a streamed chat completion (``sse.ChunkBuilder``)."""

    id: str
    object: Literal["chat.completion.chunk"]
    created: int
    model: str
    system_fingerprint: str | None
    choices: list[ChunkChoice]
    usage: Usage | None = None  # only with stream_options.include_usage


def chat_error_body(err: APIError) -> dict[str, Any]:
    """OpenAI's ``{"error": {message, type, param, code}}``."""
    detail = ErrorDetail(message=err.message, type=err.type, param=err.param, code=err.code)
    return ErrorBody(error=detail).model_dump()


def chat_error_status(err: APIError) -> int:
    return err.status


def chat_request(data: dict[str, Any]) -> ChatCompletionRequest:
    return validated(ChatCompletionRequest, data)


def chat_model_list(cards: list[ModelCard]) -> dict[str, Any]:
    return ModelList(data=cards).model_dump()


def chat_model_card(card: ModelCard) -> dict[str, Any]:
    return card.model_dump()


OPENAPI_MODELS: apidoc.ModelSchemas = (
    (ChatCompletionRequest, "validation"),
    (ChatCompletion, "serialization"),
    (ChatCompletionChunk, "serialization"),
    (ModelList, "serialization"),
    (ModelCard, "serialization"),
    (ErrorBody, "serialization"),
)


def chat_openapi_paths(ref: dict[type[BaseModel], Any]) -> dict[str, Any]:
    """``/v1/chat/completions`` and the models (in OpenAI's shape)."""
    error = ref[ErrorBody]
    chunk_events = {"anyOf": [ref[ChatCompletionChunk], error]}
    model_param = {"name": "model", "in": "path", "required": True}
    model_param["schema"] = {"type": "string", "minLength": 1}
    return {
        "/v1/chat/completions": apidoc.call(
            ref,
            "createChatCompletion",
            "Create a chat completion (one CLI process per call)",
            (ChatCompletionRequest, ChatCompletion),
            "'data: {chat.completion.chunk}' events, then 'data: [DONE]'; a failure after "
            "the first event is a 'data: {\"error\": {...}}' event instead",
            apidoc.sse({"anyOf": [{"const": "[DONE]"}, apidoc.json_text(chunk_events)]}),
            apidoc.errors(apidoc.CALL_ERRORS, error),
        ),
        "/v1/models": apidoc.get(
            "listModels",
            "List the models of the enabled backends (in another API's shape when the "
            "request carries that API's header: anthropic-version)",
            apidoc.answer("The model list", {apidoc.JSON: {"schema": ref[ModelList]}}),
            apidoc.errors(apidoc.GET_ERRORS, error),
        ),
        "/v1/models/{model}": apidoc.get(
            "retrieveModel",
            "One model: a listed one, or any name a backend would route",
            apidoc.answer("The model", {apidoc.JSON: {"schema": ref[ModelCard]}}),
            apidoc.errors((*apidoc.GET_ERRORS, 404), error),
            parameters=[model_param],
        ),
    }
