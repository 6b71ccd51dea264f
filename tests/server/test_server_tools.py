"""Server tools never break a client, on every wire format (wire/server_tools.py): a server
tool the gateway cannot run is left out and named in ``x-cli-proxy-dropped-tools`` and the
request log; only a request forcing one is refused; ``server_tools=refuse`` keeps the strict
refusal. Cline 3.0.65's request shape (tests/data/clients/, its sources there) on all three
backends, and the same rule on the Responses and Gemini paths."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import structlog

from tests.conftest import Served, ServeFactory, fake

CLAUDE, GEMINI, CODEX = "claude-sonnet-4-6", "gemini-2.5-flash", "gpt-5.5"
CLINE = json.loads(
    (
        Path(__file__).resolve().parents[1]
        / "data"
        / "clients"
        / "cline-3.0.65-anthropic.request.json"
    ).read_text()
)
HEADER = "x-cli-proxy-dropped-tools"


def cline_request(model: str, answer: str = "Hi from the gateway") -> dict[str, Any]:
    body = copy.deepcopy(CLINE["body"])
    body["model"] = model
    body["messages"][0]["content"][0]["text"] += " " + fake(answer=answer)
    return body


async def post(
    served: Served, path: str, body: dict[str, Any], headers: dict[str, str] | None = None
) -> tuple[int, dict[str, str], str]:
    url = str(served.server.make_url(path))
    async with aiohttp.ClientSession() as s, s.post(url, json=body, headers=headers) as r:
        return r.status, dict(r.headers), await r.text()


# what the HTTP client sets itself (the body is changed per test, so Content-Length too)
TRANSPORT = {"content-type", "content-length", "host", "connection", "accept-encoding"}


def cline_headers() -> dict[str, str]:
    """Cline's captured headers as an HTTP client would send them again."""
    return {k: v for k, v in CLINE["headers"].items() if k.lower() not in TRANSPORT}


# ------------------------------------------------------------------ Cline on /v1/messages


def test_the_recorded_shape_is_clines() -> None:
    """What the tests below rely on, as captured from Cline 3.0.65 (the .md beside the file):
    the server tool first, beside 25 client tools with eager_input_streaming on each, and the
    structured-outputs beta."""
    assert (CLINE["method"], CLINE["path"]) == ("POST", "/v1/messages")
    tools = CLINE["body"]["tools"]
    assert tools[0] == {"type": "web_search_20250305", "name": "web_search"}
    client = tools[1:]
    assert len(client) == 25 and all(t["eager_input_streaming"] is True for t in client)
    assert all("type" not in t and t["input_schema"]["type"] == "object" for t in client)
    assert CLINE["headers"]["anthropic-beta"] == "structured-outputs-2025-11-13"
    assert CLINE["headers"]["x-api-key"] == "KEY"  # the fake key of the capture, redacted


@pytest.mark.parametrize("model", [CLAUDE, GEMINI, CODEX])
async def test_cline_request_is_served_and_names_the_dropped_tool(
    served: Served, model: str
) -> None:
    with structlog.testing.capture_logs() as logs:
        status, headers, text = await post(
            served, "/v1/messages", cline_request(model), cline_headers()
        )
    assert status == 200, text
    assert headers[HEADER] == "web_search_20250305"
    events = [
        json.loads(line[len("data: ") :]) for line in text.splitlines() if line.startswith("data: ")
    ]
    kinds = [e["type"] for e in events]
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    said = "".join(
        e["delta"]["text"]
        for e in events
        if e["type"] == "content_block_delta" and e["delta"]["type"] == "text_delta"
    )
    assert said == "Hi from the gateway"
    done = [e for e in logs if e.get("api") == "messages" and "status" in e]
    assert done and done[0]["dropped_tools"] == ["web_search_20250305"]
    assert done[0]["tools"] == 25  # the client's own tools reached the model


async def test_the_model_sees_the_client_tools_and_not_the_server_tool(served: Served) -> None:
    body = cline_request(CLAUDE)
    body["stream"] = False
    body["messages"][0]["content"][0]["text"] = "go " + fake(echo_prompt=True)
    status, _headers, text = await post(served, "/v1/messages", body, cline_headers())
    assert status == 200, text
    prompt = json.loads(text)["content"][0]["text"]
    assert "read_files" in prompt and "team_list_outcomes" in prompt
    assert "web_search" not in prompt


