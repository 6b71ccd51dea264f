"""Google's Gemini API (``generateContent``) on top of the chat-completion pipeline: the
request side, its error body and its model list.

google-genai apps, ADK's native ``Gemini`` model class and the Gemini CLI itself
(``GOOGLE_GEMINI_BASE_URL``) speak ``POST /v1beta/models/{model}:generateContent`` (and
``:streamGenerateContent``, ``:countTokens``; google-genai 3.x the same under ``/v1/``). A
request is validated here and converted into a ``ChatCompletionRequest`` (pure), so it runs
through the very same prompt -> CLI -> answer-event pipeline; ``delivery/generate_content.py``
rebuilds the answer as a ``GenerateContentResponse`` or its stream. What each field becomes,
and what is refused and why: docs/gemini-api.md.

Keys come camelCase or snake_case, mixed within one body (the REST API accepts both;
google-genai 3.6 sends ``inlineData: {data, mime_type}``): every model takes both spellings
of each field. What a client wrote itself (function ``args``, a ``response``, schemas'
property names) is never renamed.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

from aiohttp import web
from pydantic import AliasChoices, BaseModel, ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_camel

from cli_proxy.protocol import MODEL_NAME, ChatCompletionRequest
from cli_proxy.server import apidoc
from cli_proxy.server.errors import APIError
from cli_proxy.server.wire import server_tools
from cli_proxy.server.wire.chat import ModelCard
from cli_proxy.server.wire.fields import TurnParts, from_validation_error

NAME = "generate_content"
MODEL_PREFIX = "models/"


# ------------------------------------------------------------------ request models


class _G(BaseModel):
    """Both spellings of every field (``inline_data`` and ``inlineData``); unknown keys are
    accepted and ignored (``videoMetadata``, ``labels``, and whatever a newer client adds)."""

    model_config = ConfigDict(extra="ignore", alias_generator=to_camel, populate_by_name=True)


class Blob(_G):
    mime_type: str = ""
    data: str


class FileData(_G):
    mime_type: str | None = None
    file_uri: str


class FunctionCall(_G):
    name: str = Field(min_length=1)
    args: dict[str, Any] | None = None
    id: str | None = None


class FunctionResponse(_G):
    name: str = Field(min_length=1)
    response: dict[str, Any] | None = None
    id: str | None = None
    parts: list[dict[str, Any]] | None = None  # multimodal results (inlineData)


class Part(_G):
    text: str | None = None
    inline_data: Blob | None = None
    file_data: FileData | None = None
    function_call: FunctionCall | None = None
    function_response: FunctionResponse | None = None
    thought: bool | None = None
    thought_signature: str | None = None
    executable_code: dict[str, Any] | None = None
    code_execution_result: dict[str, Any] | None = None


class Content(_G):
    role: str | None = None
    parts: list[Part] = Field(default_factory=list)


class FunctionDeclaration(_G):
    name: str = Field(min_length=1)
    description: str | None = None
    parameters: dict[str, Any] | None = None
    parameters_json_schema: dict[str, Any] | None = None


class Tool(_G):
    """``functionDeclarations``, or a server-side tool by its key (``googleSearch``,
    ``codeExecution``, ``urlContext``, ...): every other key of a tool names one."""

    model_config = ConfigDict(extra="allow", alias_generator=to_camel, populate_by_name=True)
    function_declarations: list[FunctionDeclaration] | None = None


class FunctionCallingConfig(_G):
    mode: str | None = None
    allowed_function_names: list[str] | None = None


class ToolConfig(_G):
    function_calling_config: FunctionCallingConfig | None = None


class ThinkingConfig(_G):
    include_thoughts: bool | None = None
    thinking_budget: int | None = None
    thinking_level: str | None = None


class GenerationConfig(_G):
    max_output_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = None
    top_p: float | None = None
    top_k: float | None = None
    stop_sequences: list[str] | None = None
    candidate_count: int | None = None
    response_mime_type: str | None = None
    response_schema: dict[str, Any] | None = None
    response_json_schema: dict[str, Any] | None = Field(
        default=None,
        validation_alias=AliasChoices(
            "responseJsonSchema", "response_json_schema", "_responseJsonSchema"
        ),
    )
    thinking_config: ThinkingConfig | None = None
    seed: int | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    response_modalities: list[str] | None = None


class GenerateContentRequest(_G):
    contents: list[Content] = Field(min_length=1)
    system_instruction: Content | None = None
    tools: list[Tool] | None = None
    tool_config: ToolConfig | None = None
    generation_config: GenerationConfig | None = None
    # accepted without effect (docs/gemini-api.md): the CLIs have no such knobs
    safety_settings: list[dict[str, Any]] | None = None
    cached_content: str | None = None
    model: str | None = None  # countTokens' generateContentRequest carries it


class CountTokensRequest(_G):
    """``:countTokens``: ``contents`` alone, or a whole ``generateContentRequest``."""

    contents: list[Content] | None = None
    generate_content_request: GenerateContentRequest | None = None


M = TypeVar("M", bound=BaseModel)


def generate_content_request(data: Any) -> GenerateContentRequest:
    return _validated(GenerateContentRequest, data)


def generate_content_count_request(data: Any) -> GenerateContentRequest:
    """The request a ``:countTokens`` body stands for."""
    count = _validated(CountTokensRequest, data)
    if count.generate_content_request is not None:
        return count.generate_content_request
    if not count.contents:
        raise APIError(400, "contents is required", param="contents", code="invalid_value")
    return GenerateContentRequest(contents=count.contents)


def _validated(model: type[M], data: Any) -> M:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        err = from_validation_error(exc)
        if err.param:  # the field as the client spelled it (pydantic names the alias)
            err.param = re.sub(r"\.(?:str|int|float|bool)\b", "", err.param)
        raise err from None


def generate_content_model_id(path_model: str) -> str:
    """The gateway's model id from the path's ``{model}``: with or without ``models/``."""
    return path_model.removeprefix(MODEL_PREFIX)


def generate_content_model(path_model: str) -> str:
    model = generate_content_model_id(path_model)
    if not re.match(MODEL_NAME, model) or len(model) > 128:
        raise APIError(
            400, f"invalid model name {model!r}", param="model", code="invalid_model_name"
        )
    return model


# ------------------------------------------------------------------ request -> chat


@dataclass
class Translated:
    """The chat request; which server tools were left out; whether thoughts are shown; and
    where each chat message came from, so an error found later names the client's field."""

    request: ChatCompletionRequest
    dropped: list[server_tools.Dropped] = field(default_factory=list)
    thoughts: bool = False
    origins: dict[str, str] = field(default_factory=dict)

    def param(self, chat_param: str | None) -> str | None:
        if not chat_param:
            return chat_param
        for key in sorted(self.origins, key=len, reverse=True):
            if chat_param == key or chat_param.startswith((key + ".", key + "[")):
                rest = chat_param[len(key) :]
                rest = re.sub(r"^\.image_url\.url$", ".inlineData", rest)
                return self.origins[key] + rest
        return chat_param


