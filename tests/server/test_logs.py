"""Logs a request cannot forge or break (issue #13, item 10)."""

from __future__ import annotations

import json
from collections.abc import Iterator

import openai
import pytest
import structlog

from cli_proxy.logs import configure, log
from tests.conftest import ServeFactory


@pytest.fixture
def configured() -> Iterator[None]:
    yield
    structlog.reset_defaults()


@pytest.mark.parametrize("json_output", [False, True])
def test_control_characters_and_surrogates_are_escaped(
    capsys: pytest.CaptureFixture[str], configured: None, json_output: bool
) -> None:
    configure("debug", json_output=json_output)
    log.info("event", value="a\x00b\nforged=line\x1b[31m\ud800 é")
    err = capsys.readouterr().err
    assert err.count("\n") == 1  # one event, one line: the newline did not start a new one
    assert "\x00" not in err and "\x1b" not in err
    if json_output:
        assert json.loads(err)["value"] == "a\\x00b\\x0aforged=line\\x1b[31m\\ud800 é"
    else:
        assert "é" in err  # text beyond ASCII is kept as it is
        assert "x00b" in err and "x0aforged=line" in err and "ud800" in err


@pytest.mark.parametrize("json_output", [False, True])
def test_a_traceback_never_shows_local_variables(
    capsys: pytest.CaptureFixture[str], configured: None, json_output: bool
) -> None:
    """Issue 24 (D1): an error's traceback is logged without the frames' locals, which hold
    the request (with rich installed, structlog's default formatter prints them all)."""
    configure("info", json_output=json_output)

    def fails(prompt: str) -> None:
        raise RuntimeError("boom")

    secret = "-".join(("private", "prompt", "text"))  # not in any source line
    try:
        fails(secret)
    except RuntimeError:
        log.exception("unhandled_error")
    err = capsys.readouterr().err
    assert "RuntimeError" in err and "fails" in err  # the traceback is there
    assert secret not in err


async def test_rejected_values_reach_the_log_at_debug_only(
    serve: ServeFactory, capsys: pytest.CaptureFixture[str], configured: None
) -> None:
    configure("info")
    s = await serve()
    secret = "private-text-from-the-request"
    with pytest.raises(openai.BadRequestError):
        await s.client.chat.completions.create(
            model="claude-sonnet-4-6",
            messages=[{"role": "user", "content": "hi"}],
            tool_choice={"type": "function", "function": {"name": secret}},
        )
    err = capsys.readouterr().err
    assert "request_rejected" in err and "status=400" in err
    assert secret not in err
    configure("debug")
    with pytest.raises(openai.BadRequestError):
        await s.client.chat.completions.create(
            model="claude-sonnet-4-6",
            messages=[{"role": "user", "content": "hi"}],
            tool_choice={"type": "function", "function": {"name": secret}},
        )
    assert secret in capsys.readouterr().err