async def test_a_forced_server_tool_is_refused(served: Served) -> None:
    body = cline_request(CLAUDE)
    body["tool_choice"] = {"type": "tool", "name": "web_search"}
    status, _headers, text = await post(served, "/v1/messages", body, cline_headers())
    assert status == 400
    err = json.loads(text)
    assert err["type"] == "error" and err["error"]["type"] == "invalid_request_error"
    assert "web_search_20250305" in err["error"]["message"]
    assert "tool_choice" in err["error"]["message"]


async def test_any_with_only_server_tools_is_refused(served: Served) -> None:
    body = cline_request(CLAUDE)
    body["tools"] = body["tools"][:1]
    body["tool_choice"] = {"type": "any"}
    status, _, text = await post(served, "/v1/messages", body, cline_headers())
    assert status == 400 and "web_search_20250305" in text


async def test_strict_setting_keeps_the_refusal(serve: ServeFactory) -> None:
    served = await serve(server_tools="refuse")
    status, headers, text = await post(
        served, "/v1/messages", cline_request(CLAUDE), cline_headers()
    )
    assert status == 400 and HEADER not in headers
    err = json.loads(text)["error"]
    assert "tools[0].type" in err["message"] and "server_tools=refuse" in err["message"]


async def test_no_header_without_server_tools(served: Served) -> None:
    body = cline_request(CLAUDE)
    body["tools"] = body["tools"][1:]
    status, headers, _ = await post(served, "/v1/messages", body, cline_headers())
    assert status == 200 and HEADER not in headers


# ------------------------------------------------------------------ Responses and Gemini


@pytest.mark.parametrize("model", [CLAUDE, CODEX])
async def test_responses_web_search_is_left_out(served: Served, model: str) -> None:
    body = {
        "model": model,
        "input": "hi " + fake(answer="no search needed"),
        "tools": [
            {"type": "web_search_preview"},
            {"type": "file_search", "vector_store_ids": ["vs_1"]},
            {"type": "function", "name": "get_time", "parameters": {"type": "object"}},
        ],
    }
    status, headers, text = await post(served, "/v1/responses", body)
    assert status == 200, text
    assert headers[HEADER] == "web_search_preview, file_search"
    assert json.loads(text)["output"][0]["content"][0]["text"] == "no search needed"


async def test_responses_forced_server_tool_is_refused(served: Served) -> None:
    body = {
        "model": CLAUDE,
        "input": "hi",
        "tools": [{"type": "web_search_preview"}],
        "tool_choice": {"type": "web_search_preview"},
    }
    status, _, text = await post(served, "/v1/responses", body)
    assert status == 400
    assert json.loads(text)["error"]["param"] == "tool_choice.type"


@pytest.mark.parametrize("model", [CLAUDE, GEMINI, CODEX])
async def test_gemini_google_search_is_left_out(served: Served, model: str) -> None:
    body = {
        "contents": [{"role": "user", "parts": [{"text": "hi " + fake(answer="grounded? no")}]}],
        "tools": [
            {"googleSearch": {}},
            {"code_execution": {}},
            {"urlContext": {}},
            {"functionDeclarations": [{"name": "get_time"}]},
        ],
    }
    status, headers, text = await post(
        served, f"/v1beta/models/{model}:generateContent", body, {"x-goog-api-key": "k"}
    )
    assert status == 200, text
    assert headers[HEADER] == "googleSearch, codeExecution, urlContext"
    parts = json.loads(text)["candidates"][0]["content"]["parts"]
    assert parts == [{"text": "grounded? no"}]


async def test_gemini_strict_setting_refuses(serve: ServeFactory) -> None:
    served = await serve(server_tools="refuse")
    body = {"contents": [{"parts": [{"text": "hi"}]}], "tools": [{"googleSearch": {}}]}
    status, _, text = await post(served, f"/v1beta/models/{CLAUDE}:generateContent", body)
    assert status == 400
    err = json.loads(text)["error"]
    assert err["status"] == "INVALID_ARGUMENT" and "googleSearch" in err["message"]