_FUNCTION_ROLES = ("user", "function", "tool")


def generate_content_to_chat(req: GenerateContentRequest, model: str, stream: bool) -> Translated:
    """The Gemini request as the gateway's one conversation model (pure)."""
    gen = req.generation_config or GenerationConfig()
    if gen.candidate_count is not None and gen.candidate_count > 1:
        raise APIError(
            400,
            f"candidateCount {gen.candidate_count} is not supported: a CLI gives one answer "
            "per call; send candidateCount 1 (or none) and make several calls",
            param="generationConfig.candidateCount",
            code="invalid_value",
        )
    out = Translated(ChatCompletionRequest.model_construct())
    messages: list[dict[str, Any]] = []
    if req.system_instruction is not None:
        text = _plain_text(req.system_instruction, "systemInstruction")
        if text:
            out.origins[f"messages[{len(messages)}]"] = "systemInstruction"
            messages.append({"role": "system", "content": text})
    pending: list[dict[str, Any]] = []  # calls of the last model turn not yet answered
    issued = 0
    for i, content in enumerate(req.contents):
        where = f"contents[{i}]"
        role = content.role or "user"
        if role == "model":
            turn, calls = _model_turn(content, where, issued)
            issued += len(calls)
            if turn is not None:
                out.origins[f"messages[{len(messages)}]"] = where
                messages.append(turn)
            pending = list(calls)
        elif role in _FUNCTION_ROLES:
            _user_turn(content, where, messages, out.origins, pending)
        else:
            raise APIError(
                400,
                f"{where}.role {role!r} is not supported: 'user' or 'model'",
                param=f"{where}.role",
                code="invalid_value",
            )
    chat: dict[str, Any] = {"model": model, "messages": messages, "stream": stream}
    if gen.max_output_tokens is not None:
        chat["max_tokens"] = gen.max_output_tokens
    if gen.temperature is not None:
        chat["temperature"] = gen.temperature
    if gen.top_p is not None:
        chat["top_p"] = gen.top_p
    if gen.stop_sequences:
        chat["stop"] = gen.stop_sequences
    if gen.seed is not None:
        chat["seed"] = gen.seed
    fmt = _response_format(gen)
    if fmt is not None:
        chat["response_format"] = fmt
    thinking = gen.thinking_config
    if thinking is not None:
        out.thoughts = bool(thinking.include_thoughts)
        effort = _effort(thinking)
        if effort is not None:
            chat["reasoning_effort"] = effort
    tools, out.dropped = _tools(req.tools or [])
    choice = (req.tool_config.function_calling_config if req.tool_config else None) or None
    if choice is not None and choice.mode is not None:
        tools, chat_choice = _tool_choice(choice, tools)
        if chat_choice is not None:
            chat["tool_choice"] = chat_choice
    if tools:
        chat["tools"] = tools
    try:
        out.request = ChatCompletionRequest.model_validate(chat)
    except ValidationError as exc:
        err = from_validation_error(exc)
        if err.param:
            new = re.sub(
                r"^tools\[(\d+)\]\.function\b", r"tools[].functionDeclarations[\1]", err.param
            )
            new = out.param(new) or new
            err.message = err.message.replace(f"'{err.param}'", f"'{new}'")
            err.param = new
        raise err from None
    return out


