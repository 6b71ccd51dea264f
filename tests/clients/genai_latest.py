"""The newest google-genai SDK against the gateway, strictly, run by its own venv's python.

google-adk (a dev dependency) holds the project venv's google-genai below 3, so the newest
release lives in ``.venv-genai-latest`` (``make genai-latest``) and this script runs there as a
subprocess: only the SDK and the standard library, nothing of the project. The tests that run
it (tests/server/test_generate_content_latest.py on every backend's fake CLI, and
tests/realcli/test_real_cli_genai_latest.py on real CLIs) build the plan, so the script
knows nothing of backends or fakes.

stdin, one JSON object::

    {"base_url", "api_key", "model", "image": a PNG's path,
     "cases": {case: the user text that scripts the model (a fake's directive), ...}}

Cases: ``text``; ``stream`` (SSE); ``call`` with ``call_back`` (a function call, then its
result sent back with ``Part.from_function_response`` and the answer read as a stream);
``afc`` (automatic function calling through ``chats``, as the SDK recommends); ``image``;
``thinking`` (include_thoughts, whole and streamed); ``errors`` (401 with a wrong key, 404 an
unknown model, 400 ``candidate_count=2``). Only the cases given run.

stdout, one JSON object: each case's facts (or ``{"failed": "<exception>"}``), and ``meta``:
the SDK's version, the URL paths it called, every warning it logged, how many bodies the
strict hook checked and its self-test, each case's seconds. The SDK's defaults are kept
(``api_version`` ``v1``; no retries).

Strict: google-genai drops what it does not know from a response, for forward compatibility
(its response converters copy the known keys only). Here every response body and stream
chunk the SDK parses is first validated against its own ``GenerateContentResponse`` with
unknown keys forbidden (its models' ``extra="forbid"``), so an unknown key, a wrong type or a
malformed chunk makes the SDK call raise; a warning the SDK logs is reported, and Python
warnings are errors.
"""

from __future__ import annotations

import json
import logging
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from google import genai
from google.genai import errors, models, types

warnings.simplefilter("error")


# ------------------------------------------------------------------ strict responses

_convert = models._GenerateContentResponse_from_mldev  # the one way every response body goes
CHECKED = [0]  # bodies and chunks validated: the hook is live in the calls, not only in a test


def _strict_convert(from_object: Any, *args: Any, **kwargs: Any) -> Any:
    """Refuse what the SDK would silently drop; then convert as the SDK does."""
    types.GenerateContentResponse.model_validate(from_object)
    CHECKED[0] += 1
    return _convert(from_object, *args, **kwargs)


models._GenerateContentResponse_from_mldev = _strict_convert


def strict_self_test() -> str:
    """The hook bites: an unknown key in a part is refused (its exception's name)."""
    planted = {"candidates": [{"content": {"role": "model", "parts": [{"text": "x", "y": 1}]}}]}
    try:
        models._GenerateContentResponse_from_mldev(planted)
    except Exception as exc:
        return type(exc).__name__
    return "not refused"


