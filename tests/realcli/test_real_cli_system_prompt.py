"""The ``system_prompt`` option on the REAL claude, gemini and codex binaries (fake model API
on loopback): for "say hi", what the model API receives in each mode.

``minimal`` (gemini and codex by default, claude on request): at most 2.5 kB upstream, none
of the CLI's agent text, our one neutral text as the system prompt; ``cli`` (claude by
default): the CLI's own agent prompt, unchanged. In every mode the gateway's rendered prompt
reaches the model intact, and a pre-started spare sends what a cold process sends.

Set ``CLI_PROXY_CAPTURE_DIR`` to keep the upstream request bodies (tests/data/real-cli/
holds the captures of the pinned versions).
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from cli_proxy.backends.system_prompt import MINIMAL_SYSTEM_PROMPT
from cli_proxy.config import Settings
from cli_proxy.gateway import Gateway, live_backends
from cli_proxy.protocol import ChatCompletionRequest
from tests.conftest import Served, ServeFactory
from tests.fakes.fake_model_api import FakeModelAPI, start_fake_model_api, text_pieces
from tests.realcli.test_real_cli import point_clis_at, real_cli_dir
from tests.run.test_reliability import wait_until

DIR = real_cli_dir(("claude", "gemini", "codex"))

pytestmark = [
    pytest.mark.realcli,
    pytest.mark.skipif(
        DIR is None,
        reason="real claude/gemini/codex binaries not found ($CLI_PROXY_REAL_CLI_DIR or "
        ".cli/*/node_modules/.bin; `make real-clis` installs them)",
    ),
    pytest.mark.timeout(90),
]

MODELS = {"claude": "claude-sonnet-4-6", "gemini": "gemini-2.5-flash", "codex": "gpt-5.5"}
PATHS = {"claude": "/v1/messages", "gemini": ":streamGenerateContent", "codex": "/v1/responses"}
AGENT_TEXT = {  # words from the opening of each CLI's own agent prompt
    # claude's first sentence changes between releases ("You are an interactive agent that
    # helps users with software engineering tasks." on 2.1.197, "You are an agent working
    # with the user toward their goals, ..." on 2.1.332); its second has stayed the same
    "claude": "Use the instructions below and the tools available to you to assist the user.",
    # over ACP gemini uses its interactive agent prompt (headless stream-json used the
    # "non-interactive" one)
    "gemini": "You are an interactive CLI agent specializing in software engineering",
    "codex": "You are Codex",
}
CASES = [(b, m) for b in MODELS for m in ("cli", "minimal")]
SAY_HI = [{"role": "user", "content": "say hi"}]


class Upstream:
    def __init__(self, served: Served, api: FakeModelAPI, backend: str) -> None:
        self.served = served
        self.api = api
        self.backend = backend

    def requests(self) -> list[dict[str, Any]]:
        return [r for r in self.api.requests if r["path"].endswith(PATHS[self.backend])]

    def rendered(self, messages: list[dict[str, Any]]) -> str:
        """The prompt the gateway renders for these messages (what must arrive intact)."""
        req = ChatCompletionRequest.model_validate(
            {"model": MODELS[self.backend], "messages": messages}
        )
        return self.served.gateway.plan(req).call.prompt


Start = Callable[..., Any]


@pytest.fixture
async def start(
    serve: ServeFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Start]:
    """start(backend, mode, **settings) -> Upstream: a gateway serving that one backend."""
    apis: list[FakeModelAPI] = []

    async def make(backend: str, mode: str, **settings: Any) -> Upstream:
        assert DIR is not None
        api = await start_fake_model_api(openai_key="test")
        apis.append(api)
        point_clis_at(api, tmp_path / "home", monkeypatch)
        monkeypatch.setenv("CODEX_API_KEY", "test")
        for name in ("CODEX_HOME", "OPENAI_API_KEY", "OPENAI_BASE_URL"):
            monkeypatch.delenv(name, raising=False)
        options: dict[str, Any] = {"bin": str(DIR / backend), "system_prompt": mode}
        if backend == "codex":
            options["base_url"] = api.url + "/v1"
        values: dict[str, Any] = {
            "backends": [backend],
            backend: options,
            "timeout_s": 60,
            "idle_timeout_s": 45,
            "kill_grace_s": 1,
            "warm_pool": False,
            **settings,
        }
        config = Settings(**values)
        served = await serve(Gateway(config, live_backends(config)))
        return Upstream(served, api, backend)

    try:
        yield make
    finally:
        for api in apis:
            await api.close()


def capture(backend: str, mode: str, body: dict[str, Any]) -> None:
    target = os.environ.get("CLI_PROXY_CAPTURE_DIR")
    if target:
        name = f"{backend}-system-prompt-{mode}.request.json"
        Path(target, name).write_text(json.dumps(body, indent=1, ensure_ascii=False) + "\n")


def opens_with_agent_text(backend: str, text: str) -> bool:
    """This system text is the CLI's own agent prompt: its opening lines hold AGENT_TEXT."""
    head = text.lstrip()
    return head.startswith("You are") and AGENT_TEXT[backend] in head[:400]


