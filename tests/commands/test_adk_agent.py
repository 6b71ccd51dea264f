"""A Google ADK agent on gemini through the gateway, as the product this gateway grew from runs
it: a LiteLLM ``openai/`` model pointed at ``/v1``, tools, and a ``before_model_callback`` that
injects the latest screenshot before every model call. With the fake gemini (ACP), scripted
to call one tool per step and to say how many images it got with each prompt, the agent must
finish a two-tool task, each call carrying its screenshot in place.

Skipped when ``google-adk`` or ``litellm`` is not installed (both are dev dependencies)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.conftest import Served, fake
from tests.plan.test_images import PNG

pytestmark = pytest.mark.timeout(180)  # the first import of google.adk takes ~30 s here

adk_agents = pytest.importorskip("google.adk.agents", reason="google-adk is not installed")
lite_llm = pytest.importorskip("google.adk.models.lite_llm", reason="litellm is not installed")
from google.adk.runners import InMemoryRunner  # noqa: E402
from google.genai import types  # noqa: E402


def call(name: str, **arguments: Any) -> str:
    return json.dumps({"tool_call": {"name": name, "arguments": arguments}})


async def test_adk_agent_with_a_screenshot_callback_finishes_a_tool_task(served: Served) -> None:
    used: list[tuple[str, Any]] = []
    screenshots = 0

    def get_weather(city: str) -> dict[str, Any]:
        """The current temperature of a city, in degrees Celsius."""
        used.append(("get_weather", city))
        return {"city": city, "celsius": 20}

    def to_fahrenheit(celsius: float) -> dict[str, Any]:
        """Converts degrees Celsius to degrees Fahrenheit."""
        used.append(("to_fahrenheit", celsius))
        return {"fahrenheit": celsius * 9 / 5 + 32}

    def inject_screenshot(callback_context: Any, llm_request: Any) -> None:
        nonlocal screenshots
        screenshots += 1
        screen = types.Content(
            role="user",
            parts=[
                types.Part(text="The desktop right now:"),
                types.Part.from_bytes(data=PNG, mime_type="image/png"),
            ],
        )
        llm_request.contents.append(screen)

    model = lite_llm.LiteLlm(
        model="openai/gemini-2.5-flash", api_base=served.base_url, api_key="test"
    )
    agent = adk_agents.LlmAgent(
        name="executor",
        model=model,
        instruction="Answer with the tools.",
        tools=[get_weather, to_fahrenheit],
        before_model_callback=inject_screenshot,
    )
    runner = InMemoryRunner(agent=agent, app_name="cli-proxy-test")
    session = await runner.session_service.create_session(app_name="cli-proxy-test", user_id="u")
    steps = [
        call("get_weather", city="Paris"),
        call("to_fahrenheit", celsius=20),
        '{"tool_call":null,"response":"Paris is at 68 F (images seen: {images})"}',
    ]
    task = "How warm is Paris in Fahrenheit?" + fake(steps=steps)
    final = ""
    async for event in runner.run_async(
        user_id="u",
        session_id=session.id,
        new_message=types.Content(role="user", parts=[types.Part(text=task)]),
    ):
        if event.is_final_response() and event.content and event.content.parts:
            final = "".join(p.text or "" for p in event.content.parts)
    await runner.close()
    assert used == [("get_weather", "Paris"), ("to_fahrenheit", 20)]
    assert screenshots == 3  # one per model call
    assert final == "Paris is at 68 F (images seen: 1)"  # each prompt: its own screenshot


@pytest.mark.parametrize("model_id", ["gemini-2.5-flash", "claude-sonnet-4-6"])
async def test_adk_agent_on_the_native_gemini_model_class(
    served: Served, model_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same agent with ADK's native ``Gemini`` model class (google-genai, Google's
    Gemini API) pointed at the gateway's root: any backend's model id, the tools run by ADK,
    each model call carrying its screenshot."""
    from google.adk.models.google_llm import Gemini

    monkeypatch.setenv("GOOGLE_API_KEY", "test")
    monkeypatch.delenv("GOOGLE_GENAI_USE_VERTEXAI", raising=False)
    used: list[tuple[str, Any]] = []
    screenshots = 0

    def get_weather(city: str) -> dict[str, Any]:
        """The current temperature of a city, in degrees Celsius."""
        used.append(("get_weather", city))
        return {"city": city, "celsius": 20}

    def to_fahrenheit(celsius: float) -> dict[str, Any]:
        """Converts degrees Celsius to degrees Fahrenheit."""
        used.append(("to_fahrenheit", celsius))
        return {"fahrenheit": celsius * 9 / 5 + 32}

    def inject_screenshot(callback_context: Any, llm_request: Any) -> None:
        nonlocal screenshots
        screenshots += 1
        llm_request.contents.append(
            types.Content(
                role="user",
                parts=[
                    types.Part(text="The desktop right now:"),
                    types.Part.from_bytes(data=PNG, mime_type="image/png"),
                ],
            )
        )

    root = str(served.server.make_url("/")).rstrip("/")
    agent = adk_agents.LlmAgent(
        name="executor",
        model=Gemini(model=model_id, base_url=root),
        instruction="Answer with the tools.",
        tools=[get_weather, to_fahrenheit],
        before_model_callback=inject_screenshot,
    )
    runner = InMemoryRunner(agent=agent, app_name="cli-proxy-test")
    session = await runner.session_service.create_session(app_name="cli-proxy-test", user_id="u")
    steps = [
        call("get_weather", city="Paris"),
        call("to_fahrenheit", celsius=20),
        '{"tool_call":null,"response":"Paris is at 68 F (images seen: {images})"}',
    ]
    final = ""
    async for event in runner.run_async(
        user_id="u",
        session_id=session.id,
        new_message=types.Content(
            role="user", parts=[types.Part(text="How warm is Paris?" + fake(steps=steps))]
        ),
    ):
        if event.is_final_response() and event.content and event.content.parts:
            final = "".join(p.text or "" for p in event.content.parts)
    await runner.close()
    assert used == [("get_weather", "Paris"), ("to_fahrenheit", 20)]
    assert screenshots == 3
    seen = "1" if model_id.startswith("gemini") else "0"  # the claude fake counts none
    assert final == f"Paris is at 68 F (images seen: {seen})"
