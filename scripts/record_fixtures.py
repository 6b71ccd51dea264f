#!/usr/bin/env python3
"""Re-record ``fixtures/`` from the REAL claude, gemini, codex and copilot CLIs, offline.

    python scripts/record_fixtures.py --cli-dir .cli/<versions>/node_modules/.bin --out fixtures

(``make fixtures`` runs exactly this.) What it does:

1. deletes the old ``*.json`` fixtures in ``--out`` (``--models``: only those of these models'
   backends, which alone are re-recorded);
2. starts ``tests/fakes/fake_model_api.py`` on 127.0.0.1 (a free port): the model API both CLIs
   talk to (codex through its OpenAI Responses endpoint), scripted by an ``@@fake {json}``
   directive in the prompt;
3. makes a temporary ``HOME`` (with ``~/.gemini/settings.json`` selecting API-key auth);
4. starts the gateway as a subprocess, ``python -m cli_proxy serve --port 0 --record OUT
   --claude-bin DIR/claude --gemini-bin DIR/gemini --codex-bin DIR/codex --copilot-bin
   DIR/copilot``, with an
   environment of only ``PATH``, that ``HOME`` and loopback-pointing model API settings
   (``ANTHROPIC_BASE_URL``, ``GOOGLE_GEMINI_BASE_URL``, ``CLI_PROXY_CODEX__BASE_URL``,
   copilot's BYOK ``COPILOT_PROVIDER_*`` to the Anthropic endpoint, dummy keys), so the CLIs
   reach nothing but 127.0.0.1;
5. sends the requests in ``CASES`` to it with the official ``openai`` SDK, for
   ``claude-sonnet-4-6``, ``gemini-2.5-flash``, ``gpt-5.5`` and ``copilot/claude-sonnet-4.6``,
   one at a time (so the recorded
   timings are those of an unloaded machine); the gateway's ``--record`` writes one
   fixture per CLI run, errors included;
6. stops the gateway and the fake API, scrubs the temporary ``HOME`` path and the fake
   API's port out of the fixtures (they are machine-specific noise), checks that no
   fixture carries a key or an environment value and that every fixture loads, and
   prints a summary table.

Nothing in a fixture is written by this script except that scrub: every stdout line,
stderr and exit code is what the real binary produced.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import openai

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from cli_proxy.backends.registry import backend_class, names  # noqa: E402
from cli_proxy.plan.routing import route  # noqa: E402
from cli_proxy.protocol import ChatCompletionRequest  # noqa: E402
from cli_proxy.replay.keys import fixture_name as store_name  # noqa: E402
from cli_proxy.replay.keys import normalized_request, request_key  # noqa: E402
from cli_proxy.replay.store import FixtureStore, load_fixture  # noqa: E402

FAKE_API = ROOT / "tests" / "fakes" / "fake_model_api.py"
MODELS = ("claude-sonnet-4-6", "gemini-2.5-flash", "gpt-5.5", "copilot/claude-sonnet-4.6")
API_KEY = "test"  # the dummy key the CLIs send to the fake API; must never reach a fixture
HOME_PLACEHOLDER = "$HOME"
PORT_PLACEHOLDER = "PORT"  # as docs/real-clis.md writes it

WEATHER: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}
TIME: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_time",
        "description": "Current local time in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}


def fake(**directive: Any) -> str:
    """The fake model API's directive: it decides what the upstream model answers."""
    return "\n\n@@fake " + compact(directive)


