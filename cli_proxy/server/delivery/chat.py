"""Chat completions: a ``chat.completion`` body, or its ``chat.completion.chunk`` stream."""

from __future__ import annotations

from typing import Any

from cli_proxy.plan.spec import ResponseIds
from cli_proxy.protocol import ChatCompletionRequest
from cli_proxy.read.answer_events import (
    AnswerEvent,
    ContentDelta,
    ReasoningDelta,
    ToolCallStart,
)
from cli_proxy.server.delivery import Answer, Segment
from cli_proxy.server.errors import APIError
from cli_proxy.server.sse import DONE, KEEPALIVE, SSE_MEDIA_TYPE, encode
from cli_proxy.server.wire.chat import (
    ChatCompletion,
    Choice,
    ResponseFunction,
    ResponseMessage,
    ResponseToolCall,
    chat_error_body,
)


class ChatFormat:
    """``chat.completion`` and its chunks; reasoning as ``reasoning_content`` (the vLLM,
    DeepSeek and LiteLLM convention) when the gateway's ``reasoning_output`` is on."""

    media_type = SSE_MEDIA_TYPE
    keepalive = KEEPALIVE

    def __init__(self, req: ChatCompletionRequest, ids: ResponseIds, reasoning: bool) -> None:
        self.model = req.model
        self.reasoning = reasoning
        self.include_usage = bool(req.stream_options and req.stream_options.include_usage)
        self.base = {
            "id": ids.completion_id,
            "object": "chat.completion.chunk",
            "created": ids.created,
            "model": req.model,
            "system_fingerprint": None,
        }

    def body(self, answer: Answer) -> dict[str, Any]:
        end = answer.end
        calls = [
            ResponseToolCall(id=s.call_id, function=ResponseFunction(name=s.name, arguments=s.text))
            for s in answer.complete_calls()
        ]
        text = answer.text("text")
        message = ResponseMessage(content=text or None, tool_calls=calls or None)
        if not calls and not text:
            message.content = ""
        body = ChatCompletion(
            id=end.ids.completion_id,
            created=end.ids.created,
            model=self.model,
            choices=[Choice(message=message, finish_reason=end.finish_reason)],  # type: ignore[arg-type]
            usage=end.usage,
        ).model_dump()
        reasoning = answer.text("reasoning")
        if reasoning:
            body["choices"][0]["message"]["reasoning_content"] = reasoning
        return body

    def _chunk(self, delta: dict[str, Any], finish_reason: str | None = None) -> bytes:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
        payload: dict[str, Any] = {**self.base, "choices": [choice]}
        if self.include_usage:
            payload["usage"] = None
        return encode(payload)

    def head(self) -> list[bytes]:
        return [self._chunk({"role": "assistant", "content": ""})]

    def event(self, answer: Answer, seg: Segment, new: bool, ev: AnswerEvent) -> list[bytes]:
        if isinstance(ev, ContentDelta):
            return [self._chunk({"content": ev.text})]
        if isinstance(ev, ReasoningDelta):
            return [self._chunk({"reasoning_content": ev.text})]
        if isinstance(ev, ToolCallStart):
            call = {
                "index": ev.index,
                "id": ev.id,
                "type": "function",
                "function": {"name": ev.name, "arguments": ""},
            }
            return [self._chunk({"tool_calls": [call]})]
        args = {"index": ev.index, "function": {"arguments": ev.fragment}}
        return [self._chunk({"tool_calls": [args]})]

    def tail(self, answer: Answer) -> list[bytes]:
        end = answer.end
        out = [self._chunk({}, end.finish_reason)]
        if self.include_usage:
            out.append(encode({**self.base, "choices": [], "usage": end.usage.model_dump()}))
        return [*out, DONE]

    def fail(self, answer: Answer, err: APIError) -> list[bytes]:
        return [encode(chat_error_body(err))]
