"""The newest google-genai SDK (3.x) on REAL CLIs: one of each family, the least that shows it.

tests/clients/genai_latest.py (its own venv, ``make genai-latest``) -> gateway -> the real
pinned codex (app-server, native function calls) and the real pinned copilot (ACP, the client
gemini --acp shares) -> tests/fakes/fake_model_api.py on loopback. One subprocess per CLI, one
case: a function call, its result sent back with ``Part.from_function_response``, the answer
read as an SSE stream; two real CLI runs that show a call, text and a stream in the newest
SDK's own shapes. Every other case runs on every backend's fake CLI
(tests/server/test_generate_content_latest.py) and, with google-genai 2.x, on the real claude,
gemini and codex (tests/realcli/test_real_cli_generate_content.py); docs/gemini-api.md says why
this set is enough.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.conftest import fake
from tests.fakes.fake_model_api import anthropic_texts
from tests.realcli import test_real_cli_copilot, test_real_cli_messages
from tests.realcli.test_real_cli_copilot import Copilot
from tests.realcli.test_real_cli_messages import CODEX, GATEWAY_KEY, Stack, answer_json
from tests.server.test_generate_content_latest import (
    assert_meta,
    needs_genai_latest,
    run_genai_latest,
)

# the fixtures: the gateway, the real CLIs, the fake model API
stack = test_real_cli_messages.stack
copilot = test_real_cli_copilot.copilot
package_cache = test_real_cli_copilot.package_cache

pytestmark = [pytest.mark.realcli, needs_genai_latest, pytest.mark.timeout(240)]

PARIS = {"name": "get_weather", "arguments": {"city": "Paris"}}
DONE = "It is sunny in Paris."


def round_trip(out: dict[str, Any]) -> None:
    assert "failed" not in out["call"], out["call"]
    assert_meta(out["meta"], bodies=2)
    call = out["call"]
    assert call["calls"] == [{"name": "get_weather", "args": {"city": "Paris"}, "id": True}]
    assert call["finish"] == "STOP" and call["back_finish"] == "STOP"
    assert "".join(call["back_pieces"]) == DONE


@pytest.mark.skipif(
    test_real_cli_messages.CLI_DIR is None, reason="real claude/gemini/codex binaries not found"
)
async def test_newest_google_genai_on_real_codex(stack: Stack) -> None:
    steps = [{"tool_calls": [PARIS]}, {"answer": DONE}]
    out = await run_genai_latest(
        {
            "base_url": stack.root_url,
            "api_key": GATEWAY_KEY,
            "model": CODEX,
            "cases": {"call": "Weather in Paris?" + fake(steps=steps), "call_back": ""},
        }
    )
    round_trip(out)
    first, second = stack.model_requests(CODEX)
    assert [t["name"] for t in first["body"]["tools"]] == ["get_weather"]
    outputs = [i for i in second["body"]["input"] if i.get("type") == "function_call_output"]
    assert len(outputs) == 1 and '"temp_c": 21' in json.dumps(json.loads(outputs[0]["output"]))
    stack.assert_keys()


@pytest.mark.skipif(test_real_cli_copilot.CLI_DIR is None, reason="real copilot binary not found")
async def test_newest_google_genai_on_real_copilot(copilot: Copilot) -> None:
    steps = [{"answer": json.dumps({"tool_call": PARIS})}, {"answer": answer_json(DONE)}]
    root = str(copilot.served.server.make_url("/")).rstrip("/")
    out = await run_genai_latest(
        {
            "base_url": root,
            "api_key": "any",
            "model": test_real_cli_copilot.MODEL,
            "cases": {"call": "Weather in Paris?" + fake(steps=steps), "call_back": ""},
        }
    )
    round_trip(out)
    first, second = copilot.bodies()
    assert not first.get("tools")  # the client's function is in the prompt; copilot's are off
    result = anthropic_texts(second)[1].split('role="tool_result"', 1)[1].split("</turn>")[0]
    assert '"temp_c":21' in result.replace(" ", "")