def assert_minimal(backend: str, body: dict[str, Any], system: list[str]) -> None:
    """Our text is the system prompt; the CLI adds at most its identity/billing lines."""
    ours = MINIMAL_SYSTEM_PROMPT.strip()
    assert ours in [t.strip() for t in system], system
    assert AGENT_TEXT[backend] not in json.dumps(body, ensure_ascii=False)
    if backend == "claude":  # the billing header and a one-line identity stay (< 200 B)
        others = [t for t in system if t.strip() != ours]
        assert sum(len(t.encode()) for t in others) < 200, others
    else:
        assert [t.strip() for t in system] == [ours]


@pytest.mark.parametrize(("backend", "mode"), CASES)
async def test_say_hi_upstream(start: Start, backend: str, mode: str) -> None:
    up = await start(backend, mode)
    r = await up.served.client.chat.completions.create(model=MODELS[backend], messages=SAY_HI)
    assert r.choices[0].message.content
    (sent,) = up.requests()
    body = sent["body"]
    capture(backend, mode, body)
    system, messages = text_pieces(sent["path"], body)
    # the gateway's prompt arrives whole, in order (claude and gemini: as their content
    # blocks); codex reads the request as app-server items: the user message itself
    if backend == "codex":
        assert "say hi" in "".join(messages)
    else:
        assert up.rendered(SAY_HI) in "".join(messages)
    if mode == "minimal":
        assert sent["bytes"] <= 2500, sent["bytes"]
        assert_minimal(backend, body, system)
    else:
        assert any(opens_with_agent_text(backend, t) for t in system), system
        assert MINIMAL_SYSTEM_PROMPT.strip() not in [t.strip() for t in system]
        assert sent["bytes"] > 10_000
    if backend == "codex":  # codex's own text or not: none of its tools is declared
        assert not body.get("tools")
        assert not [i for i in body["input"] if "tool" in str(i.get("type"))]


@pytest.mark.parametrize("backend", ["claude", "gemini"])
async def test_a_warm_spare_sends_what_a_cold_process_sends(start: Start, backend: str) -> None:
    """The option is part of the launch spec: a pre-started process of the ``minimal`` mode
    (claude: an argument; gemini: a variable and a work-dir file written before spawn)."""
    up = await start(backend, "minimal", warm_pool=True)
    pool = up.served.gateway.pool
    assert pool is not None
    messages = [{"role": "user", "content": "say hi"}]
    await up.served.client.chat.completions.create(model=MODELS[backend], messages=messages)
    await wait_until(lambda: pool.status()["ready"].get(backend), 60, "a spare")  # type: ignore[attr-defined]
    supervisor = up.served.gateway.supervisor
    await wait_until(lambda: not supervisor.starting, 30, "its start to be over")  # warm
    await up.served.client.chat.completions.create(model=MODELS[backend], messages=messages)
    assert pool.status()["served_warm"] == 1  # type: ignore[attr-defined]
    cold, warm = up.requests()
    for sent in (cold, warm):
        system, _ = text_pieces(sent["path"], sent["body"])
        assert_minimal(backend, sent["body"], system)
    assert text_pieces(cold["path"], cold["body"])[0] == text_pieces(warm["path"], warm["body"])[0]
