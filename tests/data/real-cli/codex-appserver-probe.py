#!/usr/bin/env python3
"""Capture what ``codex app-server`` does when the gateway's codex backend drives it.

    .venv/bin/python tests/data/real-cli/codex-appserver-probe.py --codex PATH/codex \\
        --out tests/data/real-cli [CASE ...]

For each case (a chat request, below) it starts ``tests/fakes/fake_model_api.py`` on 127.0.0.1,
builds the backend's own argv, env and private CODEX_HOME (as the gateway does), spawns the
real binary in an empty temp work dir, writes the handshake, and then lets the backend's own
``CodexParser`` drive the call (its replies written after each stdout line) until it is done;
stdin is then closed and the CLI gets 5 s to exit. Writes, per case, ``codex-as-CASE``:
``.stdin.jsonl`` (what we sent), ``.stdout.jsonl`` (every line, as printed), ``.stderr.txt``,
``.rc`` (stderr is merged into stdout, as the gateway runs codex) and ``.requests.json`` (the bodies the fake Responses API received), plus
``.events.txt`` (the parser's events, one repr a line) and ``.timing.txt`` (line offsets).
Nothing leaves the machine: the key is a dummy, the base URL is the loopback fake.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

from cli_proxy.backends.base import LaunchOptions  # noqa: E402
from cli_proxy.backends.codex.backend import CodexBackend  # noqa: E402
from cli_proxy.plan.images import ImageLimits, extract  # noqa: E402
from cli_proxy.plan.prompt import PromptOptions, render  # noqa: E402
from cli_proxy.protocol import ChatCompletionRequest  # noqa: E402
from tests.fakes.fake_model_api import start_fake_model_api  # noqa: E402

PNG = (ROOT / "tests" / "data").glob("*.png")
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather of a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}
TIME = {
    "type": "function",
    "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}},
}


def fake(**spec: Any) -> str:
    return " @@fake " + json.dumps(spec)


def user(text: str) -> list[dict[str, Any]]:
    return [{"role": "user", "content": text}]


def _png() -> str:
    # a 1x1 PNG and a tiny JPEG, made here so the probe needs no image files
    png = base64.b64decode(
        "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
    )
    return "data:image/png;base64," + base64.b64encode(png).decode()


JPEG = (
    "data:image/jpeg;base64,/9j/4AAQSkZJRgABAQEASABIAAD/2wBDAP//////////////////////////////////"
    "////////////////////////////////////////////////////wgALCAABAAEBAREA/8QAFBABAAAAAAAAAAAAAAAA"
    "AAAAAP/aAAgBAQABPxA="
)

CASES: dict[str, dict[str, Any]] = {
    "text": {"messages": user("say hi" + fake(answer="Hello from codex!", cached=5))},
    "stream8": {
        "messages": user("count" + fake(answer="one two three four five six seven eight", chunks=8, delay=0.1))
    },
    "reasoning": {"messages": user("think" + fake(answer="After thinking: 42.", reasoning="Let me think."))},
    "toolcall": {
        "messages": user("weather in Paris?" + fake(tool_calls=[{"name": "get_weather", "arguments": {"city": "Paris"}}])),
        "tools": [WEATHER],
    },
    "toolcall-parallel": {
        "messages": user(
            "weather and time"
            + fake(tool_calls=[{"name": "get_weather", "arguments": {"city": "Paris"}}, {"name": "get_time", "arguments": {}}])
        ),
        "tools": [WEATHER, TIME],
    },
    "toolcall-single": {
        "messages": user(
            "weather and time"
            + fake(tool_calls=[{"name": "get_weather", "arguments": {"city": "Paris"}}, {"name": "get_time", "arguments": {}}])
        ),
        "tools": [WEATHER, TIME],
        "parallel_tool_calls": False,
    },
    "toolcall-unknown": {
        "messages": user("call it" + fake(tool_calls=[{"name": "no_such_tool", "arguments": {}}])),
        "tools": [WEATHER],
    },
    "cli-tool": {"messages": user("run" + fake(cli_tool_call="exec_command"))},
    "second-turn": {
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "weather in Paris?"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'}}
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "rain, 11 C" + fake(answer="It rains in Paris.")},
        ],
        "tools": [WEATHER],
    },
    "tool-image": {
        "messages": [
            {"role": "user", "content": "look"},
            {
                "role": "assistant",
                "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}],
            },
            {
                "role": "tool",
                "tool_call_id": "call_1",
                "content": [{"type": "text", "text": "screenshot:"}, {"type": "image_url", "image_url": {"url": "PNG"}}],
            },
            {"role": "user", "content": "what is it?" + fake(answer="A pixel.")},
        ],
        "tools": [WEATHER],
    },
    "schema": {
        "messages": user("give a person" + fake(answer='{"name":"Ada","age":36}')),
        "response_format": {
            "type": "json_schema",
            "json_schema": {
                "name": "person",
                "strict": True,
                "schema": {
                    "type": "object",
                    "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
                    "required": ["name", "age"],
                    "additionalProperties": False,
                },
            },
        },
    },
    "images": {
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "first"},
                    {"type": "image_url", "image_url": {"url": "PNG"}},
                    {"type": "text", "text": "second"},
                    {"type": "image_url", "image_url": {"url": JPEG}},
                    {"type": "text", "text": "which?" + fake(answer="Two images.")},
                ],
            }
        ]
    },
    "401": {"messages": user("hi" + fake(status=401))},
    "429": {"messages": user("hi" + fake(status=429, retry_after=7))},
    "usage-limit": {"messages": user("hi" + fake(status=429, error_type="usage_limit_reached", retry_after=120))},
    "500": {"messages": user("hi" + fake(status=500))},
    "503": {"messages": user("hi" + fake(status=503))},
    "max-tokens": {"messages": user("hi" + fake(answer="truncated answ", stop_reason="max_tokens"))},
    "stream-error": {"messages": user("hi" + fake(answer="partial", stream_error="server_error"))},
    "empty": {"messages": user("hi" + fake(answer=""))},
}


def request(case: str) -> ChatCompletionRequest:
    body = json.loads(json.dumps(CASES[case]).replace('"PNG"', json.dumps(_png())))
    return ChatCompletionRequest.model_validate({"model": "gpt-5.5", **body})


async def run_case(codex: str, case: str, out: Path) -> None:
    api = await start_fake_model_api()
    tmp = Path(tempfile.mkdtemp(prefix="codex-as-probe-"))
    try:
        backend = CodexBackend(CodexBackend.options_from({"bin": codex, "base_url": api.url + "/v1"}))
        req = request(case)
        images = extract(req, ImageLimits())
        prompt = render(req, PromptOptions(native_tools=True), images)
        home = tmp / "home"
        work = tmp / "work"
        home.mkdir()
        work.mkdir()
        spec = backend.private_home(str(tmp / "no-user-home"))
        for rel, data in spec.files:
            (home / rel).parent.mkdir(parents=True, exist_ok=True)
            (home / rel).write_bytes(data)
        env = backend.env({"PATH": os.environ["PATH"], "LANG": "C.UTF-8", "CODEX_API_KEY": "test"})
        env.update({name: str(home) for name in spec.env})
        argv = backend.argv(LaunchOptions(model=req.model, effort=req.reasoning_effort if hasattr(req, "reasoning_effort") else None))
        parser = backend.new_parser(prompt, req)
        proc = await asyncio.create_subprocess_exec(
            *argv, cwd=work, env=env, stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, limit=1 << 24,
        )
        assert proc.stdin and proc.stdout
        t0 = time.monotonic()
        sent: list[str] = []
        lines: list[str] = []
        timing: list[str] = []
        events: list[str] = []

        def write(data: bytes) -> None:
            if data:
                assert proc.stdin is not None
                proc.stdin.write(data)
                for ln in data.decode().splitlines():
                    sent.append(ln)
                    timing.append(f"{time.monotonic() - t0:8.3f} > {ln[:160]}")

        write(backend.encode_prompt(prompt, req))
        try:
            while True:
                if time.monotonic() - t0 > 30:  # codex may loop (a refused call asked again)
                    timing.append(f"{time.monotonic() - t0:8.3f} !! stopped after 30 s")
                    break
                try:  # the parser's timer, as the gateway's call honours it
                    line = await asyncio.wait_for(proc.stdout.readline(), parser.wake_s or 20)
                    timer = False
                except TimeoutError:
                    if parser.wake_s is None:
                        raise
                    line, timer = b"", True
                if timer:
                    timing.append(f"{time.monotonic() - t0:8.3f} (timer)")
                    events += [repr(e) for e in parser.feed(b"")]
                    write(parser.replies())
                    continue
                if not line:
                    break
                text = line.decode().rstrip("\n")
                lines.append(text)
                timing.append(f"{time.monotonic() - t0:8.3f} < {text[:160]}")
                evs = parser.feed(line)
                events += [repr(e) for e in evs]
                write(parser.replies())
                if parser.done:
                    break
        except TimeoutError:
            timing.append(f"{time.monotonic() - t0:8.3f} !! no line for 40 s")
        proc.stdin.close()
        try:
            rc = await asyncio.wait_for(proc.wait(), 5)
        except TimeoutError:
            proc.kill()
            rc = await proc.wait()
            timing.append(f"{time.monotonic() - t0:8.3f} !! killed after 5 s")
        rest = await proc.stdout.read()
        for ln in rest.decode().splitlines():
            lines.append(ln)
            timing.append(f"{time.monotonic() - t0:8.3f} < (after) {ln[:160]}")
        stderr = ""  # merged into stdout, as the gateway runs codex (merge_stderr)
        events += [repr(e) for e in parser.finish(rc, stderr)]
        stem = out / f"codex-as-{case}"
        scrub = lambda s: s.replace(api.url, "http://127.0.0.1:PORT").replace(str(tmp), "/tmp/PROBE")  # noqa: E731
        Path(f"{stem}.stdin.jsonl").write_text(scrub("".join(s + "\n" for s in sent)))
        Path(f"{stem}.stdout.jsonl").write_text(scrub("".join(s + "\n" for s in lines)))
        Path(f"{stem}.stderr.txt").write_text(scrub(stderr))
        Path(f"{stem}.rc").write_text(f"{rc}\n")
        Path(f"{stem}.timing.txt").write_text(scrub("\n".join(timing) + "\n"))
        Path(f"{stem}.events.txt").write_text("\n".join(events) + "\n")
        bodies = [r["body"] for r in api.requests if r["path"] == "/v1/responses"]
        if len(bodies) > 3:  # a loop: the first two and the last show it
            bodies = [*bodies[:2], {"omitted_requests": len(bodies) - 3}, bodies[-1]]
        Path(f"{stem}.requests.json").write_text(scrub(json.dumps(bodies, indent=1)) + "\n")
        print(f"{case}: rc={rc} lines={len(lines)} upstream={len(api.requests)}", flush=True)
    finally:
        await api.close()
        shutil.rmtree(tmp, ignore_errors=True)


async def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--codex", required=True)
    p.add_argument("--out", type=Path, default=Path("tests/data/real-cli"))
    p.add_argument("cases", nargs="*")
    args = p.parse_args()
    for case in args.cases or list(CASES):
        await run_case(args.codex, case, args.out)


if __name__ == "__main__":
    asyncio.run(main())
