"""The OpenAI Responses API on top of the chat-completion pipeline: the request side.

Newer clients (the Agents SDK's default model, Codex) speak ``POST /v1/responses``. A
request is converted into a ``ChatCompletionRequest`` (pure) and runs through the very same
prompt -> CLI -> answer-event pipeline; ``delivery/responses.py`` rebuilds the answer as a
Response object or its stream of typed events. The gateway is stateless:
``previous_response_id`` is refused with a clear error rather than silently ignored.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from cli_proxy.protocol import MODEL_NAME, ChatCompletionRequest
from cli_proxy.server import apidoc
from cli_proxy.server.errors import APIError
from cli_proxy.server.wire.chat import ErrorBody
from cli_proxy.server.wire.fields import from_validation_error


class ResponsesRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")

    model: str = Field(min_length=1, max_length=128, pattern=MODEL_NAME)
    input: str | list[dict[str, Any]]
    instructions: str | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    stream: bool | None = False
    previous_response_id: str | None = None
    conversation: str | dict[str, Any] | None = None
    text: dict[str, Any] | None = None
    max_output_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    metadata: dict[str, Any] | None = None
    user: str | None = None
    reasoning: dict[str, Any] | None = None


# -------------------------------------------------------------------- request side


def responses_to_chat(req: ResponsesRequest) -> ChatCompletionRequest:
    """Responses input items -> chat messages; consecutive function calls form one turn."""
    if req.previous_response_id:
        raise APIError(
            400,
            "previous_response_id is not supported: cli-proxy keeps no state between calls; "
            "send the whole conversation in 'input'",
            param="previous_response_id",
            code="unsupported_parameter",
        )
    if req.conversation is not None:
        raise APIError(
            400,
            "conversation is not supported: cli-proxy keeps no state between calls; "
            "send the whole conversation in 'input'",
            param="conversation",
            code="unsupported_parameter",
        )
    messages: list[dict[str, Any]] = []
    if req.instructions:
        messages.append({"role": "system", "content": req.instructions})
    items = [{"role": "user", "content": req.input}] if isinstance(req.input, str) else req.input
    for i, item in enumerate(items):
        kind = item.get("type", "message")
        if kind == "message":
            role = item.get("role")
            if role not in ("user", "assistant", "system", "developer"):
                raise APIError(400, f"unsupported role {role!r}", param=f"input[{i}].role")
            messages.append({"role": role, "content": _text(item.get("content"), i)})
        elif kind == "function_call":
            call = {
                "id": str(item.get("call_id") or item.get("id") or f"call_{i}"),
                "type": "function",
                "function": {
                    "name": str(item.get("name") or ""),
                    "arguments": str(item.get("arguments") or "{}"),
                },
            }
            last = messages[-1] if messages else None
            if last is not None and last["role"] == "assistant" and "tool_calls" in last:
                last["tool_calls"].append(call)
            else:
                messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            output = item.get("output")
            messages.append(
                {
                    "role": "tool",
                    "tool_call_id": str(item.get("call_id") or ""),
                    "content": output if isinstance(output, str) else _text(output, i),
                }
            )
        elif kind in ("reasoning", "item_reference"):
            continue  # reasoning summaries of other models; references need server state
        else:
            raise APIError(400, f"unsupported input item type {kind!r}", param=f"input[{i}].type")
    if not messages:
        raise APIError(400, "input must contain at least one item", param="input")
    chat: dict[str, Any] = {"model": req.model, "messages": messages, "stream": req.stream}
    if req.text and req.text.get("format") is not None:
        chat["response_format"] = _response_format(req.text["format"])
    if req.max_output_tokens is not None:
        chat["max_tokens"] = req.max_output_tokens
    for knob in ("temperature", "top_p", "user"):
        if getattr(req, knob) is not None:
            chat[knob] = getattr(req, knob)
    if req.tools:
        chat["tools"] = [_tool(t, i) for i, t in enumerate(req.tools)]
    if req.tool_choice is not None:
        chat["tool_choice"] = _tool_choice(req.tool_choice)
    if req.parallel_tool_calls is not None:
        chat["parallel_tool_calls"] = req.parallel_tool_calls
    if req.reasoning and req.reasoning.get("effort") is not None:
        chat["reasoning_effort"] = req.reasoning["effort"]
    try:
        return ChatCompletionRequest.model_validate(chat)
    except ValidationError as exc:
        err = from_validation_error(exc)
        if err.param and err.param.startswith("tools["):
            # chat nests a tool under "function"; name the field as the client sent it
            new = re.sub(r"^(tools\[\d+\])\.function\b", r"\1", err.param)
            err.message = err.message.replace(f"'{err.param}'", f"'{new}'")
            err.param = new
        raise err from None


def _response_format(fmt: Any) -> dict[str, Any]:
    """``text.format`` -> chat ``response_format`` (structured output, JSON mode)."""
    kind = fmt.get("type") if isinstance(fmt, dict) else None
    if kind == "json_schema":
        schema = {k: fmt[k] for k in ("name", "schema", "strict", "description") if k in fmt}
        return {"type": "json_schema", "json_schema": schema}
    if kind in ("text", "json_object"):
        return {"type": kind}
    raise APIError(400, f"unsupported text.format {kind!r}", param="text.format.type")


def _text(content: Any, index: int) -> str | list[dict[str, Any]]:
    """Responses content parts -> chat content parts (text kept, images as image parts)."""
    if content is None or isinstance(content, str):
        return content or ""
    if not isinstance(content, list):
        raise APIError(400, "content must be a string or a list", param=f"input[{index}].content")
    parts: list[dict[str, Any]] = []
    for part in content:
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in ("input_text", "output_text", "text"):
            parts.append({"type": "text", "text": str(part.get("text", ""))})
        elif kind == "refusal":
            parts.append({"type": "text", "text": str(part.get("refusal", ""))})
        elif kind == "input_image":
            url = part.get("image_url")
            if not isinstance(url, str) or not url:
                raise APIError(
                    400,
                    "input_image needs image_url (a data URL, or an http(s) URL when the "
                    "gateway fetches images); file_id is not supported: there is no Files API",
                    param=f"input[{index}].content",
                    code="invalid_image",
                )
            image: dict[str, Any] = {"url": url}
            if isinstance(part.get("detail"), str):
                image["detail"] = part["detail"]
            parts.append({"type": "image_url", "image_url": image})
        else:
            parts.append({"type": str(kind)})
    return parts


def _tool(tool: dict[str, Any], index: int) -> dict[str, Any]:
    if tool.get("type") != "function":
        raise APIError(
            400,
            f"tool type {tool.get('type')!r} is not supported: only function tools "
            "(the CLIs' own tools are disabled)",
            param=f"tools[{index}].type",
        )
    fn = {k: tool[k] for k in ("name", "description", "parameters", "strict") if k in tool}
    return {"type": "function", "function": fn}


def _tool_choice(choice: str | dict[str, Any]) -> str | dict[str, Any]:
    if isinstance(choice, dict):
        if choice.get("type") == "function":
            return {"type": "function", "function": {"name": choice.get("name")}}
        raise APIError(400, f"unsupported tool_choice {choice!r}", param="tool_choice")
    return choice


# ------------------------------------------------------------------- response side


# ------------------------------------------------------------------ what the edge writes


class ResponseObject(BaseModel):
    """The Responses API ``Response`` object, as far as the gateway fills it (the keys
    every client reads; the rest follow OpenAI's reference)."""

    model_config = ConfigDict(extra="allow")

    id: str
    object: Literal["response"]
    created_at: int
    status: Literal["completed", "incomplete", "failed", "in_progress"]
    model: str
    output: list[dict[str, Any]]
    output_text: str
    error: dict[str, Any] | None
    incomplete_details: dict[str, Any] | None
    usage: dict[str, Any] | None


class ResponseStreamEvent(BaseModel):
    """One event of a streamed response: its ``type`` is also the SSE ``event:`` name."""

    model_config = ConfigDict(extra="allow")

    type: str
    sequence_number: int


OPENAPI_MODELS: apidoc.ModelSchemas = (
    (ResponsesRequest, "validation"),
    (ResponseObject, "serialization"),
    (ResponseStreamEvent, "serialization"),
)


def responses_openapi_paths(ref: dict[type[BaseModel], Any]) -> dict[str, Any]:
    """``/v1/responses`` (its errors: OpenAI's body)."""
    return {
        "/v1/responses": apidoc.call(
            ref,
            "createResponse",
            "Create a model response (Responses API, stateless)",
            (ResponsesRequest, ResponseObject),
            "typed events ('event: response.created' ... 'event: response.completed'); a "
            "failure after the first event is 'response.failed' then an 'error' event",
            apidoc.sse(apidoc.json_text(ref[ResponseStreamEvent]), {"type": "string"}),
            apidoc.errors(apidoc.CALL_ERRORS, ref[ErrorBody]),
        ),
    }
