"""The one conversation every wire format is translated into (OpenAI chat completions' request,
read as is on the chat API) and the usage counts every format reports; the chat API's answer,
model list and error models are ``server/wire/chat.py``'s.

Requests accept and ignore unknown fields because clients send vendor extras
through ``extra_body``; responses are serialized with every key OpenAI SDKs and
LangChain read, including explicit nulls.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator


class _Lenient(BaseModel):
    model_config = ConfigDict(extra="ignore")


# ---------------------------------------------------------------- requests


class TextPart(_Lenient):
    type: Literal["text"]
    text: str


class ImageURL(_Lenient):
    url: str
    detail: str | None = None


class ImagePart(_Lenient):
    type: Literal["image_url"]
    image_url: ImageURL


class RefusalPart(_Lenient):
    type: Literal["refusal"]
    refusal: str


class OtherPart(_Lenient):
    """input_audio, file and anything newer: rendered as a placeholder."""

    type: str


ContentPart = TextPart | ImagePart | RefusalPart | OtherPart
Content = str | list[ContentPart] | None


class FunctionCall(_Lenient):
    name: str
    arguments: str = "{}"


class ToolCall(_Lenient):
    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class SystemMessage(_Lenient):
    role: Literal["system", "developer"]
    content: Content
    name: str | None = None


class UserMessage(_Lenient):
    role: Literal["user"]
    content: Content
    name: str | None = None


class AssistantMessage(_Lenient):
    role: Literal["assistant"]
    content: Content = None
    name: str | None = None
    tool_calls: list[ToolCall] | None = None
    function_call: FunctionCall | None = None  # legacy single call


class ToolMessage(_Lenient):
    role: Literal["tool"]
    content: Content
    tool_call_id: str


class FunctionMessage(_Lenient):
    """Legacy ``role: function`` result, matched by name only."""

    role: Literal["function"]
    content: Content
    name: str


Message = Annotated[
    SystemMessage | UserMessage | AssistantMessage | ToolMessage | FunctionMessage,
    Field(discriminator="role"),
]


class FunctionDef(_Lenient):
    name: str = Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_.:-]+$")
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None

    @field_validator("parameters")
    @classmethod
    def _schema_is_object(cls, v: dict[str, Any] | None) -> dict[str, Any] | None:
        if v is not None and "type" in v and v["type"] != "object":
            raise ValueError("function parameters must be a JSON Schema of type 'object'")
        return v


class Tool(_Lenient):
    type: Literal["function"]
    function: FunctionDef


class NamedFunction(_Lenient):
    name: str


class NamedToolChoice(_Lenient):
    type: Literal["function"]
    function: NamedFunction


ToolChoice = Literal["none", "auto", "required"] | NamedToolChoice


class StreamOptions(_Lenient):
    include_usage: bool | None = None


class ResponseFormat(_Lenient):
    type: Literal["text", "json_object", "json_schema"]
    json_schema: dict[str, Any] | None = None


ReasoningEffort = Literal["none", "minimal", "low", "medium", "high", "xhigh"]
"""OpenAI's reasoning levels; each backend maps them to what its CLI offers."""


MODEL_NAME = r"^[A-Za-z0-9][A-Za-z0-9._:@+-]*(?:/[A-Za-z0-9][A-Za-z0-9._:@+-]*)*$"
"""A model name is a name: neither it nor any ``/``-separated part of it (``gemini/NAME``
hands NAME to the CLI) starts with "-", so no part of it could be read as a CLI option
(the backends also pass it as one ``--model=NAME`` word); no NUL, control characters or
spaces; at most 128 characters (the fields' ``max_length``)."""


class ChatCompletionRequest(_Lenient):
    model: str = Field(min_length=1, max_length=128, pattern=MODEL_NAME)
    messages: list[Message] = Field(min_length=1)
    tools: list[Tool] | None = None
    tool_choice: ToolChoice | None = None
    parallel_tool_calls: bool | None = None
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    response_format: ResponseFormat | None = None
    reasoning_effort: ReasoningEffort | None = None
    user: str | None = None
    # Sampling knobs the CLIs cannot honour; accepted so clients don't break.
    temperature: float | None = None
    top_p: float | None = None
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    n: int | None = Field(default=None, ge=1, le=1)
    stop: str | list[str] | None = None
    seed: int | None = None


# --------------------------------------------------------------- responses


class PromptTokensDetails(BaseModel):
    cached_tokens: int = 0  # read from the provider's prompt cache (included in prompt_tokens)


class CompletionTokensDetails(BaseModel):
    reasoning_tokens: int = 0  # thinking tokens, included in completion_tokens, where reported


class Usage(BaseModel):
    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    prompt_tokens_details: PromptTokensDetails = Field(default_factory=PromptTokensDetails)
    completion_tokens_details: CompletionTokensDetails = Field(
        default_factory=CompletionTokensDetails
    )
