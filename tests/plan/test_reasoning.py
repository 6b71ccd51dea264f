"""The reasoning knob: ``reasoning_effort`` (chat) and ``reasoning.effort`` (Responses) map to
``claude --effort`` and a gemini thinking budget; the configured default applies when a
request names none."""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest

from cli_proxy.gateway import Gateway, live_backends
from cli_proxy.protocol import ChatCompletionRequest
from cli_proxy.server.wire.responses import ResponsesRequest, responses_to_chat
from tests.conftest import Served, ServeFactory, fake_settings


def plan_for(gw: Gateway, **fields: Any) -> Any:
    body = {"messages": [{"role": "user", "content": "hi"}], **fields}
    return gw.plan(ChatCompletionRequest.model_validate(body))


def claude_effort(argv: tuple[str, ...]) -> str | None:
    return argv[argv.index("--effort") + 1] if "--effort" in argv else None


def gemini_thinking(plan: Any) -> Any:
    settings = json.loads(dict(plan.launch.workdir_files)[".gemini/settings.json"])
    overrides = settings.get("modelConfigs", {}).get("customOverrides")
    if not overrides:
        return None
    assert overrides[0]["match"] == {"model": plan.request.model.split("/")[-1]}
    return overrides[0]["modelConfig"]["generateContentConfig"]["thinkingConfig"]


@pytest.mark.parametrize(
    ("effort", "claude", "budget"),
    [
        (None, None, None),
        ("none", "low", 0),
        ("minimal", "low", 512),
        ("low", "low", 1024),
        ("medium", "medium", 8192),
        ("high", "high", 24576),
        ("xhigh", "xhigh", 24576),
    ],
)
def test_effort_maps_to_each_cli(
    effort: str | None, claude: str | None, budget: int | None
) -> None:
    settings = fake_settings()
    gw = Gateway(settings, live_backends(settings))
    extra = {"reasoning_effort": effort} if effort else {}
    assert claude_effort(plan_for(gw, model="claude-sonnet-4-6", **extra).launch.argv) == claude
    thinking = gemini_thinking(plan_for(gw, model="gemini-2.5-flash", **extra))
    assert thinking == (None if budget is None else {"thinkingBudget": budget})
    if effort:
        level = gemini_thinking(plan_for(gw, model="gemini-3-pro", **extra))
        assert level in ({"thinkingLevel": "low"}, {"thinkingLevel": "high"})


def test_configured_default_applies_when_the_request_names_none() -> None:
    settings = fake_settings(reasoning_effort="low")
    gw = Gateway(settings, live_backends(settings))
    assert claude_effort(plan_for(gw, model="sonnet").launch.argv) == "low"
    assert (
        claude_effort(plan_for(gw, model="sonnet", reasoning_effort="high").launch.argv) == "high"
    )


def test_responses_reasoning_effort() -> None:
    rreq = ResponsesRequest.model_validate(
        {"model": "sonnet", "input": "hi", "reasoning": {"effort": "medium"}}
    )
    assert responses_to_chat(rreq).reasoning_effort == "medium"


async def test_unknown_effort_is_a_clear_400(served: Served) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        await served.client.chat.completions.create(
            model="sonnet",
            messages=[{"role": "user", "content": "hi"}],
            reasoning_effort="extreme",  # type: ignore[arg-type]
        )
    assert info.value.body["param"] == "reasoning_effort"  # type: ignore[index]


async def test_effort_call_answers(serve: ServeFactory) -> None:
    s = await serve()
    for model in ("claude-sonnet-4-6", "gemini-2.5-flash"):
        r = await s.client.chat.completions.create(
            model=model, messages=[{"role": "user", "content": "hi"}], reasoning_effort="low"
        )
        assert r.choices[0].message.content