def compact(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"))


def user(text: str) -> list[dict[str, Any]]:
    return [{"role": "user", "content": text}]


@dataclass
class Case:
    name: str
    summary: str
    body: dict[str, Any]  # everything but "model"
    stream: bool = False
    expect_error: type[openai.APIError] | None = None
    upstream_status: dict[str, int] = field(default_factory=dict)  # per backend, for errors


def cases() -> list[Case]:
    one_call = {"tool_call": {"name": "get_weather", "arguments": {"city": "Paris"}}}
    two_calls = {
        "tool_calls": [
            {"name": "get_weather", "arguments": {"city": "Tokyo"}},
            {"name": "get_time", "arguments": {"city": "Tokyo"}},
        ]
    }
    reply = {"tool_call": None, "response": "I can look up the current weather for any city."}
    return [
        # No directive at all: the fake API's default answer is a friendly greeting. This is
        # the README's curl request, byte for byte, so it replays from the shipped fixtures.
        Case("text", '"say hi" (the README request)', {"messages": user("say hi")}),
        # The key ignores "stream", so the streamed variant needs its own request text.
        Case(
            "text-stream",
            '"say hi (streamed)", stream=True',
            {"messages": user("say hi (streamed)")},
            stream=True,
        ),
        Case(
            "tool-call",
            "weather in Paris, tools=[get_weather] -> 1 tool call",
            {
                "messages": user("What's the weather in Paris?" + fake(answer=compact(one_call))),
                "tools": [WEATHER],
            },
        ),
        Case(
            "tool-calls",
            "weather+time in Tokyo, tools=[get_weather,get_time] -> 2 tool calls",
            {
                "messages": user(
                    "What's the weather and the local time in Tokyo?"
                    + fake(answer=compact(two_calls))
                ),
                "tools": [WEATHER, TIME],
            },
        ),
        Case(
            "tool-reply",
            "what can you do?, tools=[get_weather] -> text reply, no call",
            {
                "messages": user("What can you do?" + fake(answer=compact(reply))),
                "tools": [WEATHER],
            },
        ),
        Case(
            "overloaded",
            "say hi, upstream 529 (claude) / 503 (gemini, codex) -> gateway 503",
            {},  # filled per backend below
            expect_error=openai.InternalServerError,
            upstream_status={"claude": 529, "gemini": 503, "codex": 503, "copilot": 529},
        ),
        Case(
            "rate-limit",
            "say hi, upstream 429 -> gateway 429",
            {},
            expect_error=openai.RateLimitError,
            upstream_status={"claude": 429, "gemini": 429, "codex": 429, "copilot": 429},
        ),
    ]


def body_for(case: Case, backend: str) -> dict[str, Any]:
    if case.upstream_status:
        return {"messages": user("say hi" + fake(status=case.upstream_status[backend]))}
    if backend_class(backend).native_tools and "tools" in case.body:
        return native_body(case.body)
    return case.body


def native_body(body: dict[str, Any]) -> dict[str, Any]:
    """A tool case for a backend whose model calls functions natively (codex app-server): the
    fake API answers with real function calls (or plain text) instead of the prompt's JSON."""
    text = body["messages"][-1]["content"]
    prompt, _, directive = text.partition("@@fake ")
    answer = json.loads(json.loads(directive)["answer"])
    calls = answer.get("tool_calls") or ([answer["tool_call"]] if answer.get("tool_call") else [])
    spec = {"tool_calls": calls} if calls else {"answer": answer["response"]}
    return {**body, "messages": user(prompt + fake(**spec))}


# ------------------------------------------------------------------------- processes


def wait_for_line(path: Path, proc: subprocess.Popen[bytes], what: str, pred: Any) -> str:
    deadline = time.monotonic() + 90  # a busy machine: the gateway starts in 15 s
    while time.monotonic() < deadline:
        if path.exists():
            for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
                found = pred(line)
                if found:
                    return str(found)
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    log = path.read_text(errors="replace") if path.exists() else ""
    raise SystemExit(f"record_fixtures: {what} did not start (rc {proc.poll()}):\n{log}")


def start_fake_api(tmp: Path) -> tuple[subprocess.Popen[bytes], str]:
    out = tmp / "fake_api.stdout"
    with out.open("wb") as fh, (tmp / "fake_api.stderr").open("wb") as err:
        proc = subprocess.Popen(
            [sys.executable, str(FAKE_API), "--host", "127.0.0.1", "--port", "0"],
            stdout=fh,
            stderr=err,
            stdin=subprocess.DEVNULL,
            cwd=tmp,
        )
    url = wait_for_line(
        out, proc, "the fake model API", lambda s: s.strip() if s.startswith("http") else None
    )
    return proc, url


def start_gateway(
    tmp: Path, home: Path, fake_url: str, cli_dir: Path, out: Path
) -> tuple[subprocess.Popen[bytes], str]:
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),  # gemini is a node script
        "HOME": str(home),
        "LANG": "C.UTF-8",
        "ANTHROPIC_BASE_URL": fake_url,
        "ANTHROPIC_API_KEY": API_KEY,
        "DISABLE_TELEMETRY": "1",
        "CLAUDE_CODE_MAX_RETRIES": "0",  # record a failure as one request, not ten
        "GEMINI_API_KEY": API_KEY,
        "GOOGLE_GEMINI_BASE_URL": fake_url,
        "CODEX_API_KEY": API_KEY,
        "CLI_PROXY_CODEX__BASE_URL": fake_url + "/v1",  # the gateway's own setting
        # copilot through BYOK to the fake's Anthropic Messages endpoint
        "COPILOT_PROVIDER_BASE_URL": fake_url,
        "COPILOT_PROVIDER_TYPE": "anthropic",
        "COPILOT_PROVIDER_API_KEY": API_KEY,
        "PYTHONPATH": str(ROOT),
    }
    log = tmp / "gateway.log"
    argv = [
        sys.executable,
        "-m",
        "cli_proxy",
        "serve",
        "--host",
        "127.0.0.1",
        "--port",
        "0",
        "--record",
        str(out),
        "--claude-bin",
        str(cli_dir / "claude"),
        "--gemini-bin",
        str(cli_dir / "gemini"),
        "--codex-bin",
        str(cli_dir / "codex"),
        "--copilot-bin",
        str(cli_dir / "copilot"),
        "--max-concurrency",
        "2",
        "--timeout",
        "120",
        "--log-json",
    ]
    with log.open("wb") as fh:
        proc = subprocess.Popen(
            argv, env=env, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=ROOT
        )

    def listening(line: str) -> str | None:
        with contextlib.suppress(ValueError):
            obj = json.loads(line)
            if isinstance(obj, dict) and obj.get("event") == "listening" and obj.get("url"):
                return str(obj["url"])
        return None

    return proc, wait_for_line(log, proc, "the gateway", listening)


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