class Warnings(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.seen: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.seen.append(f"{record.name}: {record.getMessage()}")


# ------------------------------------------------------------------ the cases

WEATHER = types.FunctionDeclaration(
    name="get_weather",
    description="Current weather for a city",
    parameters=types.Schema(
        type=types.Type.OBJECT,
        properties={"city": types.Schema(type=types.Type.STRING)},
        required=["city"],
    ),
)


def usage(r: types.GenerateContentResponse) -> dict[str, Any]:
    u = r.usage_metadata or types.GenerateContentResponseUsageMetadata()
    return {
        "prompt": u.prompt_token_count,
        "candidates": u.candidates_token_count,
        "thoughts": u.thoughts_token_count,
        "total": u.total_token_count,
    }


def finish(r: types.GenerateContentResponse) -> str | None:
    reason = r.candidates[0].finish_reason if r.candidates else None
    return reason.value if reason else None


def parts(r: types.GenerateContentResponse) -> list[list[Any]]:
    content = r.candidates[0].content if r.candidates else None
    return [[bool(p.thought), p.text] for p in (content.parts if content else None) or []]


def text_case(c: genai.Client, model: str, ask: str) -> dict[str, Any]:
    config = types.GenerateContentConfig(system_instruction="Be brief.")
    r = c.models.generate_content(model=model, contents=ask, config=config)
    role = r.candidates[0].content.role if r.candidates and r.candidates[0].content else None
    return {
        "text": r.text,
        "role": role,
        "finish": finish(r),
        "usage": usage(r),
        "model_version": r.model_version,
        "response_id": bool(r.response_id),
    }


def stream_case(c: genai.Client, model: str, ask: str) -> dict[str, Any]:
    chunks = list(c.models.generate_content_stream(model=model, contents=ask))
    return {
        "pieces": [ch.text or "" for ch in chunks],
        "finish": finish(chunks[-1]),
        "usage": usage(chunks[-1]),
        "response_ids": len({ch.response_id for ch in chunks}),
    }


def call_case(c: genai.Client, model: str, ask: str, back: str) -> dict[str, Any]:
    config = types.GenerateContentConfig(tools=[types.Tool(function_declarations=[WEATHER])])
    first = c.models.generate_content(model=model, contents=ask, config=config)
    called = first.candidates[0].content if first.candidates else None
    history: list[types.Content] = [
        types.Content(role="user", parts=[types.Part(text=ask)]),
        called or types.Content(),
        types.Content(
            role="user",
            parts=[
                types.Part.from_function_response(name="get_weather", response={"temp_c": 21}),
                *([types.Part(text=back)] if back else []),
            ],
        ),
    ]
    chunks = list(c.models.generate_content_stream(model=model, contents=history, config=config))
    return {
        "calls": [
            {"name": f.name, "args": f.args, "id": bool(f.id)} for f in first.function_calls or []
        ],
        "finish": finish(first),
        "back_pieces": [ch.text or "" for ch in chunks],
        "back_finish": finish(chunks[-1]),
    }


def afc_case(c: genai.Client, model: str, ask: str) -> dict[str, Any]:
    ran: list[str] = []

    def get_weather(city: str) -> str:
        """Current weather for a city."""
        ran.append(city)
        return "sunny"

    chat = c.chats.create(model=model, config=types.GenerateContentConfig(tools=[get_weather]))
    r = chat.send_message(ask)
    history = chat.get_history()  # 3.x: the chat's turns hold the exchange
    sent = [p.function_response for h in history for p in h.parts or [] if p.function_response]
    return {
        "ran": ran,
        "text": r.text,
        "function_calls": len(r.function_calls or []),
        "roles": [h.role for h in history],
        "sent": [{"name": s.name, "response": s.response} for s in sent],
    }


def image_case(c: genai.Client, model: str, ask: str, png: bytes) -> dict[str, Any]:
    r = c.models.generate_content(
        model=model, contents=[types.Part.from_bytes(data=png, mime_type="image/png"), ask]
    )
    return {"text": r.text, "finish": finish(r)}


def thinking_case(c: genai.Client, model: str, ask: str) -> dict[str, Any]:
    config = types.GenerateContentConfig(
        thinking_config=types.ThinkingConfig(include_thoughts=True, thinking_budget=1024)
    )
    whole = c.models.generate_content(model=model, contents=ask, config=config)
    streamed = [
        p
        for ch in c.models.generate_content_stream(model=model, contents=ask, config=config)
        for p in parts(ch)
        if p[1]
    ]
    return {
        "parts": parts(whole),
        "thoughts_tokens": usage(whole)["thoughts"],
        "streamed_thought": "".join(t for th, t in streamed if th),
        "streamed_text": "".join(t for th, t in streamed if not th),
    }


def error_of(call: Callable[[], Any]) -> dict[str, Any]:
    try:
        call()
    except errors.APIError as exc:
        return {
            "type": type(exc).__name__,
            "code": exc.code,
            "status": exc.status,
            "message": exc.message,
            "body": exc.details,
        }
    return {"type": None}


def errors_case(c: genai.Client, plan: dict[str, Any], model: str) -> dict[str, Any]:
    wrong = client(plan, api_key="not-" + plan["api_key"])
    too_many = types.GenerateContentConfig(candidate_count=2)
    return {
        "401": error_of(lambda: wrong.models.generate_content(model=model, contents="hi")),
        "404": error_of(lambda: c.models.generate_content(model="no-such-model", contents="hi")),
        "400": error_of(
            lambda: c.models.generate_content(model=model, contents="hi", config=too_many)
        ),
    }


# ------------------------------------------------------------------ the run

PATHS: list[str] = []
SECONDS: dict[str, float] = {}  # each case's wall time (where a slow run spends it)


def client(plan: dict[str, Any], api_key: str | None = None) -> genai.Client:
    def seen(request: Any) -> None:
        PATHS.append(request.url.path)

    return genai.Client(
        api_key=api_key or plan["api_key"],
        http_options=types.HttpOptions(
            base_url=plan["base_url"],
            timeout=180_000,
            client_args={"event_hooks": {"request": [seen]}},
        ),
    )


def run(plan: dict[str, Any]) -> dict[str, Any]:
    c, model, cases = client(plan), plan["model"], plan["cases"]
    png = Path(plan["image"]).read_bytes() if "image" in cases else b""
    runs: dict[str, Callable[[], dict[str, Any]]] = {
        "text": lambda: text_case(c, model, cases["text"]),
        "stream": lambda: stream_case(c, model, cases["stream"]),
        "call": lambda: call_case(c, model, cases["call"], cases.get("call_back", "")),
        "afc": lambda: afc_case(c, model, cases["afc"]),
        "image": lambda: image_case(c, model, cases["image"], png),
        "thinking": lambda: thinking_case(c, model, cases["thinking"]),
        "errors": lambda: errors_case(c, plan, model),
    }
    out: dict[str, Any] = {}
    for name, case in runs.items():
        if name in cases:
            start = time.monotonic()
            try:
                out[name] = case()
            except Exception as exc:  # one case's failure is reported; the rest still run
                out[name] = {"failed": f"{type(exc).__name__}: {exc}"[:2000]}
            SECONDS[name] = round(time.monotonic() - start, 3)
    return out


def main() -> int:
    SECONDS["start_cpu"] = round(time.process_time(), 3)  # the SDK's import, mostly
    logged = Warnings()
    logging.getLogger("google_genai").addHandler(logged)
    out = run(json.load(sys.stdin))
    out["meta"] = {
        "version": genai.__version__,
        "paths": sorted(set(PATHS)),
        "warnings": logged.seen,
        "strict_checked": CHECKED[0],
        "strict_self_test": strict_self_test(),
        "seconds": SECONDS,
    }
    json.dump(out, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
