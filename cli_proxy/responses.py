"""The OpenAI Responses API on top of the chat-completion pipeline.

Newer clients (the Agents SDK's default model, Codex) speak ``POST /v1/responses``. A
request is converted into a ``ChatCompletionRequest`` (pure), runs through the very same
prompt -> CLI -> answer-event pipeline, and the answer events are rebuilt into a Response
object or its stream of typed events by ``ResponseBuilder``: one builder serves both paths,
so the streamed and the non-streamed answer cannot differ. The gateway is stateless:
``previous_response_id`` is refused with a clear error rather than silently ignored.
"""

from __future__ import annotations

import json
import re
import secrets
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .answer import AnswerEvent, ContentDelta, ReasoningDelta, ToolCallArgs, ToolCallStart
from .errors import APIError, from_validation_error
from .protocol import MODEL_NAME, ChatCompletionRequest, Usage
from .sse import encode


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


def to_chat_request(req: ResponsesRequest) -> ChatCompletionRequest:
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


Status = Literal["in_progress", "completed", "incomplete", "failed"]


def _new_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(12)}"


class ResponseBuilder:
    """Turns answer events into Responses stream events and the final Response object."""

    def __init__(
        self, req: ResponsesRequest, chat: ChatCompletionRequest, response_id: str, created: int
    ) -> None:
        self.req = req
        self.chat = chat
        self.id = "resp_" + response_id.removeprefix("chatcmpl-")
        self.created = created
        self.output: list[dict[str, Any]] = []
        self.seq = 0
        self._open: dict[str, Any] | None = None  # the item being streamed
        self._calls: dict[int, dict[str, Any]] = {}  # tool-call index -> item
        self.final: dict[str, Any] = {}

    # events ---------------------------------------------------------------------

    def _event(self, kind: str, **fields: Any) -> dict[str, Any]:
        event = {"type": kind, "sequence_number": self.seq, **fields}
        self.seq += 1
        return event

    def start(self) -> list[dict[str, Any]]:
        snapshot = self.response("in_progress", Usage())
        return [
            self._event("response.created", response=snapshot),
            self._event("response.in_progress", response=snapshot),
        ]

    def feed(self, ev: AnswerEvent) -> list[dict[str, Any]]:
        if isinstance(ev, ReasoningDelta):
            return []  # reasoning items: not yet
        if isinstance(ev, ContentDelta):
            out = []
            if self._open is None or self._open["type"] != "message":
                out += self._close()
                out += self._open_message()
            item = self._open
            assert item is not None
            item["content"][0]["text"] += ev.text
            return [
                *out,
                self._event(
                    "response.output_text.delta",
                    item_id=item["id"],
                    output_index=self._index(item),
                    content_index=0,
                    delta=ev.text,
                    logprobs=[],
                ),
            ]
        if isinstance(ev, ToolCallStart):
            out = self._close()
            item = {
                "id": _new_id("fc"),
                "type": "function_call",
                "call_id": ev.id,
                "name": ev.name,
                "arguments": "",
                "status": "in_progress",
            }
            self.output.append(item)
            self._open = self._calls[ev.index] = item
            added = self._event(
                "response.output_item.added", output_index=self._index(item), item=dict(item)
            )
            return [*out, added]
        assert isinstance(ev, ToolCallArgs)
        item = self._calls[ev.index]
        item["arguments"] += ev.fragment
        return [
            self._event(
                "response.function_call_arguments.delta",
                item_id=item["id"],
                output_index=self._index(item),
                delta=ev.fragment,
            )
        ]

    def finish(
        self, usage: Usage, finish_reason: str, incomplete: set[int] | None = None
    ) -> list[dict[str, Any]]:
        """Close the open item; ``self.final`` is then the whole Response. Calls cut off
        by the output limit (``incomplete``: their indexes) end ``incomplete`` and are left
        out of the final output: a client must not run a half-made call."""
        for index in incomplete or ():
            if index in self._calls:
                self._calls[index]["status"] = "incomplete"
        out = self._close()
        status: Status = "incomplete" if finish_reason == "length" else "completed"
        self.final = self.response(status, usage)
        out.append(self._event(f"response.{status}", response=self.final))
        return out

    def fail(self, err: APIError, usage: Usage) -> list[dict[str, Any]]:
        """The answer broke off after the stream started: ``response.failed`` (what Codex
        and other Responses clients act on), then an ``error`` event that also carries the
        chat-style ``error`` object, on which openai-python raises ``APIError``."""
        if self._open is not None:
            self._open["status"] = "incomplete"
            self._open = None
        self.final = self.response("failed", usage, err)
        return [
            self._event("response.failed", response=self.final),
            self._event("error", code=err.code, message=err.message, param=err.param, **err.body()),
        ]

    def _index(self, item: dict[str, Any]) -> int:
        return next(i for i, it in enumerate(self.output) if it is item)

    def _open_message(self) -> list[dict[str, Any]]:
        item: dict[str, Any] = {
            "id": _new_id("msg"),
            "type": "message",
            "role": "assistant",
            "status": "in_progress",
            "content": [{"type": "output_text", "text": "", "annotations": []}],
        }
        self.output.append(item)
        self._open = item
        idx = self._index(item)
        return [
            self._event(
                "response.output_item.added",
                output_index=idx,
                item={**item, "content": []},
            ),
            self._event(
                "response.content_part.added",
                item_id=item["id"],
                output_index=idx,
                content_index=0,
                part={"type": "output_text", "text": "", "annotations": []},
            ),
        ]

    def _close(self) -> list[dict[str, Any]]:
        item, self._open = self._open, None
        if item is None:
            return []
        idx = self._index(item)
        if item["status"] == "incomplete":
            return [self._event("response.output_item.done", output_index=idx, item=_copy(item))]
        item["status"] = "completed"
        if item["type"] == "message":
            part = item["content"][0]
            return [
                self._event(
                    "response.output_text.done",
                    item_id=item["id"],
                    output_index=idx,
                    content_index=0,
                    text=part["text"],
                    logprobs=[],
                ),
                self._event(
                    "response.content_part.done",
                    item_id=item["id"],
                    output_index=idx,
                    content_index=0,
                    part=dict(part),
                ),
                self._event("response.output_item.done", output_index=idx, item=_copy(item)),
            ]
        return [
            self._event(
                "response.function_call_arguments.done",
                item_id=item["id"],
                output_index=idx,
                name=item["name"],
                arguments=item["arguments"],
            ),
            self._event("response.output_item.done", output_index=idx, item=_copy(item)),
        ]

    # the object ---------------------------------------------------------------

    def response(self, status: Status, usage: Usage, err: APIError | None = None) -> dict[str, Any]:
        tools = [
            {"type": "function", "strict": t.function.strict, **_fn(t.function.model_dump())}
            for t in self.chat.tools or []
        ]
        return {
            "id": self.id,
            "object": "response",
            "created_at": self.created,
            "status": status,
            "model": self.req.model,
            "output": [_copy(item) for item in self.output if not _cut_call(item)]
            if status != "in_progress"
            else [],
            "output_text": "".join(
                c["text"] for it in self.output if it["type"] == "message" for c in it["content"]
            )
            if status != "in_progress"
            else "",
            "error": {"code": _failure_code(err), "message": err.message}
            if err is not None
            else None,
            "incomplete_details": {"reason": "max_output_tokens"}
            if status == "incomplete"
            else None,
            "instructions": self.req.instructions,
            "metadata": self.req.metadata or {},
            "parallel_tool_calls": self.req.parallel_tool_calls is not False,
            "tool_choice": self.req.tool_choice or "auto",
            "tools": tools,
            "temperature": self.req.temperature,
            "top_p": self.req.top_p,
            "max_output_tokens": self.req.max_output_tokens,
            "previous_response_id": None,
            "reasoning": None,
            "store": False,
            "text": {"format": (self.req.text or {}).get("format") or {"type": "text"}},
            "truncation": "disabled",
            "user": self.req.user,
            "usage": {
                "input_tokens": usage.prompt_tokens,
                "input_tokens_details": {
                    "cached_tokens": usage.prompt_tokens_details.cached_tokens,
                    "cache_write_tokens": 0,
                },
                "output_tokens": usage.completion_tokens,
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": usage.total_tokens,
            }
            if status != "in_progress"
            else None,
        }


def _cut_call(item: dict[str, Any]) -> bool:
    return bool(item["type"] == "function_call" and item["status"] == "incomplete")


def _failure_code(err: APIError) -> str:
    """``Response.error.code`` is a closed set; the precise code stays on the error event."""
    if err.status == 429:
        return "rate_limit_exceeded"
    return "invalid_prompt" if err.status == 400 else "server_error"


def _fn(fn: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": fn["name"],
        "description": fn.get("description"),
        "parameters": fn.get("parameters") or {"type": "object", "properties": {}},
    }


def _copy(item: dict[str, Any]) -> dict[str, Any]:
    return json.loads(json.dumps(item))  # type: ignore[no-any-return]


def encode_event(event: dict[str, Any]) -> bytes:
    """A typed Responses event: its ``event:`` line, then the usual ``data:`` line."""
    return f"event: {event['type']}\n".encode() + encode(event)
