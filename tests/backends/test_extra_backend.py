"""A backend defined and registered from the tests alone serves calls through the gateway:
the proof that a new CLI needs its own module and one registration, nothing in cli_proxy/."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from cli_proxy.backends import register
from cli_proxy.backends.base import (
    Backend,
    BackendOptions,
    LaunchOptions,
    StreamParser,
    empty_answer,
    load_json_line,
)
from cli_proxy.backends.registry import unregister
from cli_proxy.gateway import Gateway, live_backends
from cli_proxy.plan.prompt import Prompt
from cli_proxy.protocol import ChatCompletionRequest
from cli_proxy.read.events import CliEvent, CliText, UsageReport
from tests.conftest import ServeFactory, fake_settings

ECHO_CLI = Path(__file__).resolve().parents[1] / "fakes" / "echo_cli.py"


class EchoOptions(BackendOptions):
    bin: str = "echo-cli"
    shout: bool = False


class EchoParser(StreamParser):
    def __init__(self, shout: bool = False) -> None:
        self.done = False
        self.seen = False
        self.shout = shout

    def feed(self, line: bytes) -> list[CliEvent]:
        obj = load_json_line(line)
        if obj is None:
            return []
        if isinstance(obj.get("say"), str):
            self.seen = True
            return [CliText(obj["say"])]
        done = obj.get("done")
        if isinstance(done, dict):
            self.done = True
            return [UsageReport(int(done["in"]), int(done["out"]))]
        return []

    def finish(self, exit_code: int, stderr: str) -> list[CliEvent]:
        return [] if self.seen else [empty_answer("echo")]


class EchoBackend(Backend):
    name = "echo"
    options_model = EchoOptions
    model_prefixes = ("echo-",)
    known_models = ("echo-1",)

    def argv(self, launch: LaunchOptions) -> list[str]:
        return [*self.command, "--model", launch.model]

    def new_parser(self, prompt: Prompt, request: ChatCompletionRequest) -> StreamParser:
        return EchoParser()


@pytest.fixture
def echo_registered() -> Iterator[None]:
    register(EchoBackend)
    try:
        yield
    finally:
        unregister("echo")


async def test_a_backend_registered_from_tests_serves_calls(
    echo_registered: None, serve: ServeFactory
) -> None:
    settings = fake_settings(backends=["echo"], echo={"bin": f"{sys.executable} {ECHO_CLI}"})
    assert settings.options_for("echo") == EchoOptions(bin=f"{sys.executable} {ECHO_CLI}")
    served = await serve(Gateway(settings, live_backends(settings)))
    models = await served.client.models.list()
    assert [m.id for m in models.data] == ["echo-1"]

    r = await served.client.chat.completions.create(
        model="echo-1", messages=[{"role": "user", "content": "hello echo"}]
    )
    # the prompt's last non-empty line is the closing tag of the history
    assert r.choices[0].message.content == "</conversation_history>"
    assert r.usage is not None and r.usage.completion_tokens == len("</conversation_history>")

    stream = await served.client.chat.completions.create(
        model="echo/anything", messages=[{"role": "user", "content": "hi"}], stream=True
    )
    text = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
    assert text == "</conversation_history>"


def test_backend_settings_are_validated_by_the_backend(
    echo_registered: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CLI_PROXY_ECHO__SHOUT", "true")
    assert fake_settings().options_for("echo") == EchoOptions(shout=True)
    monkeypatch.setenv("CLI_PROXY_ECHO_BIN", "/opt/echo")  # the older flat name works too
    assert fake_settings().options_for("echo").bin == "/opt/echo"
    with pytest.raises(ValueError, match="typo"):
        fake_settings(echo={"typo": 1})
    with pytest.raises(ValueError, match="unknown backend"):
        fake_settings(backends=["nope"])
