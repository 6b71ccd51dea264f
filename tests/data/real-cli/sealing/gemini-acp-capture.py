#!/usr/bin/env python3
"""Record the REAL gemini binary in ACP mode, driven exactly as the gateway drives it, against
the fake model API (tests/fakes/fake_model_api.py, Gemini endpoint) on loopback.

    .venv/bin/python tests/data/real-cli/sealing/gemini-acp-capture.py PATH/TO/gemini [CASE...]

For each case: argv, env, work-dir files and the private GEMINI_CLI_HOME come from
``GeminiBackend`` (work dir and home are fresh temp dirs, like the pdeathsig launcher makes
them); stdin gets the backend's ``encode_prompt`` (initialize, session/new), then whatever
its parser replies after each stdout line (the session/prompt with the rendered prompt of
"say hi @@fake {directive}", answers to the CLI's requests); stdin is closed once the parser
is done. Writes ``tests/data/real-cli/gemini-<case>.stdout.jsonl``, ``.stderr.txt``, ``.rc``
and, for some cases, the first upstream request to ``sealing/gemini-acp-req-<case>.json``.
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
from cli_proxy.backends.gemini.backend import GeminiBackend, GeminiOptions  # noqa: E402
from cli_proxy.plan.prompt import render  # noqa: E402
from cli_proxy.protocol import ChatCompletionRequest  # noqa: E402
from tests.fakes.fake_model_api import start_fake_model_api  # noqa: E402

OUT = ROOT / "tests" / "data" / "real-cli"
CALL = '{"tool_call":{"name":"get_weather","arguments":{"city":"Paris"}}}'
MODEL = "gemini-2.5-flash"
QUOTA = (
    "You exceeded your current quota, please check your plan and billing details. For more "
    "information on this error, head to: https://ai.google.dev/gemini-api/docs/rate-limits. "
    "Please retry in 7s."
)

# case -> (directive, options)
CASES: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "text": ({"answer": "Hello from fake gemini", "chunks": 3}, {}),
    "json-toolcall": ({"answer": CALL, "chunks": 5}, {"tools": True}),
    "thought": (
        {"answer": "After thinking: 42.", "thought": "**Adding up**\n\nSix times seven."},
        {},
    ),
    "401": ({"status": 401}, {}),
    "429": ({"status": 429, "retry_after": 7}, {}),
    "429-quota": ({"status": 429, "retry_after": 7, "error_message": QUOTA}, {}),
    "500": ({"status": 500}, {}),
    "503": ({"status": 503}, {}),
    "bad-model": (
        {
            "status": 404,
            "error_message": "models/gemini-9-ultra is not found for API version v1beta",
        },
        {"model": "gemini-9-ultra"},
    ),
    "empty-answer": ({"answer": ""}, {}),
    "max-tokens": ({"answer": "truncated answ", "stop_reason": "max_tokens"}, {}),
    "max-tokens-empty": ({"answer": "", "stop_reason": "max_tokens"}, {}),
    "stream-cut": ({"answer": "partial text", "stream_error": "cut"}, {}),
    "own-tool-call": (
        {"function_call": "run_shell_command", "function_args": {"command": "touch CANARY"}},
        {},
    ),
}
REQUESTS = {"text", "thought", "own-tool-call"}


def request(directive: dict[str, Any], tools: bool) -> ChatCompletionRequest:
    body: dict[str, Any] = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "say hi @@fake " + json.dumps(directive)}],
    }
    if tools:
        fn = {"name": "get_weather", "parameters": {"type": "object", "properties": {}}}
        body["tools"] = [{"type": "function", "function": fn}]
    return ChatCompletionRequest.model_validate(body)


async def run(
    gemini: str, api_url: str, directive: dict[str, Any], opts: dict[str, Any]
) -> tuple[bytes, bytes, str]:
    backend = GeminiBackend(GeminiOptions(bin=gemini))
    req = request(directive, bool(opts.get("tools")))
    prompt = render(req)
    parser = backend.new_parser(prompt, req)
    with tempfile.TemporaryDirectory() as tmp:
        user_home, work, home = Path(tmp, "user"), Path(tmp, "work"), Path(tmp, "home")
        for d in (user_home / ".gemini", work, home):
            d.mkdir(parents=True)
        auth = {"security": {"auth": {"selectedType": "gemini-api-key"}}}
        (user_home / ".gemini" / "settings.json").write_text(json.dumps(auth))
        launch = LaunchOptions(model=opts.get("model", MODEL))
        for rel, content in backend.workdir_files(launch):
            (work / rel).parent.mkdir(parents=True, exist_ok=True)
            (work / rel).write_bytes(content)
        spec = backend.private_home(str(user_home))
        for rel, content in spec.files:
            (home / rel).parent.mkdir(parents=True, exist_ok=True)
            (home / rel).write_bytes(content)
        base = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(user_home),
            "GEMINI_API_KEY": "test",
            "GOOGLE_GEMINI_BASE_URL": api_url,
        }
        env = {**backend.env(base), "HOME": str(home), "GEMINI_CLI_HOME": str(home)}
        env["TMPDIR"] = str(work)
        proc = await asyncio.create_subprocess_exec(
            *backend.argv(launch),
            cwd=work,
            env=env,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,
            limit=2**24,
        )
        assert proc.stdin and proc.stdout and proc.stderr
        proc.stdin.write(backend.encode_prompt(prompt, req))
        lines: list[bytes] = []

        async def read_out() -> None:
            assert proc.stdout and proc.stdin
            while line := await proc.stdout.readline():
                lines.append(line)
                parser.feed(line)
                if reply := parser.replies():
                    proc.stdin.write(reply)
                if parser.done and not proc.stdin.is_closing():
                    proc.stdin.close()

        err_task = asyncio.create_task(proc.stderr.read())
        start = time.monotonic()
        try:
            await asyncio.wait_for(read_out(), opts.get("timeout", 60))
            rc = str(await proc.wait())
        except TimeoutError:
            os.killpg(proc.pid, signal.SIGKILL)
            await proc.wait()
            rc = f"TIMEOUT after {opts.get('timeout', 60)}s"
        print(f"  {time.monotonic() - start:.1f}s", end=" ")
        stderr = await err_task
        return b"".join(lines), stderr.replace(tmp.encode(), b"$TMP"), rc


async def main() -> None:
    gemini = str(Path(sys.argv[1]).resolve())
    only = set(sys.argv[2:])
    api = await start_fake_model_api()
    try:
        for case, (directive, opts) in CASES.items():
            if only and case not in only:
                continue
            first = len(api.requests)
            stdout, stderr, rc = await run(gemini, api.url, directive, opts)
            reqs = [r for r in api.requests[first:] if r["path"].endswith("GenerateContent")]
            stem = OUT / f"gemini-{case}"
            Path(f"{stem}.stdout.jsonl").write_bytes(stdout)
            Path(f"{stem}.stderr.txt").write_bytes(stderr)
            Path(f"{stem}.rc").write_text(rc + "\n")
            if case in REQUESTS and reqs:
                Path(OUT / "sealing" / f"gemini-acp-req-{case}.json").write_text(
                    json.dumps(reqs[0]["body"], indent=1, ensure_ascii=False) + "\n"
                )
            print(f"{case}: rc={rc} upstream requests={len(reqs)}")
    finally:
        await api.close()


if __name__ == "__main__":
    asyncio.run(main())