# ------------------------------------------------------------------------- recording


@dataclass
class Recorded:
    case: Case
    model: str
    path: Path
    outcome: str


def fixture_name(model: str, body: dict[str, Any]) -> tuple[str, str]:
    req = ChatCompletionRequest.model_validate({"model": model, **body})
    normalized = normalized_request(req)
    key = request_key(normalized)
    return key, store_name(backend_of(model), normalized, key)


def backend_of(model: str) -> str:
    found = route(model, {n: backend_class(n) for n in names()})
    assert found is not None, model
    return found.backend


def send(client: openai.OpenAI, case: Case, model: str, body: dict[str, Any]) -> str:
    try:
        if case.stream:
            text: list[str] = []
            with client.chat.completions.create(
                model=model, stream=True, stream_options={"include_usage": True}, **body
            ) as stream:
                for chunk in stream:
                    text.extend(choice.delta.content or "" for choice in chunk.choices)
            return f"streamed {''.join(text)!r}"
        r = client.chat.completions.create(model=model, **body)
    except openai.APIStatusError as exc:
        if case.expect_error is None or not isinstance(exc, case.expect_error):
            raise
        return f"HTTP {exc.status_code} {type(exc).__name__}"
    if case.expect_error is not None:
        raise SystemExit(f"record_fixtures: {case.name}/{model}: expected an error, got {r}")
    msg = r.choices[0].message
    if msg.tool_calls:
        names = ", ".join(c.function.name for c in msg.tool_calls)
        return f"tool_calls [{names}]"
    return f"{msg.content!r}"


