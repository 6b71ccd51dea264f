#!/usr/bin/env python3
"""Capture what ``copilot --acp`` (1.0.102) does when the gateway's copilot backend drives it.

    .venv/bin/python tests/data/real-cli/copilot-capture.py --copilot PATH/copilot \\
        --out tests/data/real-cli [CASE ...]

For each case it starts ``tests/fakes/fake_model_api.py`` on 127.0.0.1 (taking only the key
set here), points copilot at it through BYOK (``COPILOT_PROVIDER_TYPE=anthropic``: the fake's
``/v1/messages``), builds the backend's own argv, env, work-dir files and private
COPILOT_HOME (as the gateway's pdeathsig launcher does), spawns the real binary, writes the
warm prefix and lets the backend's own ``CopilotParser`` drive the session until it is done;
stdin is then closed. Writes per case ``copilot-CASE``: ``.stdout.jsonl``, ``.stderr.txt``,
``.rc``, ``.upstream.json`` (the last model request: model, system prompt size, tools
declared, the user content) and ``.events.txt`` (the parser's events). Nothing leaves the
machine: the key is a dummy, the base URL the loopback fake.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import zlib
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

from cli_proxy.backends.base import LaunchOptions  # noqa: E402
from cli_proxy.backends.copilot.backend import CopilotBackend  # noqa: E402
from cli_proxy.plan.images import ImageLimits, extract  # noqa: E402
from cli_proxy.plan.prompt import PromptOptions, render  # noqa: E402
from cli_proxy.protocol import ChatCompletionRequest  # noqa: E402
from tests.fakes.fake_model_api import start_fake_model_api  # noqa: E402

KEY = "sk-copilot-capture"
MODEL = "claude-sonnet-4.6"
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}


def _png() -> bytes:
    """A 1x1 red PNG."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        crc = struct.pack(">I", zlib.crc32(kind + data))
        return struct.pack(">I", len(data)) + kind + data + crc

    header = struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0)
    pixels = zlib.compress(b"\x00\xff\x00\x00")
    return (
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", pixels) + chunk(b"IEND", b"")
    )


PNG = base64.b64encode(_png()).decode()


def fake(**spec: Any) -> str:
    return "say hi @@fake " + json.dumps(spec)


CASES: dict[str, dict[str, Any]] = {
    "text": {"messages": [{"role": "user", "content": fake(answer="Hello from copilot")}]},
    "json-toolcall": {
        "messages": [
            {
                "role": "user",
                "content": fake(
                    answer='{"tool_call":{"name":"get_weather","arguments":{"city":"Paris"}}}'
                ),
            }
        ],
        "tools": [WEATHER],
    },
    "401": {"messages": [{"role": "user", "content": fake(status=401)}]},
    "429": {"messages": [{"role": "user", "content": fake(status=429, retry_after="0")}]},
    "503": {"messages": [{"role": "user", "content": fake(status=529, retry_after="0")}]},
    "400": {"messages": [{"role": "user", "content": fake(status=400)}]},
    "empty": {"messages": [{"role": "user", "content": fake(answer="")}]},
    "max-tokens": {
        "messages": [{"role": "user", "content": fake(answer="cut off", stop_reason="max_tokens")}]
    },
    "thinking": {
        "messages": [{"role": "user", "content": fake(thinking="deep thought", answer="42")}],
        "reasoning_effort": "high",
    },
    "image": {
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "what colour? " + fake(answer="red")},
                    {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}},
                    {"type": "text", "text": "one word"},
                ],
            }
        ]
    },
}


def run_case(binary: str, name: str, body: dict[str, Any], api_url: str, out: Path) -> None:
    req = ChatCompletionRequest.model_validate({"model": f"copilot/{MODEL}", **body})
    backend = CopilotBackend(CopilotBackend.options_from({"bin": binary}))
    backend.warm_up()
    images = extract(req, ImageLimits()) if name == "image" else {}
    prompt = render(req, PromptOptions(), images)
    launch = LaunchOptions(model=MODEL, effort=req.reasoning_effort)
    byok = {
        "COPILOT_PROVIDER_BASE_URL": api_url,
        "COPILOT_PROVIDER_TYPE": "anthropic",
        "COPILOT_PROVIDER_API_KEY": KEY,
    }
    env = backend.env({**os.environ, **byok})
    top = Path(tempfile.mkdtemp(prefix="copilot-capture-"))
    work, home = top / "work", top / "home"
    work.mkdir()
    home.mkdir()
    for rel, content in backend.workdir_files(launch):
        (work / rel).write_bytes(content)
    env.update({"HOME": str(home), "COPILOT_HOME": str(home), "TMPDIR": str(work)})
    try:
        parser = backend.new_parser(prompt, req)
        argv = backend.argv(launch)
        proc = subprocess.Popen(
            argv,
            cwd=work,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(backend.encode_prompt(prompt, req))
        proc.stdin.flush()
        lines: list[bytes] = []
        events: list[Any] = []
        for line in proc.stdout:
            lines.append(line)
            events += parser.feed(line)
            reply = parser.replies()
            if reply:
                proc.stdin.write(reply)
                proc.stdin.flush()
            if parser.done:
                break
        proc.stdin.close()
        rest = proc.stdout.read()
        proc.wait(timeout=30)
        assert proc.stderr is not None
        stderr = proc.stderr.read()
        lines += rest.splitlines(keepends=True)
        events += parser.finish(proc.returncode, stderr.decode(errors="replace"))
        stem = str(out / f"copilot-1.0.102-{name}")
        Path(stem + ".stdout.jsonl").write_bytes(b"".join(lines))
        Path(stem + ".stderr.txt").write_bytes(stderr)
        Path(stem + ".rc").write_text(f"{proc.returncode}\n")
        Path(stem + ".events.txt").write_text("".join(f"{e!r}\n" for e in events))
        left = sorted(str(p.relative_to(top)) for p in top.rglob("*"))
        Path(stem + ".argv.json").write_text(json.dumps({"argv": argv[1:], "left": left}) + "\n")
    finally:
        shutil.rmtree(top)


def upstream(requests: list[dict[str, Any]]) -> dict[str, Any]:
    if not requests:
        return {}
    q = requests[-1]
    b = q["body"]
    content = b["messages"][-1]["content"]
    return {
        "path": q["path"],
        "model": b.get("model"),
        "system_bytes": len(json.dumps(b.get("system"))),
        "tools": [t.get("name") for t in b.get("tools", [])],
        "thinking": b.get("thinking"),
        "output_config": b.get("output_config"),
        "max_tokens": b.get("max_tokens"),
        "requests": len(requests),
        "user_content": [
            {
                k: (v if k != "source" else {"type": v["type"], "bytes": len(v["data"])})
                for k, v in c.items()
            }
            for c in content
        ],
    }


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--copilot", required=True)
    ap.add_argument("--out", default=str(ROOT / "tests" / "data" / "real-cli"))
    ap.add_argument("cases", nargs="*")
    args = ap.parse_args()
    out = Path(args.out)
    for name in args.cases or list(CASES):
        api = await start_fake_model_api(anthropic_key=KEY)
        try:
            await asyncio.to_thread(run_case, args.copilot, name, CASES[name], api.url, out)
            stem = str(out / f"copilot-1.0.102-{name}")
            up = upstream([r for r in api.requests if r["path"].startswith("/v1/messages")])
            Path(stem + ".upstream.json").write_text(json.dumps(up, indent=1) + "\n")
        finally:
            await api.close()
        print(name, "done", flush=True)


if __name__ == "__main__":
    asyncio.run(main())
