#!/usr/bin/env python3
"""What claude 2.1.197 prints about its subscription windows (``rate_limit_event``), run as
the gateway runs it against a fake Messages API that sets Anthropic's unified rate-limit
headers (tests/fakes/fake_quota_api.py).

    .venv/bin/python tests/data/real-cli/claude-rate-limits-capture.py PATH/TO/claude [CASE...]

argv, env and stdin come from ``ClaudeBackend`` (stream-json in and out); the login is a
long-lived token (the backend's ``oauth_token`` option, ``CLAUDE_CODE_OAUTH_TOKEN``) except
in ``apikey`` (``ANTHROPIC_API_KEY``). The fake adds ``HEADERS[case]`` to every
``/v1/messages`` answer; in ``rejected`` that answer is a 429. An HTTPS proxy on a closed
loopback port keeps everything local. stdout is fed to the backend's own ``ClaudeParser``.
Writes ``claude-2.1.197-rate-limits-CASE.{stdout.jsonl,stderr.txt,rc,events.txt,upstream.json}``.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

from cli_proxy.backends.base import LaunchOptions  # noqa: E402
from cli_proxy.backends.claude.backend import ClaudeBackend  # noqa: E402
from cli_proxy.plan.prompt import render  # noqa: E402
from cli_proxy.protocol import ChatCompletionRequest  # noqa: E402
from tests.fakes.fake_quota_api import QuotaModelAPI  # noqa: E402

OUT = Path(__file__).resolve().parent
MODEL = "claude-sonnet-4-6"
PROMPT = 'say hi @@fake {"chunks": 4, "delay": 0.5}'  # four text deltas 0.5 s apart
HOUR = (int(time.time()) // 3600 + 1) * 3600  # the next full hour: a reset in the future
U = "anthropic-ratelimit-unified-"
WINDOWS = {  # the 5h and 7d windows
    U + "5h-utilization": "0.42",
    U + "5h-reset": str(HOUR),
    U + "7d-utilization": "0.17",
    U + "7d-reset": str(HOUR + 4 * 86400),
}
ALLOWED = {
    U + "status": "allowed",
    U + "reset": str(HOUR),
    U + "representative-claim": "five_hour",
    **WINDOWS,
}
WARNING = {
    **ALLOWED,
    U + "status": "allowed_warning",
    U + "5h-utilization": "0.91",
    U + "5h-surpassed-threshold": "0.9",
}
WARNING_7D = {
    **ALLOWED,
    U + "status": "allowed_warning",
    U + "representative-claim": "seven_day",
    U + "7d-utilization": "0.8",
    U + "7d-surpassed-threshold": "0.75",
}
REJECTED = {**ALLOWED, U + "status": "rejected", U + "5h-utilization": "1.0"}
LIMIT = {"type": "error", "error": {"type": "rate_limit_error", "message": "Rate limited"}}
CASES = {  # case -> (headers, error, login)
    "allowed": (ALLOWED, None, "oauth"),
    "warning": (WARNING, None, "oauth"),
    "warning-7d": (WARNING_7D, None, "oauth"),
    "rejected": (REJECTED, (429, LIMIT), "oauth"),
    "apikey": (WARNING, None, "apikey"),
}


async def run(claude: str, case: str) -> None:
    headers, error, login = CASES[case]
    api = await QuotaModelAPI(headers=headers, error=error, log_unknown=False).start()
    opts = {"bin": claude} | ({"oauth_token": "sk-ant-oat01-fake"} if login == "oauth" else {})
    backend = ClaudeBackend(ClaudeBackend.options_from(opts))
    req = ChatCompletionRequest.model_validate(
        {"model": MODEL, "messages": [{"role": "user", "content": PROMPT}]}
    )
    prompt = render(req)
    parser = backend.new_parser(prompt, req)
    with tempfile.TemporaryDirectory() as tmp:
        base = {"PATH": os.environ["PATH"], "HOME": tmp, "ANTHROPIC_BASE_URL": api.url}
        if login == "apikey":
            base["ANTHROPIC_API_KEY"] = "test"
        env = backend.env(base) | {"HOME": tmp}
        env |= {"HTTPS_PROXY": "http://127.0.0.1:9", "NO_PROXY": "127.0.0.1"}
        proc = await asyncio.create_subprocess_exec(
            *backend.argv(LaunchOptions(model=MODEL)),
            cwd=tmp,
            env=env,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        stdout, stderr = await asyncio.wait_for(
            proc.communicate(backend.encode_prompt(prompt, req)), 120
        )
    events = [e for line in stdout.splitlines(keepends=True) for e in parser.feed(line)]
    events += parser.finish(proc.returncode or 0, stderr.decode())
    stem = OUT / f"claude-2.1.197-rate-limits-{case}"
    Path(f"{stem}.stdout.jsonl").write_bytes(stdout)
    Path(f"{stem}.stderr.txt").write_bytes(stderr)
    Path(f"{stem}.rc").write_text(f"{proc.returncode}\n")
    Path(f"{stem}.events.txt").write_text("".join(f"{e!r}\n" for e in events))
    redact = {"authorization", "x-api-key"}
    requests = [
        {
            "method": r["method"],
            "path": r["path"],
            "headers": {
                k: "<redacted>" if k.lower() in redact else v for k, v in r["headers"].items()
            },
        }
        for r in api.requests
    ]
    record = {"requests": requests, "response_headers_set_by_fake": headers, "error": error}
    text = json.dumps(record, indent=1).replace(api.url, "http://127.0.0.1:PORT")
    Path(f"{stem}.upstream.json").write_text(text + "\n")
    kinds = [json.loads(x).get("type") for x in stdout.splitlines() if x.startswith(b"{")]
    print(f"{case}: rc={proc.returncode} {kinds} upstream={[r['path'] for r in api.requests]}")
    await api.close()


async def main() -> None:
    for case in sys.argv[2:] or list(CASES):
        await run(sys.argv[1], case)


if __name__ == "__main__":
    asyncio.run(main())