def wait_for_file(path: Path, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if time.monotonic() > deadline:
            raise SystemExit(f"record_fixtures: the gateway did not write {path}")
        time.sleep(0.05)


def scrub(path: Path, replacements: dict[str, str]) -> None:
    """Replace machine-specific strings (they need no JSON escaping at any nesting level)."""
    text = path.read_text(encoding="utf-8")
    for old, new in replacements.items():
        text = text.replace(old, new)
    path.write_text(text, encoding="utf-8")


def leaks(path: Path, forbidden: list[str]) -> list[str]:
    text = path.read_text(encoding="utf-8")
    data = json.loads(text)
    found = [s for s in forbidden if s in text]
    args = data.get("argv", [])
    for before, arg in zip(["", *args], args, strict=False):
        # codex's --config key=value overrides are the gateway's own sealing settings, and
        # --model=NAME is how every backend passes the model
        # (copilot: --available-tools=, --reasoning-effort=)
        own = before == "--config" or arg.startswith("--")
        if arg == API_KEY or ("=" in arg and not own) or "API_KEY" in arg:
            found.append(f"argv element {arg!r}")
    if f'"{API_KEY}"' in text or "x-api-key" in text or "x-goog-api-key" in text:
        found.append("an API key value or header")
    return found


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--cli-dir", type=Path, required=True, help="folder with the three CLIs")
    ap.add_argument("--out", type=Path, default=ROOT / "fixtures", help="fixture folder")
    ap.add_argument(
        "--models",
        nargs="+",
        choices=MODELS,
        default=list(MODELS),
        help="re-record only these models (their backends' old fixtures are replaced)",
    )
    args = ap.parse_args(argv)
    models: list[str] = args.models
    cli_dir: Path = args.cli_dir.resolve()
    out: Path = args.out.resolve()
    for name in ("claude", "gemini", "codex", "copilot"):
        if not os.access(cli_dir / name, os.X_OK):
            print(f"record_fixtures: {cli_dir / name} not found (make real-clis)", file=sys.stderr)
            return 2

    out.mkdir(parents=True, exist_ok=True)
    for backend in {backend_of(m) for m in models}:
        for old in out.glob(f"{backend}-*.json"):
            old.unlink()

    started = time.monotonic()
    tmp = Path(tempfile.mkdtemp(prefix="cli-proxy-record-"))
    home = tmp / "home"
    (home / ".gemini").mkdir(parents=True)
    (home / ".gemini" / "settings.json").write_text(
        json.dumps(
            {
                "security": {"auth": {"selectedType": "gemini-api-key"}},
                "privacy": {"usageStatisticsEnabled": False},
            }
        )
    )
    recorded: list[Recorded] = []
    fake_proc = gateway = None
    try:
        fake_proc, fake_url = start_fake_api(tmp)
        gateway, base_url = start_gateway(tmp, home, fake_url, cli_dir, out)
        print(f"fake model API {fake_url}; gateway {base_url}; recording to {out}", flush=True)
        client = openai.OpenAI(base_url=base_url, api_key="unused", max_retries=0, timeout=120)
        for model in models:
            for case in cases():
                body = body_for(case, backend_of(model))
                _key, name = fixture_name(model, body)
                outcome = send(client, case, model, body)
                wait_for_file(out / name)
                recorded.append(Recorded(case, model, out / name, outcome))
                print(f"  {model:<18} {case.name:<12} {outcome}", flush=True)
        client.close()
    except BaseException:
        log = tmp / "gateway.log"
        if log.exists():
            tail = log.read_text(errors="replace").splitlines()[-20:]
            print("record_fixtures: gateway log (last lines):", *tail, sep="\n  ", file=sys.stderr)
        print(f"record_fixtures: failed; {out} is incomplete, logs in {tmp}", file=sys.stderr)
        raise
    finally:
        if gateway is not None:
            stop(gateway)
        if fake_proc is not None:
            stop(fake_proc)

    port = fake_url.rsplit(":", 1)[1]
    replacements = {  # longest first: the HOME is inside the temp dir
        str(home): HOME_PLACEHOLDER,
        str(tmp): "$TMP",
        str(cli_dir.parent): "$NODE_MODULES",  # gemini's stack traces on stderr
        str(ROOT): "$REPO",
        f"127.0.0.1:{port}": f"127.0.0.1:{PORT_PLACEHOLDER}",
        f"localhost:{port}": f"localhost:{PORT_PLACEHOLDER}",
    }
    forbidden = [str(home), str(tmp), fake_url, f"127.0.0.1:{port}", f"API_KEY={API_KEY}"]
    problems = []
    for rec in recorded:
        scrub(rec.path, replacements)
        problems += [f"{rec.path.name}: {leak}" for leak in leaks(rec.path, forbidden)]
    store = FixtureStore.load(out)  # every file must load (format, version, key)
    mine = {fx.path.resolve() for fx in store.by_key.values()} & {r.path for r in recorded}
    if len(mine) != len(recorded):
        problems.append(f"{len(recorded)} cases but {len(mine)} distinct fixtures in {out}")
    shutil.rmtree(tmp, ignore_errors=True)

    rows = [("file", "backend", "case", "exit", "lines", "request")]
    for rec in recorded:
        fx = load_fixture(rec.path)
        rows.append(
            (
                rec.path.name,
                fx.backend,
                rec.case.name,
                str(fx.data["exit_code"]),
                str(len(fx.data["stdout"])),
                rec.case.summary,
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    print()
    for row in rows:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=False)) + "  " + row[-1])
    versions = {str(v) for r in recorded if (v := load_fixture(r.path).data.get("cli_version"))}
    print(
        f"\n{len(recorded)} fixtures in {out} in {time.monotonic() - started:.1f} s"
        + (f" (cli_version {', '.join(sorted(versions))})" if versions else "")
    )
    if problems:
        print("record_fixtures: PROBLEMS:\n  " + "\n  ".join(problems), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