def _plain_text(content: Content, where: str) -> str:
    """A system instruction's text parts, joined (only text belongs there)."""
    texts: list[str] = []
    for j, part in enumerate(content.parts):
        if part.text is not None and not part.thought:
            texts.append(part.text)
        elif part.text is None:
            raise APIError(
                400,
                f"{where}.parts[{j}]: only text parts are supported in a system instruction",
                param=f"{where}.parts[{j}]",
                code="unsupported_content",
            )
    return "\n\n".join(texts)


def _model_turn(
    content: Content, where: str, issued: int
) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
    """A model turn: its text, and its functionCall parts as calls (thoughts are dropped:
    another model's thinking, as the Messages API does with thinking blocks)."""
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    for j, part in enumerate(content.parts):
        here = f"{where}.parts[{j}]"
        if part.function_call is not None:
            fc = part.function_call
            call_id = fc.id or f"call_g{issued + len(calls)}"
            arguments = json.dumps(fc.args or {}, ensure_ascii=False, separators=(",", ":"))
            calls.append(
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": fc.name, "arguments": arguments},
                }
            )
        elif part.thought:
            continue
        elif part.text is not None:
            texts.append(part.text)
        elif part.inline_data is not None or part.file_data is not None:
            continue  # an image the model made: nothing a CLI model can be shown as its own
        else:
            raise _unsupported_part(part, here)
    if not texts and not calls:
        return None, []
    turn: dict[str, Any] = {"role": "assistant", "content": "".join(texts) or None}
    if calls:
        turn["tool_calls"] = calls
    return turn, calls


