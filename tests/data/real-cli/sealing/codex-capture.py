#!/usr/bin/env python3
"""Record the REAL codex binary, run exactly as the gateway runs it, against the fake model
API (tests/fakes/fake_model_api.py, OpenAI Responses endpoint) on loopback.

    .venv/bin/python tests/data/real-cli/sealing/codex-capture.py .cli/<dir>/node_modules/.bin/codex

For each case: argv, env and private CODEX_HOME come from ``CodexBackend`` (the work dir and
home are fresh temp dirs, like the pdeathsig launcher makes them); the prompt on stdin ends
with the case's ``@@fake`` directive. Writes ``tests/data/real-cli/codex-<case>.stdout.jsonl``,
``.stderr.txt`` and ``.rc``, the first upstream request of some cases to
``sealing/codex-req-<case>.json``, and line timings of a slow stream to
``codex-stream-timing.txt``.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[4]
sys.path.insert(0, str(ROOT))

from cli_proxy.backends.base import LaunchOptions  # noqa: E402
from cli_proxy.backends.codex.backend import CodexBackend, CodexOptions  # noqa: E402
from tests.fakes.fake_model_api import start_fake_model_api  # noqa: E402

OUT = ROOT / "tests" / "data" / "real-cli"
CALL = '{"tool_call":{"name":"get_weather","arguments":{"city":"Paris"}}}'
MODEL = "gpt-5.5"

# case -> (directive, options)
CASES: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "text": ({"answer": "Hello from the real codex!", "chunks": 4, "cached": 3}, {}),
    "json-toolcall": ({"answer": CALL, "chunks": 5}, {}),
    "reasoning": ({"answer": "After thinking: 42.", "reasoning": "Let me think."}, {}),
    "401-noretry": ({"status": 401}, {}),
    "429-noretry": ({"status": 429, "retry_after": 7}, {}),
    "429-usage-limit": (
        {"status": 429, "error_type": "usage_limit_reached", "retry_after": 3600},
        {},
    ),
    "500-noretry": ({"status": 500}, {}),
    "503-noretry": ({"status": 503}, {}),
    "empty-answer": ({"answer": ""}, {}),
    "max-tokens": ({"answer": "truncated answ", "stop_reason": "max_tokens"}, {}),
    "max-tokens-empty": ({"answer": "", "stop_reason": "max_tokens"}, {}),
    "stream-error": ({"answer": "partial text", "stream_error": "server_error"}, {}),
    "cli-tool-call-loop": ({"cli_tool_call": "exec_command"}, {"timeout": 3}),
    "unknown-model": ({"answer": "OK"}, {"model": "gpt-4.1"}),
}
REQUESTS = {"text", "json-toolcall", "unknown-model"}


async def run(
    codex: str, api_url: str, directive: dict[str, Any], opts: dict[str, Any]
) -> tuple[bytes, bytes, str, list[tuple[float, bytes]]]:
    backend = CodexBackend(CodexOptions(bin=codex, base_url=api_url + "/v1"))
    with tempfile.TemporaryDirectory() as tmp:
        user_home, work, home = Path(tmp, "user"), Path(tmp, "work"), Path(tmp, "home")
        for d in (user_home, work, home):
            d.mkdir()
        spec = backend.private_home(str(user_home))
        for rel, content in spec.files:
            (home / rel).write_bytes(content)
        base = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(user_home)}
        if not opts.get("no_key"):
            base["CODEX_API_KEY"] = "test"
        env = {**backend.env(base), "HOME": str(home), "CODEX_HOME": str(home)}
        env["TMPDIR"] = str(work)
        argv = backend.argv(LaunchOptions(model=opts.get("model", MODEL)))
        prompt = "<conversation_history>say hi</conversation_history>\n@@fake " + json.dumps(
            directive
        )
        proc = await asyncio.create_subprocess_exec(
            *argv,
            cwd=work,
            env=env,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,  # codex.js runs the native binary as its child
        )
        assert proc.stdin and proc.stdout and proc.stderr
        proc.stdin.write(prompt.encode())
        proc.stdin.close()
        start = time.monotonic()
        lines: list[tuple[float, bytes]] = []

        async def read_out() -> None:
            assert proc.stdout
            while line := await proc.stdout.readline():
                lines.append((time.monotonic() - start, line))

        err_task = asyncio.create_task(proc.stderr.read())
        try:
            await asyncio.wait_for(read_out(), opts.get("timeout", 30))
            rc = str(await proc.wait())
        except TimeoutError:
            os.killpg(proc.pid, signal.SIGKILL)
            await proc.wait()
            rc = f"TIMEOUT after {opts.get('timeout')}s"
        stderr = await err_task
        stdout = b"".join(line for _, line in lines)
        return stdout, stderr, rc, lines


async def main() -> None:
    codex = str(Path(sys.argv[1]).resolve())
    api = await start_fake_model_api()
    try:
        for case, (directive, opts) in CASES.items():
            first = len(api.requests)
            stdout, stderr, rc, _ = await run(codex, api.url, directive, opts)
            reqs = [r for r in api.requests[first:] if r["path"] == "/v1/responses"]
            stem = OUT / f"codex-{case}"
            if case == "cli-tool-call-loop":
                head = stderr.decode().splitlines()
                keep = "\n".join(head[:6]) + f"\n... ({len(head)} lines in all)\n"
                stem.with_suffix(".stderr.txt").write_text(keep)
                rc += f"; {len(reqs)} POST /v1/responses"
            else:
                stem.with_suffix(".stderr.txt").write_bytes(stderr)
            Path(f"{stem}.stdout.jsonl").write_bytes(stdout)
            Path(f"{stem}.rc").write_text(rc + "\n")
            if case in REQUESTS and reqs:
                body = reqs[0]["body"]
                Path(OUT / "sealing" / f"codex-req-{case}.json").write_text(
                    json.dumps(body, indent=1, ensure_ascii=False) + "\n"
                )
            print(f"{case}: rc={rc} requests={len(reqs)}")
        directive = {"answer": "one two three four five six", "chunks": 6, "delay": 0.5}
        _, _, rc, lines = await run(codex, api.url, directive, {})
        timing = [f"{t:6.2f}s {line.decode().rstrip()}" for t, line in lines]
        note = "upstream: 6 text deltas 0.5 s apart; codex stdout lines with their times:\n"
        (OUT / "codex-stream-timing.txt").write_text(note + "\n".join(timing) + "\n")
        print("stream timing:", rc)
    finally:
        await api.close()


if __name__ == "__main__":
    asyncio.run(main())
