"""A backend defined and registered from the tests alone serves calls through the gateway:
the proof that a new CLI needs its own folder (tests/backends/echo/) and one registration,
nothing in cli_proxy/: it is served, limited, doctored and documented in /openapi.json."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest

from cli_proxy.backends.registry import register, resident_mib, unregister
from cli_proxy.gateway import Gateway, live_backends
from tests.backends.echo import EchoBackend, EchoOptions
from tests.conftest import FAKE_PY, ServeFactory, fake_settings

ECHO_CLI = Path(__file__).resolve().parents[1] / "fakes" / "echo_cli.py"


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
    settings = fake_settings(backends=["echo"], echo={"bin": f"{FAKE_PY} {ECHO_CLI}"})
    assert settings.options_for("echo") == EchoOptions(bin=f"{FAKE_PY} {ECHO_CLI}")
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


async def test_a_registered_backend_is_limited_doctored_and_documented(
    echo_registered: None, serve: ServeFactory, tmp_path: Path
) -> None:
    """The rest of the gateway reads the new backend through the interface alone: its size
    in the bounds, its cap per backend, its login facts in doctor, its models in the
    OpenAPI document."""
    from cli_proxy.backends.checks import check_backend
    from cli_proxy.run import limits
    from cli_proxy.server.openapi import document

    bin_ = f"{FAKE_PY} {ECHO_CLI}"
    settings = fake_settings(backends=["echo"], echo={"bin": bin_, "max_concurrency": 2})
    bounds, _ = limits.from_settings(settings)
    assert bounds.cli_mib == EchoBackend.resident_mib and bounds.per_backend == {"echo": 2}
    assert (
        limits.Bounds.derive(resident_mib(["echo"]), memory_bytes=2**30).max_processes == 512 // 64
    )

    report = check_backend("echo", settings, {"PATH": os.defpath}, tmp_path)
    assert report.login.present is False and "ECHO_API_KEY" in report.login.detail
    (tmp_path / ".echo").mkdir()
    (tmp_path / ".echo" / "login.json").write_text("{}")
    report = check_backend("echo", settings, {"PATH": os.defpath}, tmp_path)
    assert report.login.present and report.login.detail == "~/.echo/login.json"

    served = await serve(Gateway(settings, live_backends(settings)))
    async with aiohttp.ClientSession() as http:
        async with http.get(served.server.make_url("/openapi.json")) as r:
            doc = await r.json()
        async with http.get(served.server.make_url("/health")) as r:
            health = await r.json()
    echo = next(b for b in doc["x-backends"] if b["name"] == "echo")
    assert echo["models"] == ["echo-1"] and echo["model_prefixes"] == ["echo-"]
    assert "echo" in doc["info"]["description"]
    assert health["bounds"]["per_backend"] == {"echo": 2}
    assert document()["x-backends"] == doc["x-backends"]  # one document per registry
