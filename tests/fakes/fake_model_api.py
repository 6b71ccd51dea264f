#!/usr/bin/env python3
"""A fake model API (Anthropic Messages, Gemini generateContent, OpenAI Responses) for
loopback tests.

The real ``claude`` / ``gemini`` / ``codex`` CLIs are pointed at it (``ANTHROPIC_BASE_URL`` /
``GOOGLE_GEMINI_BASE_URL`` / the codex backend's ``base_url`` option) so that they run
offline, with deterministic answers.

Library use::

    api = await start_fake_model_api()          # host="127.0.0.1", port=0 (any free)
    api.url                                      # "http://127.0.0.1:PORT"
    api.requests                                 # list of RecordedRequest dicts
    await api.close()

Script use::

    python tests/fakes/fake_model_api.py --port 0  # first stdout line: the URL; runs until killed

Endpoints:

* Anthropic: ``POST /v1/messages`` (the CLI adds ``?beta=true``), streaming SSE when the
  body has ``"stream": true`` else one JSON message; ``POST /v1/messages/count_tokens``.
* Gemini: ``POST /v1beta/models/{model}:streamGenerateContent`` (SSE with ``?alt=sse``,
  else a JSON array), ``:generateContent``, ``:countTokens``.
* OpenAI Responses (codex): ``POST /v1/responses``, always streaming SSE (``response.created``,
  output items with ``response.output_text.delta`` pieces, ``response.completed`` with usage);
  errors as OpenAI error bodies; ``response.failed`` / ``response.incomplete`` on request.
* ``HEAD /`` (the claude CLI probes it once at startup): ``200``, empty.
* Anything else is recorded, logged to stderr and answered ``200 {}``.

What it answers is scripted by the LAST ``@@fake {json}`` directive in the request's
message text (our prompt is XML-escaped by the gateway, so the text after the marker is
``html.unescape``-d, then the object is read with ``json.JSONDecoder().raw_decode``):

  answer         the model's text (default ``{"tool_call":null,"response":"ok"}`` when the
                 prompt contains ``<json_format>``, else ``Hi! How can I help you today?``)
  echo_prompt    answer with the text of the last user message instead
  chunks         split the answer into this many text deltas (default 3)
  delay          seconds to sleep between deltas (default 0)
  initial_delay  seconds to sleep before answering at all (default 0)
  status         answer with this HTTP error status and the provider's real error body
                 (Anthropic ``{"type":"error","error":{"type":...,"message":...}}``,
                 Gemini ``{"error":{"code":...,"message":...,"status":...}}``)
  error_message  the message of that error
  retry_after    value of a ``retry-after`` header on the error response
  should_retry   Anthropic only: sets ``x-should-retry: true|false`` on the error response
                 (the Anthropic SDK in the claude CLI obeys it)
  stream_error   after the deltas, end the SSE stream with an error event of this type
                 instead of a normal end (Anthropic ``event: error``; Gemini: the stream is
                 cut without a finishReason)
  thinking       Anthropic only: a thinking block with this text (and a signature) first
  stop_reason    Anthropic stop_reason (default ``end_turn``; Gemini: mapped to
                 finishReason, ``max_tokens`` -> ``MAX_TOKENS``, else ``STOP``)
  input_tokens / output_tokens   override the usage numbers
  steps          an agent's task: a list of directives, the one used (over the rest) indexed
                 by the number of tool results in the request (the gateway's prompt's
                 ``role="tool_result"`` turns, or Responses ``function_call_output`` items);
                 the last one repeats
  think          streaming only: before the first answer token, "think" for this many
                 seconds, sending the provider's own events every ``think_every`` s
                 (default 0.5): Anthropic a ``thinking`` content block of thinking_delta
                 events (``think_kind: "ping"``: only ``ping`` events), Gemini ``thought``
                 parts, OpenAI Responses a reasoning item with reasoning_summary_text deltas

Gemini only:

  thought        a thought text sent first, as two parts marked ``"thought": true``
  function_call  answer with a ``functionCall`` part of this name (one of the CLI's own tools,
                 e.g. ``run_shell_command``) instead of text; ``function_args`` its arguments

Responses API (codex) only:

  cached         input tokens read from the prompt cache (``input_tokens_details``)
  reasoning      a reasoning summary text sent before the answer
  cli_tool_call  answer with a ``function_call`` of this name (one of the CLI's own tools,
                 e.g. ``exec_command``) instead of text; ``cli_tool_args`` its arguments
  tool_calls     answer with these function calls instead of text: a list of
                 ``{"name", "arguments"}`` (the client's functions, declared as native tools);
                 ``delay`` spaces them
  error_type     the OpenAI error ``type`` of a ``status`` error (``usage_limit_reached``
                 gives ChatGPT's usage-limit body, with ``resets_in_seconds`` = retry_after)

Usage numbers are deterministic: input tokens = len(message text) // 4 (the text of
``messages`` / ``contents`` only, not the system prompt), output tokens = len(answer)//4 + 1.

Credentials: each API takes only the credential a test configures, and refuses any other
(a wrong one, or none) with the real API's error, so a key the gateway drops or mixes up
fails the test: ``anthropic_key`` (``x-api-key`` on ``/v1/messages``; 401
``authentication_error`` ``invalid x-api-key``), ``gemini_key`` (``x-goog-api-key`` or
``?key=`` on the Gemini endpoints; 400 ``API_KEY_INVALID``, 403 when none is sent),
``openai_key`` (``Authorization: Bearer`` on ``/v1/responses``; 401 ``invalid_api_key``) and
``accept_bearer`` (an OAuth access token as ``Authorization: Bearer``, on every model call).
``credentials()`` lists what each model call carried.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import html
import json
import sys
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web

MARKER = "@@fake "
JSON_DEFAULT = '{"tool_call":null,"response":"ok"}'
TEXT_DEFAULT = "Hi! How can I help you today?"

ANTHROPIC_ERRORS = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    504: "timeout_error",
    529: "overloaded_error",
}
ANTHROPIC_ERROR_MESSAGES = {
    "invalid_request_error": "Invalid request",
    "authentication_error": "invalid x-api-key",
    "permission_error": "Your API key does not have permission to use the specified resource.",
    "not_found_error": "Not found",
    "rate_limit_error": "Number of requests has exceeded your rate limit.",
    "api_error": "Internal server error",
    "overloaded_error": "Overloaded",
}
GEMINI_ERRORS = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    429: "RESOURCE_EXHAUSTED",
    499: "CANCELLED",
    500: "INTERNAL",
    501: "NOT_IMPLEMENTED",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}
GEMINI_ERROR_MESSAGES = {
    "UNAUTHENTICATED": "Request had invalid authentication credentials.",
    "RESOURCE_EXHAUSTED": "Resource has been exhausted (e.g. check quota).",
    "INTERNAL": "An internal error has occurred.",
    "UNAVAILABLE": "The model is overloaded. Please try again later.",
}

CREDENTIAL_HEADERS = ("authorization", "x-api-key", "x-goog-api-key")

OPENAI_ERRORS = {  # status -> (type, code, message) as api.openai.com answers them
    401: (
        "invalid_request_error",
        "invalid_api_key",
        "Incorrect API key provided: test. You can find your API key at "
        "https://platform.openai.com/account/api-keys.",
    ),
    429: (
        "requests",
        "rate_limit_exceeded",
        "Rate limit reached for requests. Please try again in 20s.",
    ),
    500: ("server_error", None, "The server had an error while processing your request."),
    503: ("server_error", None, "The engine is currently overloaded, please try again later."),
}

# --------------------------------------------------------------------------- helpers


def parse_directive(text: str) -> dict[str, Any]:
    """The object after the LAST ``@@fake `` marker in ``text`` ({} if none/invalid)."""
    idx = text.rfind(MARKER)
    if idx < 0:
        return {}
    tail = html.unescape(text[idx + len(MARKER) :]).lstrip()
    try:
        obj, _ = json.JSONDecoder().raw_decode(tail)
    except ValueError:
        return {}
    return obj if isinstance(obj, dict) else {}


def split_text(text: str, n: int) -> list[str]:
    """``text`` cut into ``n`` (at most len(text)) consecutive pieces; [] when empty."""
    if not text:
        return []
    n = max(1, min(int(n), len(text)))
    size = -(-len(text) // n)
    return [text[i : i + size] for i in range(0, len(text), size)]


def _texts_of_content(content: Any) -> list[str]:
    """Text strings in an Anthropic ``content`` (str or list of blocks)."""
    if isinstance(content, str):
        return [content]
    out: list[str] = []
    if isinstance(content, list):
        for block in content:
            if isinstance(block, dict):
                if isinstance(block.get("text"), str):
                    out.append(block["text"])
                elif "content" in block:  # tool_result
                    out.extend(_texts_of_content(block["content"]))
    return out


def anthropic_texts(body: dict[str, Any]) -> tuple[str, str, str]:
    """(system text, all message text, last user message text)."""
    system = "\n".join(_texts_of_content(body.get("system") or []))
    parts: list[str] = []
    last_user = ""
    for msg in body.get("messages") or []:
        if not isinstance(msg, dict):
            continue
        texts = _texts_of_content(msg.get("content"))
        parts.extend(texts)
        if msg.get("role") == "user":
            last_user = "\n".join(texts)
    return system, "\n".join(parts), last_user


def gemini_texts(body: dict[str, Any]) -> tuple[str, str, str]:
    """(systemInstruction text, all contents text, last user content text)."""

    def parts_text(obj: Any) -> list[str]:
        if not isinstance(obj, dict):
            return []
        return [
            p["text"]
            for p in obj.get("parts") or []
            if isinstance(p, dict) and isinstance(p.get("text"), str)
        ]

    system = "\n".join(parts_text(body.get("systemInstruction") or body.get("system_instruction")))
    parts: list[str] = []
    last_user = ""
    for content in body.get("contents") or []:
        texts = parts_text(content)
        parts.extend(texts)
        if isinstance(content, dict) and content.get("role", "user") == "user":
            last_user = "\n".join(texts)
    return system, "\n".join(parts), last_user


def responses_texts(body: dict[str, Any]) -> tuple[str, str, str]:
    """(instructions and developer text, all input text, last user message text) of an
    OpenAI Responses request; tool outputs count as input text."""
    system = [body["instructions"]] if isinstance(body.get("instructions"), str) else []
    parts: list[str] = []
    last_user = ""
    items = body.get("input")
    for item in items if isinstance(items, list) else []:
        if not isinstance(item, dict):
            continue
        if item.get("type") == "function_call_output":
            out = item.get("output")
            parts.append(out if isinstance(out, str) else json.dumps(out))
            continue
        content = item.get("content")
        texts = [
            c["text"]
            for c in (content if isinstance(content, list) else [])
            if isinstance(c, dict) and isinstance(c.get("text"), str)
        ]
        if item.get("role") in ("developer", "system"):
            system.extend(texts)
            continue
        parts.extend(texts)
        if item.get("role") == "user":
            last_user = "\n".join(texts)
    return "\n".join(system), "\n".join(parts), last_user


def text_pieces(path: str, body: dict[str, Any]) -> tuple[list[str], list[str]]:
    """(system-level texts, message texts) of one recorded model request, each text block
    apart: what bench/upstream.py and the system-prompt tests split into ours and the CLI's."""
    system: list[str] = []
    messages: list[str] = []
    if path.endswith("/messages"):
        system = _texts_of_content(body.get("system") or [])
        for msg in body.get("messages") or []:
            messages.extend(_texts_of_content(msg.get("content")))
    elif path.endswith(":streamGenerateContent") or path.endswith(":generateContent"):
        instruction = body.get("systemInstruction") or body.get("system_instruction") or {}
        system = _texts_of_content(instruction.get("parts"))
        for content in body.get("contents") or []:
            messages.extend(_texts_of_content(content.get("parts")))
    else:
        if isinstance(body.get("instructions"), str):
            system.append(body["instructions"])
        for item in body.get("input") or []:
            into = system if item.get("role") in ("developer", "system") else messages
            into.extend(_texts_of_content(item.get("content")))
    return system, messages