def _user_turn(
    content: Content,
    where: str,
    messages: list[dict[str, Any]],
    origins: dict[str, str],
    pending: list[dict[str, Any]],
) -> None:
    """A user turn: functionResponse parts become tool messages, in place (matched to their
    call by ``id``, else by name and order); the rest one turn of text and image parts."""
    turn = TurnParts("user", where, messages, origins)
    for j, part in enumerate(content.parts):
        here = f"{where}.parts[{j}]"
        if part.function_response is not None:
            turn.flush()
            fr = part.function_response
            call_id = _match_call(fr, pending, here)
            origins[f"messages[{len(messages)}]"] = here
            messages.append({"role": "tool", "tool_call_id": call_id, "content": _result(fr, here)})
        elif part.thought:
            continue
        elif part.text is not None:
            turn.add({"type": "text", "text": part.text}, here)
        elif part.inline_data is not None:
            turn.add(_image(part.inline_data, f"{here}.inlineData"), here)
        elif part.file_data is not None:
            turn.add(_file(part.file_data, f"{here}.fileData"), here)
        else:
            raise _unsupported_part(part, here)
    turn.flush()


def _match_call(fr: FunctionResponse, pending: list[dict[str, Any]], where: str) -> str:
    """The call a functionResponse answers: by ``id`` when it has one, else the first call of
    that name (in the order the model made them) not yet answered."""
    for k, call in enumerate(pending):
        if fr.id is not None and call["id"] == fr.id:
            del pending[k]
            return fr.id
    if fr.id is not None:
        return fr.id  # a call from before the last model turn: chat matches ids itself
    for k, call in enumerate(pending):
        if call["function"]["name"] == fr.name:
            del pending[k]
            return str(call["id"])
    raise APIError(
        400,
        f"{where}.functionResponse {fr.name!r} answers no functionCall of that name in the "
        "model turn before it",
        param=f"{where}.functionResponse",
        code="invalid_value",
    )


def _result(fr: FunctionResponse, where: str) -> str | list[dict[str, Any]]:
    """A function's result as tool-message content: its ``response`` object as JSON text
    (with images from its ``parts``, when it has any)."""
    text = json.dumps(fr.response or {}, ensure_ascii=False, separators=(",", ":"))
    if not fr.parts:
        return text
    content: list[dict[str, Any]] = [{"type": "text", "text": text}]
    for k, raw in enumerate(fr.parts):
        blob = raw.get("inlineData") or raw.get("inline_data")
        if not isinstance(blob, dict):
            continue
        b = _validated(Blob, blob)
        content.append(_image(b, f"{where}.functionResponse.parts[{k}].inlineData"))
    return content


def _unsupported_part(part: Part, where: str) -> APIError:
    kinds = [k for k, v in part.model_dump(exclude_none=True, by_alias=True).items() if v]
    kind = kinds[0] if kinds else "empty"
    if kind in ("executableCode", "codeExecutionResult"):
        return APIError(
            400,
            f"{where}: a {kind} part is not supported: {server_tools.HINT}",
            param=where,
            code="unsupported_content",
        )
    return APIError(
        400,
        f"{where}: a part needs text, inlineData, fileData, functionCall or functionResponse"
        + (f" ({kind!r} is not supported)" if kinds else ""),
        param=where,
        code="unsupported_content",
    )


def generate_content_base64(data: str) -> str:
    """``inlineData.data`` as standard, padded base64: google-genai sends the URL-safe
    alphabet (``-``, ``_``), the REST docs the standard one; both are accepted."""
    data = re.sub(r"\s+", "", data).translate(str.maketrans("-_", "+/"))
    return data + "=" * (-len(data.rstrip("=")) % 4 if not data.endswith("=") else 0)


def _image(blob: Blob, where: str) -> dict[str, Any]:
    mime = blob.mime_type.lower().strip()
    if not mime.startswith("image/"):
        raise APIError(
            400,
            f"{where}: inline data of type {blob.mime_type!r} is not supported: only images "
            "reach a CLI model; send a document's text as a text part",
            param=where,
            code="unsupported_content",
        )
    data = generate_content_base64(blob.data)
    try:
        base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise APIError(
            400, f"{where}.data is not valid base64", param=f"{where}.data", code="invalid_image"
        ) from None
    return {"type": "image_url", "image_url": {"url": f"data:{mime};base64,{data}"}}


