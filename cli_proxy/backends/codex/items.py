"""The request as codex items: earlier turns injected as raw Responses items (messages,
``function_call``, ``function_call_output``), the last user message as the turn's input,
images in place, the client's functions as dynamic tools."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from xml.sax.saxutils import escape

from cli_proxy.plan.images import PromptImage, image_parts
from cli_proxy.plan.prompt import Prompt, choice_rules, flatten
from cli_proxy.protocol import (
    AssistantMessage,
    ChatCompletionRequest,
    Content,
    FunctionMessage,
    ImagePart,
    Message,
    SystemMessage,
    ToolMessage,
    UserMessage,
)


@dataclass(frozen=True, slots=True)
class Channel:
    """One request as app-server messages (docs/prompt-format.md, "codex").

    ``thread``: the ``thread/start`` params (ephemeral; the client's functions as dynamic
    tools with their schemas unchanged; the prompt's instructions, rules and system context
    as developer instructions). ``items``: every turn before the last user message as raw
    Responses items (user and assistant messages, ``function_call``,
    ``function_call_output``), for ``thread/inject_items``. ``input``: that last user
    message (text and images in place) for ``turn/start``, empty when the conversation ends
    with tool results. ``output_schema``: a strict ``json_schema`` response format."""

    thread: dict[str, Any]
    items: tuple[dict[str, Any], ...] = ()
    input: tuple[dict[str, Any], ...] = ()
    output_schema: dict[str, Any] | None = None


def channel(prompt: Prompt, req: ChatCompletionRequest) -> Channel:
    """Pure and deterministic: the same request gives the same bytes (replay, caching)."""
    images = iter(prompt.images)
    image_urls = {
        id(part): _data_url(next(images), part.image_url.detail)
        for _, part, _ in image_parts(req.messages)
    }
    declared = bool(req.tools) and req.tool_choice != "none"
    tools = [
        {
            "type": "function",
            "name": t.function.name,
            "description": t.function.description or "",
            "inputSchema": t.function.parameters or {"type": "object", "properties": {}},
        }
        for t in (req.tools or [])
        if declared
    ]
    fmt = req.response_format
    spec = fmt.json_schema if fmt is not None and fmt.type == "json_schema" else None
    schema = spec.get("schema") if spec and spec.get("strict") is True else None
    output_schema = schema if isinstance(schema, dict) else None
    head = prompt.head
    instructions, _, system = head.partition("<system_context>")
    if output_schema is not None:
        instructions = ""  # the schema travels as the turn's structured-output format
    rules = choice_rules(req, req.parallel_tool_calls is not False) if declared else []
    developer = instructions
    if rules:
        developer += "<rules>\n" + "".join(f"<rule>{escape(r)}</rule>\n" for r in rules)
        developer += "</rules>\n\n"
    if system:
        developer += "<system_context>" + system
    thread: dict[str, Any] = {"ephemeral": True}
    if tools:
        thread["dynamicTools"] = tools
    if developer.strip():
        thread["developerInstructions"] = developer.strip()
    turns = [m for m in req.messages if not isinstance(m, SystemMessage)]
    last = turns[-1] if turns and isinstance(turns[-1], UserMessage) else None
    items = _items(turns[:-1] if last is not None else turns, image_urls)
    turn_input: list[dict[str, Any]] = []
    if last is not None:
        for part in _parts(last.content, image_urls):
            if part["type"] == "input_text":
                turn_input.append({"type": "text", "text": part["text"], "text_elements": []})
            else:
                image = {"type": "image", "url": part["image_url"]}
                if part.get("detail"):
                    image["detail"] = part["detail"]
                turn_input.append(image)
    return Channel(thread, tuple(items), tuple(turn_input), output_schema)


def _data_url(image: PromptImage, detail: str | None) -> tuple[str, str | None]:
    """The image as decoded and checked by the gateway (its media type sniffed from the
    bytes, not taken from the client's data URL)."""
    return f"data:{image.media_type};base64,{image.base64}", detail


def _parts(content: Content, images: dict[int, tuple[str, str | None]]) -> list[dict[str, Any]]:
    """Message content as Responses input parts, images in place."""
    if content is None or isinstance(content, str):
        return [{"type": "input_text", "text": content or ""}]
    out: list[dict[str, Any]] = []
    for part in content:
        if isinstance(part, ImagePart) and id(part) in images:
            url, detail = images[id(part)]
            image: dict[str, Any] = {"type": "input_image", "image_url": url}
            if detail in ("low", "high", "auto", "original"):
                image["detail"] = detail
            out.append(image)
        else:
            out.append({"type": "input_text", "text": flatten([part])})
    return out or [{"type": "input_text", "text": ""}]


def _items(
    messages: Sequence[Message], images: dict[int, tuple[str, str | None]]
) -> list[dict[str, Any]]:
    """The turns as raw Responses items. Every ``function_call`` gets a
    ``function_call_output`` (the API refuses a call without one): a call no tool message
    answers gets a note saying so; a tool message whose call is unknown becomes user text."""
    answered = {m.tool_call_id for m in messages if isinstance(m, ToolMessage)}
    legacy = 0
    legacy_ids: dict[str, str] = {}  # function name -> the id of its last legacy call
    known: set[str] = set()
    out: list[dict[str, Any]] = []
    for msg in messages:
        if isinstance(msg, UserMessage):
            out.append({"type": "message", "role": "user", "content": _parts(msg.content, images)})
        elif isinstance(msg, AssistantMessage):
            text = flatten(msg.content)
            calls = [(c.id, c.function.name, c.function.arguments) for c in msg.tool_calls or []]
            if msg.function_call is not None:
                legacy += 1
                call_id = f"call_legacy_{legacy}"
                legacy_ids[msg.function_call.name] = call_id
                calls.append((call_id, msg.function_call.name, msg.function_call.arguments))
            if text or not calls:
                content = [{"type": "output_text", "text": text}]
                out.append({"type": "message", "role": "assistant", "content": content})
            for call_id, name, args in calls:
                known.add(call_id)
                out.append(
                    {"type": "function_call", "call_id": call_id, "name": name, "arguments": args}
                )
                if call_id not in answered and not call_id.startswith("call_legacy_"):
                    out.append(_output(call_id, NO_RESULT))
        elif isinstance(msg, ToolMessage):
            if msg.tool_call_id in known:
                parts = _parts(msg.content, images)
                texts_only = all(p["type"] == "input_text" for p in parts)
                output: Any = "\n".join(p["text"] for p in parts) if texts_only else parts
                out.append(_output(msg.tool_call_id, output))
            else:
                text = f"Result of function call {msg.tool_call_id} (its call is not in this "
                text += "conversation):\n"
                parts = [{"type": "input_text", "text": text}, *_parts(msg.content, images)]
                out.append({"type": "message", "role": "user", "content": parts})
        elif isinstance(msg, FunctionMessage):
            legacy_id = legacy_ids.pop(msg.name, None)
            if legacy_id is not None:
                out.append(_output(legacy_id, flatten(msg.content)))
            else:
                text = f"Result of function {msg.name}:\n{flatten(msg.content)}"
                content = [{"type": "input_text", "text": text}]
                out.append({"type": "message", "role": "user", "content": content})
    for call_id in legacy_ids.values():  # legacy calls never answered
        index = next(i for i, it in enumerate(out) if it.get("call_id") == call_id)
        out.insert(index + 1, _output(call_id, NO_RESULT))
    return out


NO_RESULT = "No result: the conversation did not answer this call."


def _output(call_id: str, output: Any) -> dict[str, Any]:
    return {"type": "function_call_output", "call_id": call_id, "output": output}
