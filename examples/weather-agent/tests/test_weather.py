"""The agent end to end through the gateway: a tool call, the tool's result, an answer.

``cli_proxy_client`` (the cli-proxy pytest plugin) is an ``openai.OpenAI`` client of a
gateway that replays this test's recorded CLI runs from tests/cli-fixtures/test_weather/
test_paris/ (``pytest``), or records them (``pytest --cli-proxy-record-mode=once``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import weather_agent
from fake_model import reply, scripted, tool_call


def service_then(answer: str) -> Callable[[str], str]:
    """The weather service, with the fake model's next answer riding on its result (and a
    support ticket id, which pytest.ini's cli_proxy_record_redact keeps out of recordings)."""

    def tool(city: str) -> str:
        return scripted(
            f"{weather_agent.weather_service(city)} ticket ACME-{len(city):06d}", answer
        )

    return tool


def test_paris(cli_proxy_client: Any) -> None:
    question = scripted("What's the weather in Paris?", tool_call("get_weather", city="Paris"))
    tool = service_then(reply("18 °C and clear in Paris."))
    assert weather_agent.run(cli_proxy_client, question, tool) == "18 °C and clear in Paris."