def _file(fd: FileData, where: str) -> dict[str, Any]:
    """A ``fileData`` part: an http(s) image URL goes on as an image URL (fetched only under
    the gateway's image URL policy, ``image_fetch``); anything else (a Files API or ``gs://``
    URI, a video) cannot be fetched here: 400, naming it."""
    uri = fd.file_uri
    mime = (fd.mime_type or "").lower()
    web_image = uri.startswith(("http://", "https://")) and (not mime or mime.startswith("image/"))
    if web_image and "generativelanguage.googleapis.com" not in uri:  # not the Files API
        return {"type": "image_url", "image_url": {"url": uri}}
    raise APIError(
        400,
        f"{where}.fileUri {uri[:200]!r} cannot be fetched by the gateway (no Files API, no "
        "Cloud Storage): send the image inline as inlineData",
        param=f"{where}.fileUri",
        code="unsupported_file_uri",
    )


# ------------------------------------------------------------------ tools and schemas

_SCHEMA_KEYS = {  # the OpenAPI-subset Schema's snake_case keys, as JSON Schema spells them
    "any_of": "anyOf",
    "one_of": "oneOf",
    "all_of": "allOf",
    "max_items": "maxItems",
    "min_items": "minItems",
    "max_length": "maxLength",
    "min_length": "minLength",
    "max_properties": "maxProperties",
    "min_properties": "minProperties",
    "additional_properties": "additionalProperties",
    "prefix_items": "prefixItems",
}
_DROPPED_SCHEMA_KEYS = {"propertyOrdering", "property_ordering", "example"}


