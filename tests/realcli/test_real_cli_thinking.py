"""Issue 30: what each REAL CLI prints while its model thinks, and that such a call outlives a
short ``idle_timeout_s``.

The fake model API delays the first answer token by ``THINK_S`` seconds while it sends the
provider's own events (Anthropic thinking deltas or pings, Gemini thought parts, OpenAI
Responses reasoning-summary deltas) every 0.5 s; the gateway's idle limit is shorter than
that delay. Measured on the pinned versions: claude prints a ``thinking_delta`` stream event
and a ``system/thinking_tokens`` line per thinking delta, and nothing for pings; gemini over
ACP prints an ``agent_thought_chunk`` notification per thought, codex over app-server a
reasoning-summary delta notification per delta (over stream-json and exec --json, the modes
they used before, both printed nothing until the answer). The call completes in every case:
the idle limit also counts the bytes the CLI reads (``CliRun._received``), which is what
carries claude through a model that sends only pings.
Every stdout line the CLI printed is kept with its time (a ``LineSink``) and shown when an
assertion fails; with ``CLI_PROXY_CAPTURE_DIR`` set (how tests/data/real-cli/ is refreshed) it
is written there as ``thinking-<case>.json``, the capture of the fact the idle limit relies
on. Each backend's mode is the one the gateway runs (claude stream-json, gemini ACP, codex
app-server); when a backend moves to another channel, the case table below is all that changes.
"""

from __future__ import annotations

import itertools
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import openai
import pytest

from cli_proxy.backends.checks import pinned_clis
from cli_proxy.config import Settings
from cli_proxy.gateway import Gateway, live_backends
from cli_proxy.plan.spec import Plan
from cli_proxy.run.call import Call, LineSink
from tests.conftest import ServeFactory, fake
from tests.fakes.fake_model_api import start_fake_model_api
from tests.realcli.test_real_cli import point_clis_at, real_cli_dir

CLI_DIR = real_cli_dir(("claude", "gemini", "codex"))
THINK_S = 12.0  # over the idle limit by half of it: the call outlives it only by the bytes
IDLE_S = 8.0

pytestmark = [
    pytest.mark.realcli,
    pytest.mark.skipif(CLI_DIR is None, reason="real CLIs not installed (make real-clis)"),
]


@dataclass
class Case:
    backend: str
    model: str
    think_kind: str = "thinking"
    prints_while_thinking: bool = False  # the fact captured: pinned, so a change shows
    idle_s: float = IDLE_S


CASES = {
    "claude-thinking": Case("claude", "claude-sonnet-4-6", prints_while_thinking=True),
    # keep-alives alone: the CLI prints nothing, the bytes still reach it
    "claude-ping": Case("claude", "claude-sonnet-4-6", "ping"),
    "gemini-thoughts": Case("gemini", "gemini-2.5-flash", prints_while_thinking=True),
    "codex-reasoning": Case("codex", "gpt-5.5", prints_while_thinking=True),
}


@dataclass
class Lines(LineSink):
    t0: float = 0.0
    seen: list[tuple[float, str]] = field(default_factory=list)

    def spawned(self) -> None:
        self.t0 = time.monotonic()

    def line(self, data: bytes) -> None:
        self.seen.append((round(time.monotonic() - self.t0, 3), data.decode("utf-8", "replace")))

    def done(self, call: Call) -> None:
        pass