@dataclass
class Plan:
    """What to answer for one request."""

    directive: dict[str, Any]
    answer: str
    chunks: list[str]
    delay: float
    initial_delay: float
    status: int | None
    input_tokens: int
    output_tokens: int

    @classmethod
    def make(cls, all_text: str, last_user: str, results: int | None = None) -> Plan:
        d = parse_directive(all_text)
        steps = d.get("steps")
        if isinstance(steps, list) and steps and all(isinstance(x, dict) for x in steps):
            done = all_text.count('role="tool_result"') if results is None else results
            d = {**d, **steps[min(done, len(steps) - 1)]}
        if d.get("echo_prompt"):
            answer = last_user
        elif isinstance(d.get("answer"), str):
            answer = d["answer"]
        else:
            answer = JSON_DEFAULT if "<json_format>" in all_text else TEXT_DEFAULT
        status = d.get("status")
        return cls(
            directive=d,
            answer=answer,
            chunks=split_text(answer, int(d.get("chunks", 3))),
            delay=float(d.get("delay", 0) or 0),
            initial_delay=float(d.get("initial_delay", 0) or 0),
            status=int(status) if status not in (None, 200) else None,
            input_tokens=int(d.get("input_tokens", len(all_text) // 4)),
            output_tokens=int(d.get("output_tokens", len(answer) // 4 + 1)),
        )


RecordedRequest = dict[str, Any]  # method, path, query, headers, body (parsed JSON or None)


CACHE_MIN_CHARS = 4096  # Anthropic caches prefixes of at least 1024 tokens (Sonnet)
CACHE_LOOKBACK = 20  # block boundaries checked before each breakpoint
CHARS_PER_TOKEN = 4


@dataclass
class CacheUse:
    total_chars: int
    read_chars: int
    write_chars: int

    def usage(self) -> dict[str, int]:
        """Anthropic usage fields; input_tokens counts what was neither read nor written."""
        uncached = self.total_chars - self.read_chars - self.write_chars
        return {
            "input_tokens": uncached // CHARS_PER_TOKEN,
            "cache_read_input_tokens": self.read_chars // CHARS_PER_TOKEN,
            "cache_creation_input_tokens": self.write_chars // CHARS_PER_TOKEN,
        }


@dataclass
class PromptCache:
    """Anthropic prompt caching by its documented rules, counted in characters.

    The request is a sequence of blocks (tools, then system blocks, then each message's
    content blocks); a prefix is identified by its content up to a block boundary. A request
    writes the prefix up to each ``cache_control`` breakpoint (if long enough); it reads the
    longest previously written prefix that ends at one of its own block boundaries at most
    ``CACHE_LOOKBACK`` blocks before one of its breakpoints. More than 4 breakpoints: 400.
    """

    written: set[str] = field(default_factory=set)

    @staticmethod
    def blocks(body: dict[str, Any]) -> list[tuple[str, int, bool]]:
        """(canonical content, characters, has a breakpoint) per block, in cache order."""
        out: list[tuple[str, int, bool]] = []

        def add(role: str, block: Any) -> None:
            if isinstance(block, str):
                block = {"type": "text", "text": block}
            if not isinstance(block, dict):
                return
            marked = "cache_control" in block
            plain = {k: v for k, v in block.items() if k != "cache_control"}
            text = plain.get("text") if isinstance(plain.get("text"), str) else json.dumps(plain)
            out.append((json.dumps([role, plain], sort_keys=True), len(text), marked))

        for tool in body.get("tools") or []:
            add("tool", tool)
        system = body.get("system")
        for block in [system] if isinstance(system, str) else system or []:
            add("system", block)
        for msg in body.get("messages") or []:
            content = msg.get("content")
            for block in [content] if isinstance(content, str) else content or []:
                add(str(msg.get("role")), block)
        return out

    def use(self, body: dict[str, Any]) -> CacheUse | str:
        blocks = self.blocks(body)
        keys: list[str] = []
        cum: list[int] = []
        digest, total = hashlib.sha256(), 0
        for canon, chars, _ in blocks:
            digest.update(canon.encode())
            keys.append(digest.copy().hexdigest())
            total += chars
            cum.append(total)
        points = [i for i, (_, _, marked) in enumerate(blocks) if marked]
        if len(points) > 4:
            return f"A maximum of 4 blocks with cache_control may be provided. Found {len(points)}."
        read_upto = -1
        for bp in points:
            for j in range(bp, max(-1, bp - CACHE_LOOKBACK - 1), -1):
                if keys[j] in self.written:
                    read_upto = max(read_upto, j)
                    break
        read = cum[read_upto] if read_upto >= 0 else 0
        last = max(points) if points else -1
        write = max(0, cum[last] - read) if last >= 0 and cum[last] >= CACHE_MIN_CHARS else 0
        for bp in points:
            if cum[bp] >= CACHE_MIN_CHARS:
                self.written.add(keys[bp])
        return CacheUse(total, read, write)


@dataclass
class FakeModelAPI:
    """A running fake model API; see the module docstring."""

    url: str = ""
    requests: list[RecordedRequest] = field(default_factory=list)
    log_unknown: bool = True
    cache: PromptCache | None = None  # simulate Anthropic prompt caching (bench)
    cache_uses: list[CacheUse] = field(default_factory=list)
    accept_bearer: Callable[[str], bool] | None = None
    """When set, a model call whose ``Authorization: Bearer`` token it refuses answers 401
    (an expired or unknown OAuth access token): the login-refresh tests."""
    openai_key: str | None = None
    """When set, ``POST /v1/responses`` needs ``Authorization: Bearer <openai_key>``: a
    missing or other credential answers 401 with api.openai.com's ``invalid_api_key`` body
    (the codex tests with ``CODEX_API_KEY``)."""
    anthropic_key: str | None = None
    """When set, ``POST /v1/messages`` needs ``x-api-key: <anthropic_key>``: a missing or
    other key answers api.anthropic.com's 401 ``authentication_error`` (the claude tests with
    ``ANTHROPIC_API_KEY``)."""
    gemini_key: str | None = None
    """When set, a Gemini model call needs ``x-goog-api-key: <gemini_key>`` (or ``?key=``):
    another key answers the Generative Language API's 400 ``API_KEY_INVALID``, none its 403
    (the gemini tests with ``GEMINI_API_KEY``)."""
    _runner: web.AppRunner | None = None

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> FakeModelAPI:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def credentials(self, path: str = "") -> list[dict[str, str]]:
        """The credential headers (``authorization``, ``x-api-key``, ``x-goog-api-key``) and a
        ``key`` query parameter of each POST whose path ends with ``path`` (the model calls),
        in order: what a test compares with exactly the credential it configured."""
        out = []
        for r in self.requests:
            if r["method"] != "POST" or not r["path"].endswith(path):
                continue
            headers = {k.lower(): v for k, v in r["headers"].items()}
            seen = {k: headers[k] for k in CREDENTIAL_HEADERS if k in headers}
            if "key" in r["query"]:
                seen["?key"] = r["query"]["key"]
            out.append(seen)
        return out

    # ------------------------------------------------------------------ recording

    async def _record(self, request: web.Request) -> Any:
        raw = await request.read()
        body: Any = None
        if raw:
            try:
                body = json.loads(raw)
            except ValueError:
                body = raw.decode("utf-8", "replace")
        self.requests.append(
            {
                "method": request.method,
                "path": request.path,
                "query": dict(request.query),
                "headers": dict(request.headers),
                "body": body,
                "bytes": len(raw),  # the body as sent, before parsing
            }
        )
        return body

    # ------------------------------------------------------------------ Anthropic

    async def anthropic_messages(self, request: web.Request) -> web.StreamResponse:
        body = await self._record(request)
        if not isinstance(body, dict):
            return self._anthropic_error(400, "request body must be a JSON object", {})
        _system, all_text, last_user = anthropic_texts(body)
        plan = Plan.make(all_text, last_user)
        model = str(body.get("model") or "claude-fake")
        if plan.initial_delay:
            await asyncio.sleep(plan.initial_delay)
        if plan.status is not None:
            return self._anthropic_error(
                plan.status, plan.directive.get("error_message"), plan.directive
            )
        usage: dict[str, int] = {"input_tokens": plan.input_tokens}
        if self.cache is not None:
            use = self.cache.use(body)
            if isinstance(use, str):
                return self._anthropic_error(400, use, {})
            self.cache_uses.append(use)
            usage = use.usage()
        msg_id = f"msg_fake_{len(self.requests)}"
        stop_reason = str(plan.directive.get("stop_reason", "end_turn"))
        if not body.get("stream"):
            return web.json_response(
                {
                    "id": msg_id,
                    "type": "message",
                    "role": "assistant",
                    "model": model,
                    "content": [{"type": "text", "text": plan.answer}],
                    "stop_reason": stop_reason,
                    "stop_sequence": None,
                    "usage": {**usage, "output_tokens": plan.output_tokens},
                },
                headers={"request-id": f"req_fake_{len(self.requests)}"},
            )

        resp = web.StreamResponse(
            headers={
                "Content-Type": "text/event-stream; charset=utf-8",
                "Cache-Control": "no-cache",
                "request-id": f"req_fake_{len(self.requests)}",
            }
        )
        await resp.prepare(request)

        async def event(name: str, data: dict[str, Any]) -> None:
            await resp.write(f"event: {name}\ndata: {json.dumps(data)}\n\n".encode())

        await event(
            "message_start",
            {
                "type": "message_start",
                "message": {
                    "id": msg_id,
                    "type": "message",
                    "role": "assistant",
                    "model": model,
                    "content": [],
                    "stop_reason": None,
                    "stop_sequence": None,
                    "usage": {**usage, "output_tokens": 1},
                },
            },
        )
        text_index = 0
        thinking = plan.directive.get("thinking")
        if isinstance(thinking, str):  # a thinking block first, as with extended thinking
            block = {"type": "thinking", "thinking": "", "signature": ""}
            start = {"type": "content_block_start", "index": 0, "content_block": block}
            await event("content_block_start", start)
            for piece in split_text(thinking, 3):
                delta = {"type": "thinking_delta", "thinking": piece}
                block_delta = {"type": "content_block_delta", "index": 0, "delta": delta}
                await event("content_block_delta", block_delta)
            delta = {"type": "signature_delta", "signature": "ZmFrZS1zaWduYXR1cmU="}
            await event(
                "content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta}
            )
            await event("content_block_stop", {"type": "content_block_stop", "index": 0})
            text_index = 1
        else:  # "think": the provider's own events, timed, before the first token
            async for beat, ping_only in self._thinking(plan):
                if ping_only:
                    await event("ping", {"type": "ping"})
                    continue
                if beat == 0:
                    block = {"type": "thinking", "thinking": "", "signature": ""}
                    await event(
                        "content_block_start",
                        {"type": "content_block_start", "index": 0, "content_block": block},
                    )
                    text_index = 1
                delta = {"type": "thinking_delta", "thinking": f"thinking step {beat}. "}
                await event(
                    "content_block_delta",
                    {"type": "content_block_delta", "index": 0, "delta": delta},
                )
            if text_index:
                sig = {"type": "signature_delta", "signature": "fake-signature"}
                await event(
                    "content_block_delta", {"type": "content_block_delta", "index": 0, "delta": sig}
                )
                await event("content_block_stop", {"type": "content_block_stop", "index": 0})
        await event(
            "content_block_start",
            {
                "type": "content_block_start",
                "index": text_index,
                "content_block": {"type": "text", "text": ""},
            },
        )
        await event("ping", {"type": "ping"})
        for i, piece in enumerate(plan.chunks):
            if i and plan.delay:
                await asyncio.sleep(plan.delay)
            await event(
                "content_block_delta",
                {
                    "type": "content_block_delta",
                    "index": text_index,
                    "delta": {"type": "text_delta", "text": piece},
                },
            )
        stream_error = plan.directive.get("stream_error")
        if stream_error:
            await event(
                "error",
                {
                    "type": "error",
                    "error": {
                        "type": str(stream_error),
                        "message": str(
                            plan.directive.get("error_message")
                            or ANTHROPIC_ERROR_MESSAGES.get(str(stream_error), str(stream_error))
                        ),
                    },
                },
            )
            await resp.write_eof()
            return resp
        await event("content_block_stop", {"type": "content_block_stop", "index": text_index})
        await event(
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop_reason, "stop_sequence": None},
                "usage": {**usage, "output_tokens": plan.output_tokens},
            },
        )
        await event("message_stop", {"type": "message_stop"})
        await resp.write_eof()
        return resp

    @staticmethod
    async def _thinking(plan: Plan) -> AsyncIterator[tuple[int, bool]]:
        """The ``think`` directive's beats: (n, ping only), one every ``think_every`` s."""
        seconds = float(plan.directive.get("think", 0) or 0)
        every = float(plan.directive.get("think_every", 0.5) or 0.5)
        ping_only = plan.directive.get("think_kind") == "ping"
        end = asyncio.get_running_loop().time() + seconds
        beat = 0
        while asyncio.get_running_loop().time() < end:
            yield beat, ping_only
            beat += 1
            await asyncio.sleep(every)

    def _anthropic_error(
        self, status: int, message: Any, directive: dict[str, Any]
    ) -> web.Response:
        etype = ANTHROPIC_ERRORS.get(
            status, "api_error" if status >= 500 else "invalid_request_error"
        )
        headers = {"request-id": f"req_fake_{len(self.requests)}"}
        if directive.get("retry_after") is not None:
            headers["retry-after"] = str(directive["retry_after"])
        if directive.get("should_retry") is not None:
            headers["x-should-retry"] = "true" if directive["should_retry"] else "false"
        return web.json_response(
            {
                "type": "error",
                "error": {
                    "type": etype,
                    "message": str(message or ANTHROPIC_ERROR_MESSAGES.get(etype, etype)),
                },
            },
            status=status,
            headers=headers,
        )

    async def anthropic_count_tokens(self, request: web.Request) -> web.Response:
        body = await self._record(request)
        _s, all_text, _u = anthropic_texts(body if isinstance(body, dict) else {})
        return web.json_response({"input_tokens": len(all_text) // 4})

    # ------------------------------------------------------------------ Gemini

    async def gemini_model_call(self, request: web.Request) -> web.StreamResponse:
        body = await self._record(request)
        model, _, method = request.match_info["model_method"].partition(":")
        if not isinstance(body, dict):
            body = {}
        _system, all_text, last_user = gemini_texts(body)
        if method == "countTokens":
            return web.json_response({"totalTokens": len(all_text) // 4})
        if method not in ("generateContent", "streamGenerateContent"):
            return self._gemini_error(404, f"method {method!r} not found", {})
        plan = Plan.make(all_text, last_user)
        if plan.initial_delay:
            await asyncio.sleep(plan.initial_delay)
        if plan.status is not None:
            return self._gemini_error(
                plan.status, plan.directive.get("error_message"), plan.directive
            )

        sr = str(plan.directive.get("stop_reason", "end_turn"))
        finish = {"end_turn": "STOP", "max_tokens": "MAX_TOKENS"}.get(
            sr, sr if sr.isupper() else "STOP"
        )
        usage = {
            "promptTokenCount": plan.input_tokens,
            "candidatesTokenCount": plan.output_tokens,
            "totalTokenCount": plan.input_tokens + plan.output_tokens,
        }
        response_id = f"fake_{len(self.requests)}"

        def chunk(text: str, last: bool, part: dict[str, Any] | None = None) -> dict[str, Any]:
            cand: dict[str, Any] = {
                "content": {"role": "model", "parts": [part or {"text": text}]},
                "index": 0,
            }
            out: dict[str, Any] = {
                "candidates": [cand],
                "modelVersion": model,
                "responseId": response_id,
            }
            if last:
                cand["finishReason"] = finish
                out["usageMetadata"] = usage
            return out

        if method == "generateContent":
            return web.json_response(chunk(plan.answer, True))

        pieces = plan.chunks or [""]
        stream_error = plan.directive.get("stream_error")
        if request.query.get("alt") != "sse":
            # JSON-array streaming form (not used by the gemini CLI).
            return web.json_response(
                [chunk(p, i == len(pieces) - 1 and not stream_error) for i, p in enumerate(pieces)]
            )
        resp = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        await resp.prepare(request)
        async for beat, _ in self._thinking(plan):
            thought = chunk(f"thinking step {beat}. ", False)
            thought["candidates"][0]["content"]["parts"][0]["thought"] = True
            await resp.write(f"data: {json.dumps(thought)}\r\n\r\n".encode())
        thought = plan.directive.get("thought")
        for piece in split_text(thought, 2) if isinstance(thought, str) else []:
            part = {"text": piece, "thought": True}
            await resp.write(f"data: {json.dumps(chunk(piece, False, part))}\r\n\r\n".encode())
        call = plan.directive.get("function_call")
        if isinstance(call, str):  # a call of one of the CLI's own tools (sealing tests)
            args = plan.directive.get("function_args", {})
            part = {"functionCall": {"name": call, "args": args}}
            await resp.write(f"data: {json.dumps(chunk('', True, part))}\r\n\r\n".encode())
            await resp.write_eof()
            return resp
        for i, piece in enumerate(pieces):
            if i and plan.delay:
                await asyncio.sleep(plan.delay)
            last = i == len(pieces) - 1 and not stream_error
            await resp.write(f"data: {json.dumps(chunk(piece, last))}\r\n\r\n".encode())
        await resp.write_eof()
        return resp

    def _gemini_error(self, status: int, message: Any, directive: dict[str, Any]) -> web.Response:
        gstatus = GEMINI_ERRORS.get(status, "INTERNAL" if status >= 500 else "INVALID_ARGUMENT")
        headers = {}
        error: dict[str, Any] = {
            "code": status,
            "message": str(message or GEMINI_ERROR_MESSAGES.get(gstatus, gstatus)),
            "status": gstatus,
        }
        if directive.get("retry_after") is not None:
            headers["retry-after"] = str(directive["retry_after"])
            # the Gemini API says when to retry in the body (google.rpc.RetryInfo)
            retry = {
                "@type": "type.googleapis.com/google.rpc.RetryInfo",
                "retryDelay": f"{directive['retry_after']}s",
            }
            error["details"] = [retry]
        return web.json_response(
            {"error": error},
            status=status,
            headers=headers,
        )

    # ------------------------------------------------------------------ OpenAI Responses

    async def openai_responses(self, request: web.Request) -> web.StreamResponse:
        """``POST /v1/responses`` as the Codex CLI calls it: always a stream of SSE events."""
        body = await self._record(request)
        if not isinstance(body, dict):
            return self._openai_error(400, "request body must be a JSON object", {})
        _system, all_text, last_user = responses_texts(body)
        items = body.get("input") if isinstance(body.get("input"), list) else []
        outputs = [
            i for i in items if isinstance(i, dict) and i.get("type") == "function_call_output"
        ]
        plan = Plan.make(all_text, last_user, len(outputs))
        d = plan.directive
        if plan.initial_delay:
            await asyncio.sleep(plan.initial_delay)
        if plan.status is not None:
            return self._openai_error(plan.status, d.get("error_message"), d)
        model = str(body.get("model") or "gpt-fake")
        n = len(self.requests)
        resp = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        await resp.prepare(request)
        seq = 0

        async def event(name: str, data: dict[str, Any]) -> None:
            nonlocal seq
            payload = {"type": name, **data, "sequence_number": seq}
            seq += 1
            await resp.write(f"event: {name}\ndata: {json.dumps(payload)}\n\n".encode())

        base: dict[str, Any] = {
            "id": f"resp_fake_{n}",
            "object": "response",
            "created_at": 0,
            "model": model,
            "status": "in_progress",
            "output": [],
        }
        await event("response.created", {"response": base})
        output: list[dict[str, Any]] = []
        if d.get("think"):
            rid = f"rs_fake_{n}"
            item = {"id": rid, "type": "reasoning", "summary": []}
            await event("response.output_item.added", {"output_index": 0, "item": item})
            where = {"item_id": rid, "output_index": 0, "summary_index": 0}
            part = {"type": "summary_text", "text": ""}
            await event("response.reasoning_summary_part.added", {**where, "part": part})
            said = []
            async for beat, _ in self._thinking(plan):
                said.append(f"thinking step {beat}. ")
                await event("response.reasoning_summary_text.delta", {**where, "delta": said[-1]})
            part = {"type": "summary_text", "text": "".join(said)}
            await event("response.reasoning_summary_text.done", {**where, "text": part["text"]})
            await event("response.reasoning_summary_part.done", {**where, "part": part})
            item = {**item, "summary": [part]}
            await event("response.output_item.done", {"output_index": 0, "item": item})
            output.append(item)
        elif isinstance(d.get("reasoning"), str):
            item = {
                "id": f"rs_fake_{n}",
                "type": "reasoning",
                "summary": [{"type": "summary_text", "text": d["reasoning"]}],
            }
            await event("response.output_item.added", {"output_index": 0, "item": item})
            await event("response.output_item.done", {"output_index": 0, "item": item})
            output.append(item)
        idx = len(output)
        calls: list[tuple[str, Any]] = []
        if isinstance(d.get("cli_tool_call"), str):
            args = d.get("cli_tool_args", {"cmd": "touch CANARY-cli-tool-call"})
            calls.append((d["cli_tool_call"], args))
        for call in d.get("tool_calls") or [] if isinstance(d.get("tool_calls"), list) else []:
            if isinstance(call, dict) and isinstance(call.get("name"), str):
                calls.append((call["name"], call.get("arguments", {})))
        for k, (name, args) in enumerate(calls):
            if k and plan.delay:
                await asyncio.sleep(plan.delay)
            item = {
                "id": f"fc_fake_{n}_{k}" if k else f"fc_fake_{n}",
                "type": "function_call",
                "status": "completed",
                "call_id": f"call_fake_{n}_{k}" if k else f"call_fake_{n}",
                "name": name,
                "arguments": args if isinstance(args, str) else json.dumps(args),
            }
            await event("response.output_item.added", {"output_index": idx + k, "item": item})
            await event("response.output_item.done", {"output_index": idx + k, "item": item})
            output.append(item)
        if not calls:
            mid = f"msg_fake_{n}"
            item = {
                "id": mid,
                "type": "message",
                "status": "in_progress",
                "role": "assistant",
                "content": [],
            }
            await event("response.output_item.added", {"output_index": idx, "item": item})
            part = {"type": "output_text", "text": "", "annotations": []}
            where = {"item_id": mid, "output_index": idx, "content_index": 0}
            await event("response.content_part.added", {**where, "part": part})
            for i, piece in enumerate(plan.chunks):
                if i and plan.delay:
                    await asyncio.sleep(plan.delay)
                await event("response.output_text.delta", {**where, "delta": piece})
            if d.get("stream_error"):
                failed = {
                    **base,
                    "status": "failed",
                    "error": {
                        "code": str(d["stream_error"]),
                        "message": str(d.get("error_message") or d["stream_error"]),
                    },
                }
                await event("response.failed", {"response": failed})
                await resp.write_eof()
                return resp
            await event("response.output_text.done", {**where, "text": plan.answer})
            part = {**part, "text": plan.answer}
            await event("response.content_part.done", {**where, "part": part})
            item = {**item, "status": "completed", "content": [part]}
            await event("response.output_item.done", {"output_index": idx, "item": item})
            output.append(item)
        usage = {
            "input_tokens": plan.input_tokens,
            "input_tokens_details": {"cached_tokens": int(d.get("cached", 0) or 0)},
            "output_tokens": plan.output_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": plan.input_tokens + plan.output_tokens,
        }
        if d.get("stop_reason") == "max_tokens":
            done = {
                **base,
                "status": "incomplete",
                "incomplete_details": {"reason": "max_output_tokens"},
                "output": output,
                "usage": usage,
            }
            await event("response.incomplete", {"response": done})
        else:
            done = {**base, "status": "completed", "output": output, "usage": usage}
            await event("response.completed", {"response": done})
        await resp.write_eof()
        return resp

    def _openai_error(self, status: int, message: Any, directive: dict[str, Any]) -> web.Response:
        etype, code, default = OPENAI_ERRORS.get(
            status, ("server_error" if status >= 500 else "invalid_request_error", None, "error")
        )
        etype = str(directive.get("error_type") or etype)
        headers = {}
        if directive.get("retry_after") is not None:
            headers["retry-after"] = str(directive["retry_after"])
        error: dict[str, Any] = {
            "message": str(message or default),
            "type": etype,
            "param": None,
            "code": code,
        }
        if etype == "usage_limit_reached":  # the ChatGPT backend's body for a plan's limit
            error = {"type": etype, "message": str(message or "usage limit"), "plan_type": "plus"}
            if directive.get("retry_after") is not None:
                error["resets_in_seconds"] = int(directive["retry_after"])
        return web.json_response({"error": error}, status=status, headers=headers)

    # ------------------------------------------------------------------ fallback

    async def probe(self, request: web.Request) -> web.Response:
        """``HEAD /``: the claude CLI's connectivity probe at startup (recorded, not logged)."""
        await self._record(request)
        return web.Response()

    async def unknown(self, request: web.Request) -> web.Response:
        await self._record(request)
        if self.log_unknown:
            print(
                f"fake_model_api: unknown {request.method} {request.path_qs}",
                file=sys.stderr,
                flush=True,
            )
        return web.json_response({})

    @web.middleware
    async def _bearer(self, request: web.Request, handler: Any) -> web.StreamResponse:
        if self.accept_bearer is not None and request.method == "POST":
            auth = request.headers.get("Authorization", "")
            token = auth[7:] if auth.lower().startswith("bearer ") else ""
            if not self.accept_bearer(token):
                await self._record(request)
                message = "Your authentication token has expired. Please try signing in again."
                if request.path.startswith("/v1/messages"):  # Anthropic's shape
                    body: dict[str, Any] = {"type": "error"}
                    body["error"] = {"type": "authentication_error", "message": message}
                else:
                    body = {"error": {"message": message, "type": "invalid_request_error"}}
                    body["error"] |= {"code": "token_expired", "param": None}
                return web.json_response(body, status=401)
        auth = request.headers.get("Authorization", "")
        if (
            self.openai_key is not None
            and request.method == "POST"
            and request.path == "/v1/responses"
            and auth != f"Bearer {self.openai_key}"
        ):
            await self._record(request)
            return self._openai_key_refused(auth)
        refused = self._key_refused(request)
        if refused is not None:
            await self._record(request)
            return refused
        response: web.StreamResponse = await handler(request)
        return response

    def _key_refused(self, request: web.Request) -> web.Response | None:
        """The Anthropic or Gemini API's answer to a key it does not take (None: taken)."""
        if request.method != "POST":
            return None
        if self.anthropic_key is not None and request.path.startswith("/v1/messages"):
            key = request.headers.get("x-api-key")
            if key == self.anthropic_key:
                return None
            message = "invalid x-api-key" if key else "x-api-key header is required"
            error = {"type": "authentication_error", "message": message}
            return web.json_response({"type": "error", "error": error}, status=401)
        if self.gemini_key is not None and request.path.startswith(("/v1beta/", "/v1/models/")):
            key = request.headers.get("x-goog-api-key") or request.query.get("key")
            if key == self.gemini_key:
                return None
            if not key:  # no credential at all: Google's 403 for an anonymous caller
                error = {
                    "code": 403,
                    "message": "Method doesn't allow unregistered callers (callers without "
                    "established identity). Please use API Key or other form of API consumer "
                    "identity to call this API.",
                    "status": "PERMISSION_DENIED",
                }
                return web.json_response({"error": error}, status=403)
            message = "API key not valid. Please pass a valid API key."
            info = {
                "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                "reason": "API_KEY_INVALID",
                "domain": "googleapis.com",
                "metadata": {"service": "generativelanguage.googleapis.com"},
            }
            localized = {
                "@type": "type.googleapis.com/google.rpc.LocalizedMessage",
                "locale": "en-US",
                "message": message,
            }
            error = {
                "code": 400,
                "message": message,
                "status": "INVALID_ARGUMENT",
                "details": [info, localized],
            }
            return web.json_response({"error": error}, status=400)
        return None

    @staticmethod
    def _openai_key_refused(auth: str) -> web.Response:
        """api.openai.com's 401 for a missing or wrong key (the key shown cut, as it does)."""
        key = auth[7:] if auth.lower().startswith("bearer ") else ""
        if key:
            shown = f"{key[:4]}{'*' * max(0, len(key) - 8)}{key[-4:]}" if len(key) > 8 else key
            message = (
                f"Incorrect API key provided: {shown}. You can find your API key at "
                "https://platform.openai.com/account/api-keys."
            )
        else:
            message = (
                "You didn't provide an API key. You need to provide your API key in an "
                "Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY), "
                "or as the basic auth username and password. You can obtain an API key from "
                "https://platform.openai.com/account/api-keys."
            )
        error = {
            "message": message,
            "type": "invalid_request_error",
            "param": None,
            "code": "invalid_api_key",
        }
        return web.json_response({"error": error}, status=401)

    def make_app(self) -> web.Application:
        middlewares = [self._bearer]
        app = web.Application(client_max_size=64 * 1024 * 1024, middlewares=middlewares)
        app.router.add_post("/v1/messages", self.anthropic_messages)
        app.router.add_post("/v1/messages/count_tokens", self.anthropic_count_tokens)
        app.router.add_post(r"/v1beta/models/{model_method:[^/]+}", self.gemini_model_call)
        app.router.add_post(r"/v1/models/{model_method:[^/]+}", self.gemini_model_call)
        app.router.add_post("/v1/responses", self.openai_responses)
        app.router.add_route("HEAD", "/", self.probe)
        app.router.add_route("*", "/{tail:.*}", self.unknown)
        return app


async def serve_app(
    app: web.Application, host: str = "127.0.0.1", port: int = 0
) -> tuple[web.AppRunner, str]:
    """Start ``app`` on ``host:port`` (0: any free port): the runner (to clean up) and the URL.
    The one start every fake API shares (here, because this module also runs as a script)."""
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    return runner, f"http://{host}:{runner.addresses[0][1]}"


async def start_fake_model_api(
    host: str = "127.0.0.1",
    port: int = 0,
    cache: bool = False,
    openai_key: str | None = None,
    anthropic_key: str | None = None,
    gemini_key: str | None = None,
) -> FakeModelAPI:
    """Start the fake model API on ``host:port`` (0: any free port) and return it; ``cache``
    simulates Anthropic prompt caching (``PromptCache``); ``openai_key``, ``anthropic_key``,
    ``gemini_key``: the only key each API accepts (``FakeModelAPI``)."""
    api = FakeModelAPI(
        cache=PromptCache() if cache else None,
        openai_key=openai_key,
        anthropic_key=anthropic_key,
        gemini_key=gemini_key,
    )
    api._runner, api.url = await serve_app(api.make_app(), host, port)
    return api


async def _main(host: str, port: int, dump: str | None) -> None:
    api = await start_fake_model_api(host, port)
    print(api.url, flush=True)
    written = -1
    try:
        while True:
            await asyncio.sleep(0.5)
            if dump and len(api.requests) != written:
                written = len(api.requests)
                Path(dump).write_text(json.dumps(api.requests, indent=1))
    finally:
        await api.close()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--dump", help="write the received requests as JSON to this file (every 0.5 s)")
    args = ap.parse_args(argv)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_main(args.host, args.port, args.dump))


if __name__ == "__main__":
    main()