def generate_content_json_schema(schema: Any) -> Any:
    """Gemini's ``Schema`` (OpenAPI 3.0 subset: upper-case types, ``nullable``, snake or camel
    keys) as the JSON Schema the one conversation carries. Property names are kept as
    written."""
    if isinstance(schema, list):
        return [generate_content_json_schema(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for raw_key, value in schema.items():
        key = _SCHEMA_KEYS.get(str(raw_key)) or str(raw_key)
        if key in _DROPPED_SCHEMA_KEYS:
            continue
        if key == "type" and isinstance(value, str):
            out["type"] = "null" if value.upper() == "NULL" else value.lower()
        elif key == "properties" and isinstance(value, dict):
            out["properties"] = {name: generate_content_json_schema(v) for name, v in value.items()}
        elif key in ("items", "anyOf", "oneOf", "allOf", "prefixItems", "additionalProperties"):
            out[key] = generate_content_json_schema(value)
        else:
            out[key] = value
    if out.pop("nullable", False) is True and isinstance(out.get("type"), str):
        out["type"] = [out["type"], "null"]
    if out.get("type") == "type_unspecified":
        out.pop("type")
    return out


def _tools(tools: list[Tool]) -> tuple[list[dict[str, Any]], list[server_tools.Dropped]]:
    """Function declarations as chat tools; every other tool (a server tool) left out and
    named (wire/server_tools.py)."""
    out: list[dict[str, Any]] = []
    dropped: list[server_tools.Dropped] = []
    for i, tool in enumerate(tools):
        for j, decl in enumerate(tool.function_declarations or []):
            out.append(_function(decl, f"tools[{i}].functionDeclarations[{j}]"))
        for key, value in (tool.model_extra or {}).items():
            if value is None:
                continue
            name = to_camel(key)
            dropped.append(server_tools.Dropped(name, f"tools[{i}].{name}"))
    return out, dropped


def _function(decl: FunctionDeclaration, where: str) -> dict[str, Any]:
    if decl.parameters_json_schema is not None:
        schema = decl.parameters_json_schema
    elif decl.parameters is not None:
        schema = generate_content_json_schema(decl.parameters)
    else:
        schema = {"type": "object", "properties": {}}
    fn: dict[str, Any] = {"name": decl.name, "parameters": schema}
    if decl.description is not None:
        fn["description"] = decl.description
    return {"type": "function", "function": fn}


def _tool_choice(
    config: FunctionCallingConfig, tools: list[dict[str, Any]]
) -> tuple[list[dict[str, Any]], str | dict[str, Any] | None]:
    """``functionCallingConfig``: AUTO and VALIDATED are chat's ``auto``, NONE ``none``,
    ANY ``required``; ANY with ``allowedFunctionNames``: only those functions are declared
    (one name: that function, named)."""
    mode = (config.mode or "AUTO").upper()
    if mode in ("AUTO", "VALIDATED", "MODE_UNSPECIFIED"):
        return tools, "auto" if tools else None
    if mode == "NONE":
        return tools, "none" if tools else None
    if mode != "ANY":
        raise APIError(
            400,
            f"functionCallingConfig.mode {config.mode!r} is not supported: AUTO, ANY, NONE, "
            "VALIDATED",
            param="toolConfig.functionCallingConfig.mode",
            code="invalid_value",
        )
    names = config.allowed_function_names or []
    if names:
        known = {t["function"]["name"] for t in tools}
        unknown = [n for n in names if n not in known]
        if unknown:
            raise APIError(
                400,
                f"allowedFunctionNames names {unknown[0]!r}, which no functionDeclaration declares",
                param="toolConfig.functionCallingConfig.allowedFunctionNames",
                code="invalid_value",
            )
        tools = [t for t in tools if t["function"]["name"] in names]
    if not tools:
        raise APIError(
            400,
            "functionCallingConfig mode ANY needs at least one functionDeclaration (server "
            "tools are left out: the gateway cannot run them)",
            param="toolConfig.functionCallingConfig.mode",
            code="unsupported_tool_choice",
        )
    if len(tools) == 1 and names:
        return tools, {"type": "function", "function": {"name": tools[0]["function"]["name"]}}
    return tools, "required"


def _response_format(gen: GenerationConfig) -> dict[str, Any] | None:
    """``responseMimeType: application/json`` with ``responseJsonSchema`` or
    ``responseSchema``: structured output; without a schema: JSON mode."""
    mime = (gen.response_mime_type or "").lower()
    if mime in ("", "text/plain"):
        if gen.response_schema is not None or gen.response_json_schema is not None:
            mime = "application/json"  # a schema without the mime type: what was meant
        else:
            return None
    if mime != "application/json":
        raise APIError(
            400,
            f"responseMimeType {gen.response_mime_type!r} is not supported: text/plain or "
            "application/json",
            param="generationConfig.responseMimeType",
            code="invalid_value",
        )
    if gen.response_json_schema is not None:
        schema = gen.response_json_schema
    elif gen.response_schema is not None:
        schema = generate_content_json_schema(gen.response_schema)
    else:
        return {"type": "json_object"}
    return {"type": "json_schema", "json_schema": {"name": "response", "schema": schema}}


_LEVELS = {"MINIMAL": "minimal", "LOW": "low", "MEDIUM": "medium", "HIGH": "high"}


def _effort(t: ThinkingConfig) -> str | None:
    """``thinkingLevel`` by name; ``thinkingBudget`` by size (-1, dynamic: the CLI's own
    default; 0: as little as the model allows)."""
    if t.thinking_level:
        return _LEVELS.get(t.thinking_level.upper())
    budget = t.thinking_budget
    if budget is None or budget < 0:
        return None
    if budget == 0:
        return "minimal"
    if budget <= 2048:
        return "low"
    if budget <= 12288:
        return "medium"
    return "high"


# ------------------------------------------------------------------ errors

STATUS_NAMES = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    402: "FAILED_PRECONDITION",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    405: "UNIMPLEMENTED",
    408: "DEADLINE_EXCEEDED",
    409: "ABORTED",
    413: "INVALID_ARGUMENT",
    429: "RESOURCE_EXHAUSTED",
    499: "CANCELLED",
    500: "INTERNAL",
    501: "UNIMPLEMENTED",
    502: "UNAVAILABLE",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}


def generate_content_error_status(err: APIError) -> int:
    return err.status


def generate_content_error_body(err: APIError) -> dict[str, Any]:
    """``{"error": {"code", "message", "status", "details"}}``: the status named as Google
    names it; ``details`` carry the gateway's code (an ``ErrorInfo`` reason) and, on a 429,
    when to retry (a ``RetryInfo``, as the real API sends one)."""
    status = err.status
    name = STATUS_NAMES.get(status, "INTERNAL" if status >= 500 else "INVALID_ARGUMENT")
    message = err.message
    if err.param and err.param not in message:
        message = f"{err.param}: {message}"
    info: dict[str, Any] = {
        "@type": "type.googleapis.com/google.rpc.ErrorInfo",
        "reason": (err.code or name).upper(),
        "domain": "cli-proxy",
    }
    if err.param:
        info["metadata"] = {"param": err.param}
    details = [info]
    retry = _header(err.headers, "Retry-After")
    if status == 429 and retry is not None and retry.isdigit():
        details.append(
            {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": f"{retry}s"}
        )
    return {"error": {"code": status, "message": message, "status": name, "details": details}}


def _header(headers: Mapping[str, str], name: str) -> str | None:
    for key, value in headers.items():
        if key.lower() == name.lower():
            return value
    return None


def generate_content_claims(path: str, headers: Mapping[str, str]) -> bool:
    """Whether an error on ``path`` is answered in Google's body: everything under
    ``/v1beta/``; under ``/v1/models`` a generate/stream/count path, or any request that
    carries a Google client's header (``x-goog-api-key``, ``x-goog-api-client``)."""
    if path == "/v1beta" or path.startswith("/v1beta/"):
        return True
    if path.startswith("/v1/models/") and re.search(
        r":(?:generateContent|streamGenerateContent|countTokens)$", path
    ):
        return True
    return generate_content_models_claim(headers) and (
        path == "/v1/models" or path.startswith("/v1/models/")
    )


def generate_content_models_claim(headers: Mapping[str, str]) -> bool:
    """A Google client's request: it carries ``x-goog-api-key`` or ``x-goog-api-client``."""
    return any(k.lower() in ("x-goog-api-key", "x-goog-api-client") for k in headers)


# ------------------------------------------------------------------ models

INPUT_TOKEN_LIMIT = 200_000  # documented as what the gateway says, not a model's own figure
OUTPUT_TOKEN_LIMIT = 64_000
METHODS = ["generateContent", "streamGenerateContent", "countTokens"]


def generate_content_model_card(card: ModelCard) -> dict[str, Any]:
    """A model as Gemini's ``GET /v1beta/models`` lists one."""
    return {
        "name": MODEL_PREFIX + card.id,
        "baseModelId": card.id,
        "version": "001",
        "displayName": card.id,
        "description": f"{card.id} through cli-proxy ({card.owned_by} CLI)",
        "inputTokenLimit": INPUT_TOKEN_LIMIT,
        "outputTokenLimit": OUTPUT_TOKEN_LIMIT,
        "supportedGenerationMethods": list(METHODS),
        "thinking": True,
    }


def generate_content_model_list(cards: list[ModelCard]) -> dict[str, Any]:
    return {"models": [generate_content_model_card(c) for c in cards]}


def generate_content_count(tokens: int) -> dict[str, Any]:
    return {"totalTokens": tokens}


def generate_content_credentials(request: web.Request) -> list[str]:
    """The API-key sources of Google's clients: ``x-goog-api-key`` (google-genai, the Gemini
    CLI, ADK, LangChain, Vercel, LiteLLM), and the REST API's ``?key=`` (no request log line
    holds a query string)."""
    out = [request.headers.get("x-goog-api-key", "")]
    if "key" in request.query:
        out.append(request.query["key"])
    return [k for k in out if k]


# ------------------------------------------------------------------ OpenAPI


class _Out(BaseModel):
    model_config = ConfigDict(extra="forbid")


class FunctionCallOut(_Out):
    name: str
    args: dict[str, Any]
    id: str


class PartOut(_Out):
    text: str | None = None
    thought: bool | None = None
    functionCall: FunctionCallOut | None = None


class ContentOut(_Out):
    role: Literal["model"]
    parts: list[PartOut]


class CandidateOut(_Out):
    content: ContentOut
    index: int
    finishReason: Literal["STOP", "MAX_TOKENS"] | None = None


class UsageMetadataOut(_Out):
    promptTokenCount: int
    candidatesTokenCount: int
    totalTokenCount: int
    cachedContentTokenCount: int
    thoughtsTokenCount: int


class GenerateContentResponse(_Out):
    """A ``generateContent`` answer, or one chunk of its stream."""

    candidates: list[CandidateOut]
    usageMetadata: UsageMetadataOut | None = None
    modelVersion: str
    responseId: str


class CountTokensResponse(_Out):
    totalTokens: int


class GoogleErrorDetail(BaseModel):
    code: int
    message: str
    status: str
    details: list[dict[str, Any]] = Field(default_factory=list)


class GoogleErrorBody(BaseModel):
    """Every error on the Gemini API's paths."""

    error: GoogleErrorDetail


class GeminiModel(_Out):
    name: str
    baseModelId: str
    version: str
    displayName: str
    description: str
    inputTokenLimit: int
    outputTokenLimit: int
    supportedGenerationMethods: list[str]
    thinking: bool


class GeminiModelList(_Out):
    models: list[GeminiModel]


OPENAPI_MODELS: apidoc.ModelSchemas = (
    (GeminiModelList, "serialization"),
    (GeminiModel, "serialization"),
    (GenerateContentRequest, "validation"),
    (CountTokensRequest, "validation"),
    (GenerateContentResponse, "serialization"),
    (CountTokensResponse, "serialization"),
    (GoogleErrorBody, "serialization"),
)


def generate_content_openapi_paths(ref: dict[type[BaseModel], Any]) -> dict[str, Any]:
    """The Gemini API's paths under ``/v1beta`` and ``/v1`` (docs/gemini-api.md)."""
    error = ref[GoogleErrorBody]
    model = {
        "name": "model",
        "in": "path",
        "required": True,
        "description": "any model id the gateway serves, with or without 'models/'",
        "schema": {"type": "string"},
    }
    whole = apidoc.answer(
        "The answer: one GenerateContentResponse",
        {apidoc.JSON: {"schema": ref[GenerateContentResponse]}},
    )
    streamed = apidoc.answer(
        "With ?alt=sse, server-sent 'data:' events, each a GenerateContentResponse (keep-alives "
        "are empty-text chunks; the last chunk has finishReason; a failure after the first "
        "event is a 'data: {\"error\": ...}' event); without it, a JSON array of them",
        {
            apidoc.SSE: apidoc.sse(apidoc.json_text(ref[GenerateContentResponse])),
            apidoc.JSON: {"schema": {"type": "array", "items": ref[GenerateContentResponse]}},
        },
    )
    counted = apidoc.answer(
        "An estimate: the rendered prompt's characters / 4",
        {apidoc.JSON: {"schema": ref[CountTokensResponse]}},
    )
    paths: dict[str, Any] = {}
    for prefix in ("/v1beta", "/v1"):
        for verb, op, summary, answer, errs in (
            ("generateContent", "generateContent", "Generate content", whole, apidoc.CALL_ERRORS),
            (
                "streamGenerateContent",
                "streamGenerateContent",
                "Generate content as a stream",
                streamed,
                apidoc.CALL_ERRORS,
            ),
            ("countTokens", "countTokens", "Estimate tokens", counted, apidoc.COUNT_ERRORS),
        ):
            request = (
                ref[CountTokensRequest] if verb == "countTokens" else ref[GenerateContentRequest]
            )
            operation = apidoc.post(
                f"{op}{prefix.replace('/', '_')}",
                f"{summary} (Google's generateContent API)",
                request,
                answer,
                apidoc.errors(errs, error),
            )
            operation["post"]["parameters"] = [model]
            paths[f"{prefix}/models/{{model}}:{verb}"] = operation
    paths["/v1beta/models"] = apidoc.get(
        "listModelsV1beta",
        "List the models in Google's shape (also GET /v1/models with x-goog-api-key or "
        "x-goog-api-client)",
        apidoc.answer("The model list", {apidoc.JSON: {"schema": ref[GeminiModelList]}}),
        apidoc.errors(apidoc.GET_ERRORS, error),
    )
    paths["/v1beta/models/{model}"] = apidoc.get(
        "getModelV1beta",
        "One model in Google's shape",
        apidoc.answer("The model", {apidoc.JSON: {"schema": ref[GeminiModel]}}),
        apidoc.errors((*apidoc.GET_ERRORS, 404), error),
        parameters=[model],
    )
    return paths
