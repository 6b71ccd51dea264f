"""The newest google-genai SDK (3.x) through the gateway, on every backend's fake CLI.

The project venv holds google-genai 2.x (google-adk allows no 3.x; docs/gemini-api.md), which
tests/server/test_generate_content.py drives case by case. Here the newest release, in its own
venv (``make genai-latest``), runs tests/clients/genai_latest.py as one subprocess per backend:
all cases in one go (text, SSE stream, a manual function-call round trip, automatic function
calling, an image, thoughts, 401/404/400), every response checked against the SDK's own types
with unknown keys forbidden. The test builds the fake's directives and asserts on the
summary, case by case. Without that venv the tests skip, saying how to make it.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import os
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ServeFactory, fake
from tests.server.test_messages import CLAUDE, CODEX, GEMINI, IMAGES, PNG, calls

ROOT = Path(__file__).resolve().parents[2]
CLIENT = ROOT / "tests" / "clients" / "genai_latest.py"
GENAI_PYTHON = Path(
    os.environ.get("CLI_PROXY_GENAI_PYTHON") or ROOT / ".venv-genai-latest" / "bin" / "python"
)
COPILOT = "copilot/claude-sonnet-4.6"
KEY = "genai-latest-key"

needs_genai_latest = pytest.mark.skipif(
    not os.access(GENAI_PYTHON, os.X_OK),
    reason=f"no newest-google-genai venv at {GENAI_PYTHON} (`make genai-latest` makes it; "
    "`make test` does)",
)
pytestmark = [needs_genai_latest, pytest.mark.timeout(240)]


async def run_genai_latest(plan: dict[str, Any]) -> dict[str, Any]:
    """Run tests/clients/genai_latest.py with ``plan``; its JSON summary. Asynchronous: the
    gateway it calls runs in this test's event loop."""
    proc = await asyncio.create_subprocess_exec(
        str(GENAI_PYTHON),
        str(CLIENT),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={"PATH": os.environ.get("PATH", ""), "HOME": os.environ.get("HOME", "/")},
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(json.dumps(plan).encode()), 200)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.returncode == 0, err.decode()[-3000:]
    summary: dict[str, Any] = json.loads(out)
    return summary


def assert_meta(meta: dict[str, Any], bodies: int) -> None:
    """The run was the newest SDK, on its default ``v1`` paths, strict (at least ``bodies``
    response bodies and chunks checked with unknown keys forbidden), with no warning."""
    assert int(meta["version"].split(".")[0]) >= 3, meta["version"]
    assert meta["paths"] and all(p.startswith("/v1/models/") for p in meta["paths"])
    assert meta["strict_checked"] >= bodies and meta["strict_self_test"] == "ValidationError"
    assert meta["warnings"] == []


def assert_google_error(err: dict[str, Any], kind: str, code: int, status: str) -> None:
    assert (err["type"], err["code"], err["status"]) == (kind, code, status), err
    assert err["message"]
    body = err["body"]
    assert set(body) == {"error"} and set(body["error"]) <= {"code", "message", "status", "details"}
    assert (body["error"]["code"], body["error"]["status"]) == (code, status)


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


THOUGHT = {CLAUDE: "think", GEMINI: "thought", CODEX: "reasoning", COPILOT: "thought"}


def plan_for(model: str) -> dict[str, str]:
    """Each case's user text, with the directive by which ``model``'s fake CLI answers."""
    paris = {"name": "get_weather", "arguments": {"city": "Paris"}}
    echo = {"echo_channel": True} if model == CODEX else {"echo_prompt": True}
    cases = {
        "text": "hello " + fake(answer="Hi there"),
        "stream": "go " + fake(answer="streamed words", chunks=4),
        "call": "weather in Paris? " + fake(**calls(model, paris)),
        "call_back": "so? " + fake(**echo),
        "image": "what colour? "
        + fake(**({"echo_channel": True} if model == CODEX else {"echo_blocks": True})),
        "thinking": "think " + fake(answer="42", **{THOUGHT[model]: "pondering"}),
        "errors": "",
    }
    if model != CODEX:  # the codex fake has no "steps": manual round trips only
        rome = json.dumps({"tool_call": {"name": "get_weather", "arguments": {"city": "Rome"}}})
        cases["afc"] = "weather in Rome? " + fake(steps=[rome, "It is sunny in Rome."])
    return cases


@pytest.mark.parametrize("model", [CLAUDE, GEMINI, CODEX, COPILOT])
async def test_newest_google_genai_on_every_backend(serve: ServeFactory, model: str) -> None:
    served = await serve(api_keys=[KEY])
    root = str(served.server.make_url("/")).rstrip("/")
    cases = plan_for(model)
    out = await run_genai_latest(
        {
            "base_url": root,
            "api_key": KEY,
            "model": model,
            "image": str(IMAGES / "red-8x8.png"),
            "cases": cases,
        }
    )
    failed = {k: v["failed"] for k, v in out.items() if isinstance(v, dict) and "failed" in v}
    assert not failed, failed
    assert_meta(out["meta"], bodies=9)  # one per call, streams more

    text = out["text"]
    assert (text["text"], text["role"], text["finish"]) == ("Hi there", "model", "STOP")
    assert text["model_version"] == model and text["response_id"]
    u = text["usage"]
    assert u["prompt"] and u["candidates"]
    assert u["total"] == u["prompt"] + u["candidates"] + (u["thoughts"] or 0)

    stream = out["stream"]
    assert "".join(stream["pieces"]) == "streamed words" and len(stream["pieces"]) >= 2
    assert stream["finish"] == "STOP" and stream["usage"]["candidates"]
    assert stream["response_ids"] == 1

    call = out["call"]
    assert call["calls"] == [{"name": "get_weather", "args": {"city": "Paris"}, "id": True}]
    assert call["finish"] == "STOP" and call["back_finish"] == "STOP"
    seen = "".join(call["back_pieces"]).replace(" ", "").replace("\\", "")
    assert '"temp_c":21' in seen and "get_weather" in seen  # the result reached the model

    if model == CODEX:
        assert "afc" not in out
    else:
        afc = out["afc"]
        assert afc["ran"] == ["Rome"] and afc["text"] == "It is sunny in Rome."
        assert afc["function_calls"] == 0
        assert afc["roles"] == ["user", "model", "user", "model"]  # call, result, answer
        assert afc["sent"] == [{"name": "get_weather", "response": {"result": "sunny"}}]

    image = out["image"]
    assert image["finish"] == "STOP"
    if model == CODEX:
        assert base64.b64encode(PNG).decode() in image["text"]
    else:
        blocks = json.loads(image["text"])
        assert [(b["image"], b["sha256"]) for b in blocks if "image" in b] == [
            ("image/png", sha(PNG))
        ]

    thinking = out["thinking"]
    assert thinking["parts"] == [[True, "pondering"], [False, "42"]]
    assert thinking["streamed_thought"] == "pondering" and thinking["streamed_text"] == "42"

    errs = out["errors"]
    assert_google_error(errs["401"], "ClientError", 401, "UNAUTHENTICATED")
    assert_google_error(errs["404"], "ClientError", 404, "NOT_FOUND")
    assert_google_error(errs["400"], "ClientError", 400, "INVALID_ARGUMENT")
    assert "candidateCount" in errs["400"]["message"]
