"""The planner (``Gateway.plan``) without HTTP: a request becomes a ``Plan``, or a domain
failure (``InvalidRequest``, ``NotFound``) that says nothing of HTTP; the edge alone
(``server/errors.api_error``) gives it a status."""

from __future__ import annotations

from typing import Any

import pytest

from cli_proxy.failures import CallError, InvalidRequest, NotFound
from cli_proxy.gateway import Gateway, live_backends
from cli_proxy.protocol import ChatCompletionRequest
from cli_proxy.server.errors import APIError, api_error
from tests.conftest import fake_settings

TOOL = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}


def planner(**settings: Any) -> Gateway:
    s = fake_settings(**settings)
    return Gateway(s, live_backends(s))


def request(**body: Any) -> ChatCompletionRequest:
    body.setdefault("model", "claude-sonnet-4-6")
    body.setdefault("messages", [{"role": "user", "content": "hi"}])
    return ChatCompletionRequest.model_validate(body)


def test_a_plan_names_its_process_and_its_input() -> None:
    plan = planner().plan(request(tools=[TOOL]))
    assert plan.launch.backend == "claude"
    assert plan.call.tools_active and "<available_functions>" in plan.call.prompt
    assert plan.call.stdin and plan.request.model == "claude-sonnet-4-6"


@pytest.mark.parametrize(
    ("body", "settings", "kind", "param", "code"),
    [
        ({"model": "no-such-model"}, {}, NotFound, "model", "model_not_found"),
        ({"tools": [TOOL, TOOL]}, {}, InvalidRequest, "tools", "invalid_value"),
        ({"tool_choice": "required"}, {}, InvalidRequest, "tool_choice", "invalid_value"),
        (
            {"tools": [TOOL], "tool_choice": {"type": "function", "function": {"name": "g"}}},
            {},
            InvalidRequest,
            "tool_choice",
            "invalid_value",
        ),
        (
            {"messages": [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]},
            {"max_messages": 1},
            InvalidRequest,
            "messages",
            "too_many_messages",
        ),
        ({}, {"max_prompt_chars": 10}, InvalidRequest, "messages", "context_length_exceeded"),
        (
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [
                            {"type": "image_url", "image_url": {"url": "data:image/png;base64,!!"}}
                        ],
                    }
                ]
            },
            {},
            InvalidRequest,
            "messages[0].content[0].image_url.url",
            "invalid_image",
        ),
    ],
)
def test_what_cannot_run_is_a_domain_failure(
    body: dict[str, Any],
    settings: dict[str, Any],
    kind: type[InvalidRequest],
    param: str,
    code: str,
) -> None:
    with pytest.raises(CallError) as caught:
        planner(**settings).plan(request(**body))
    exc = caught.value
    assert type(exc) is kind or (kind is InvalidRequest and isinstance(exc, kind))
    assert not isinstance(exc, APIError)  # no status below the edge
    assert isinstance(exc, InvalidRequest) and exc.param == param and exc.code == code
    err = api_error(exc)  # the edge decides: 404 for what is not here, else 400
    assert err.status == (404 if kind is NotFound else 400) and err.code == code