def summary(line: str) -> str:
    """What a stdout line is, without its bulk: its type fields."""
    try:
        obj = json.loads(line)
    except ValueError:
        return "non-JSON: " + line.strip()[:80]
    if not isinstance(obj, dict):
        return "JSON " + type(obj).__name__
    if "jsonrpc" in obj or "method" in obj or ("id" in obj and "type" not in obj):
        # JSON-RPC (gemini ACP; codex app-server, which leaves out "jsonrpc")
        params = obj.get("params")
        update = params.get("update") if isinstance(params, dict) else None
        kind = update.get("sessionUpdate") if isinstance(update, dict) else None
        name = obj.get("method") or f"reply to {obj.get('id')}"
        return f"{name} / {kind}" if kind else str(name)
    parts = [str(obj.get("type"))]
    for key in ("subtype", "event", "item"):
        inner = obj.get(key)
        if isinstance(inner, dict):
            parts.append(str(inner.get("type")))
            delta = inner.get("delta")
            if isinstance(delta, dict):
                parts.append(str(delta.get("type")))
        elif isinstance(inner, str):
            parts.append(inner)
    return " / ".join(parts)


@pytest.mark.parametrize("name", list(CASES))
async def test_cli_output_while_the_model_thinks(
    serve: ServeFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    case = CASES[name]
    assert CLI_DIR is not None
    api = await start_fake_model_api(openai_key="test")
    point_clis_at(api, tmp_path / "home", monkeypatch)
    monkeypatch.setenv("CODEX_API_KEY", "test")
    backend: dict[str, Any] = {"bin": str(CLI_DIR / case.backend)}
    if case.backend == "codex":
        backend["base_url"] = api.url + "/v1"
    settings = Settings(
        backends=[case.backend],
        idle_timeout_s=case.idle_s,
        kill_grace_s=1,
        warm_pool=False,
        **{case.backend: backend},
    )
    sinks: list[Lines] = []

    def sink_for(_: Plan) -> Lines:
        sinks.append(Lines())
        return sinks[-1]

    served = await serve(Gateway(settings, live_backends(settings), sink_for))
    think = max(THINK_S, 1.5 * case.idle_s)  # well past the idle limit, however set
    directive = {"answer": "Done thinking.", "think": think, "think_kind": case.think_kind}
    outcome: Any
    client = openai.AsyncOpenAI(base_url=served.base_url, api_key="x", max_retries=0, timeout=300)
    try:
        outcome = await client.chat.completions.create(
            model=case.model, messages=[{"role": "user", "content": "think" + fake(**directive)}]
        )
    except openai.APIStatusError as exc:
        outcome = exc
    finally:
        await client.close()
        await api.close()
    (lines,) = sinks
    # the think window as the CLI saw it: from its first line to its first answer text
    printed = [(t, summary(text)) for t, text in lines.seen]
    gaps = [b - a for (a, _), (b, _) in itertools.pairwise(printed)]
    capture = {
        "case": name,
        "cli": case.backend,
        "versions": os.path.basename(os.path.dirname(os.path.dirname(str(CLI_DIR)))),
        "model_thinks_s": think,
        "provider_events_every_s": 0.5,
        "provider_events": case.think_kind,
        "idle_timeout_s": case.idle_s,
        "completed": not isinstance(outcome, Exception),
        "error": None if not isinstance(outcome, Exception) else str(outcome)[:300],
        "longest_silence_s": round(max(gaps, default=0.0), 3),
        "stdout_lines": printed,
    }
    target = os.environ.get("CLI_PROXY_CAPTURE_DIR")
    if target:  # the pinned CLIs' capture keeps its name; other versions get their own file
        pins = pinned_clis()
        names = ("claude", "gemini", "codex", "copilot")  # the Makefile's CLI_DIR order
        pinned = "_".join(f"{n}-{pins[n].version}" for n in names)
        suffix = "" if capture["versions"] == pinned else f"-{capture['versions']}"
        Path(target, f"thinking-{name}{suffix}.json").write_text(
            json.dumps(capture, indent=1) + "\n"
        )
    # silence, not length, ends a call: printed thoughts, or unprinted bytes arriving
    assert not isinstance(outcome, Exception), capture
    assert outcome.choices[0].message.content == "Done thinking."
    if case.prints_while_thinking:
        assert capture["longest_silence_s"] < case.idle_s, capture
    else:  # it said nothing while its model thought: the idle limit saw its reads
        assert capture["longest_silence_s"] > case.idle_s, capture
