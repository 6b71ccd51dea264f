"""Fixture keys: every request field that changes what the CLI receives is in the key.

The walk below covers every field of the request model (a new field fails the test until
it is given a variant here): for each backend, a field outside the key must leave the CLI's
argv, env, work-dir files, private home and stdin byte-identical. The two deliberate
exceptions are tested on their own: tool-call ids are keyed by position, and scrubbed
values (secrets, machine paths) are keyed as scrubbed.
"""

from __future__ import annotations

import copy
import os
from typing import Any

import pytest

from cli_proxy.fixtures import Redactor, normalized_request, request_key
from cli_proxy.gateway import Gateway, live_backends
from cli_proxy.protocol import ChatCompletionRequest

from .conftest import fake_settings
from .test_chat import TIME, WEATHER

MODELS = {
    "claude": ("claude-sonnet-4-6", "claude-opus-4-1"),
    "gemini": ("gemini-2.5-flash", "gemini-2.5-pro"),
    "codex": ("gpt-5.5", "gpt-5.6-sol"),
}

BASE: dict[str, Any] = {
    "messages": [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Weather in Paris?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_abc",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_abc", "content": '{"temp_c": 18}'},
    ],
    "tools": [WEATHER],
}

# field -> a change to the base request that sets it to something else
VARIANTS: dict[str, dict[str, Any]] = {
    "model": {},  # filled per backend: another model of the same backend
    "messages": {"messages": [{"role": "user", "content": "Weather in Rome?"}]},
    "tools": {"tools": [WEATHER, TIME]},
    "tool_choice": {"tool_choice": "required"},
    "parallel_tool_calls": {"parallel_tool_calls": False},
    "response_format": {"response_format": {"type": "json_object"}},
    "reasoning_effort": {"reasoning_effort": "high"},
    "stream": {"stream": True},
    "stream_options": {"stream": True, "stream_options": {"include_usage": True}},
    "user": {"user": "someone"},
    "temperature": {"temperature": 0.3},
    "top_p": {"top_p": 0.5},
    "max_tokens": {"max_tokens": 99},
    "max_completion_tokens": {"max_completion_tokens": 99},
    "n": {"n": 1},
    "stop": {"stop": ["END"]},
    "seed": {"seed": 7},
}


def cli_input(gateway: Gateway, body: dict[str, Any]) -> tuple[Any, ...]:
    """Everything the CLI process receives for this request."""
    plan = gateway.plan(ChatCompletionRequest.model_validate(body))
    launch = plan.launch
    return (launch.argv, launch.env, launch.workdir_files, launch.home, plan.call.stdin)


def key(body: dict[str, Any]) -> str:
    return request_key(normalized_request(ChatCompletionRequest.model_validate(body)))


@pytest.fixture(scope="module")
def gateway() -> Gateway:
    settings = fake_settings()
    return Gateway(settings, live_backends(settings))


def test_every_request_field_has_a_variant() -> None:
    assert set(VARIANTS) == set(ChatCompletionRequest.model_fields)


@pytest.mark.parametrize("backend", sorted(MODELS))
@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_a_field_outside_the_key_changes_nothing_the_cli_receives(
    gateway: Gateway, backend: str, name: str
) -> None:
    model, other = MODELS[backend]
    base = {"model": model, **copy.deepcopy(BASE)}
    variant = {**base, **(VARIANTS[name] or {"model": other})}
    same_key = key(base) == key(variant)
    same_input = cli_input(gateway, base) == cli_input(gateway, variant)
    if same_key:
        assert same_input, f"{name} changes what the {backend} CLI receives but is not in the key"
    # a field in the key is one that can change the run (on some backend)
    in_key = name in normalized_request(ChatCompletionRequest.model_validate(variant))
    assert same_key != in_key or name in ("n",), (name, same_key, in_key)


def test_reasoning_effort_changes_the_argv_and_the_key(gateway: Gateway) -> None:
    base = {"model": "gpt-5.5", **BASE}
    high = {**base, "reasoning_effort": "high"}
    assert cli_input(gateway, base)[0] != cli_input(gateway, high)[0]
    assert key(base) != key(high)


def test_tool_call_ids_are_keyed_by_position(gateway: Gateway) -> None:
    """The model (or the gateway) made the ids up on the recording: a re-run of the same
    conversation carries others, and must find the same fixture."""
    base = {"model": "claude-sonnet-4-6", **copy.deepcopy(BASE)}
    renamed = copy.deepcopy(base)
    renamed["messages"][2]["tool_calls"][0]["id"] = "call_xyz"
    renamed["messages"][3]["tool_call_id"] = "call_xyz"
    assert key(base) == key(renamed)
    # the CLI gets the ids themselves, and nothing else differs
    a, b = cli_input(gateway, base), cli_input(gateway, renamed)
    assert a[:4] == b[:4]
    assert a[4] != b[4] and a[4] == b[4].replace(b"call_xyz", b"call_abc")
    # a result answering another call than the one made is another conversation
    crossed = copy.deepcopy(base)
    crossed["messages"][3]["tool_call_id"] = "call_other"
    assert key(base) != key(crossed)
    normalized = normalized_request(ChatCompletionRequest.model_validate(base))
    assert normalized["messages"][2]["tool_calls"][0]["id"] == "id#1"


def test_scrubbed_values_are_keyed_as_scrubbed() -> None:
    """A key does not carry a secret or the machine's HOME: a rotated token, or another
    checkout, finds the same fixture."""
    home = os.path.expanduser("~")

    def body(token: str, path: str) -> dict[str, Any]:
        text = f"Authorization: Bearer {token}; config in {path}/agent.toml"
        return {"model": "claude-sonnet-4-6", "messages": [{"role": "user", "content": text}]}

    redactor = Redactor([], {"HOME": home})
    one = normalized_request(
        ChatCompletionRequest.model_validate(body("tok_" + "a" * 20, home)), redactor
    )
    two = normalized_request(
        ChatCompletionRequest.model_validate(body("tok_" + "b" * 20, home)), redactor
    )
    assert request_key(one) == request_key(two)
    text = one["messages"][0]["content"]
    assert "tok_" not in text and "$HOME/agent.toml" in text and home not in text


def test_redactor_defaults_and_user_patterns() -> None:
    env = {
        "HOME": "/home/alice",
        "USER": "alice",
        "MY_SERVICE_TOKEN": "planted-env-secret-123",
        "PATH": "/usr/bin",
    }
    r = Redactor([r"ACME-\d{6}", r"customer=(\w+)"], env)
    text = (
        "key sk-ant-api03-"
        + "x" * 30
        + " and sk-proj-"
        + "y" * 30
        + " google AIza"
        + "z" * 35
        + ' {"api_key": "abcd1234"} OPENAI_API_KEY=qwerty123 Bearer abc.def-123456'
        + " /home/alice/src ticket ACME-123456 customer=bob planted-env-secret-123"
        + " alice@example alice"
    )
    out = r.text(text)
    for secret in (
        "sk-ant-api03",
        "sk-proj-",
        "AIza",
        "abcd1234",
        "qwerty123",
        "abc.def-123456",
        "/home/alice/",
        "ACME-123456",
        "bob",
        "planted-env-secret-123",
        "alice",
    ):
        assert secret not in out, (secret, out)
    assert "$HOME/src" in out and "customer=[REDACTED]" in out
    assert "[REDACTED:MY_SERVICE_TOKEN]" in out
    assert "$USER@example" in out
    assert r.text("/home/alicex") == "/home/alicex"  # another path, not HOME
    # a generic account name is only scrubbed in paths: "root cause" stays readable
    root = Redactor([], {"HOME": "/root", "USER": "root"})
    assert root.text("the root cause, in /srv/root/x and /root/y") == (
        "the root cause, in /srv/$USER/x and $HOME/y"
    )
