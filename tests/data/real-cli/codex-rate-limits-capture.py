#!/usr/bin/env python3
"""What ``codex app-server`` (0.169.0) says about rate-limit windows, against a fake
Responses API on loopback that sets codex's rate-limit headers (tests/fakes/fake_quota_api.py).

    .venv/bin/python tests/data/real-cli/codex-rate-limits-capture.py PATH/TO/codex [CASE...]

argv, env and the private CODEX_HOME are the gateway's (``CodexBackend``), plus
``chatgpt_base_url`` on loopback (where ``account/rateLimits/read`` goes) and an HTTPS proxy
on a closed loopback port (nothing can leave). Unlike the gateway, ``initialize`` does not
opt out of ``account/rateLimits/updated`` (case ``gateway-optout`` keeps the gateway's
opt-outs). Sequence: initialize, [account/rateLimits/read id 9], thread/start, turn/start,
and after ``turn/completed`` ``account/rateLimits/read`` (id 10); stdin is closed 1 s after
its answer. Writes ``codex-0.169.0-rate-limits-CASE.{stdin.jsonl,stdout.jsonl,upstream.json}``
(upstream: each request's method, path and headers, and the headers the fake answered with).
"""

from __future__ import annotations

import asyncio
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
from cli_proxy.backends.codex.rpc import QUIET, rpc  # noqa: E402
from tests.fakes.fake_quota_api import QuotaModelAPI  # noqa: E402
from tests.fakes.fake_token_api import codex_auth_json  # noqa: E402

OUT = Path(__file__).resolve().parent
NOW = 1795800000  # fixed "now" for the reset times, so the captures are stable
HEADERS = {
    "x-codex-primary-used-percent": "42.5",
    "x-codex-primary-window-minutes": "300",
    "x-codex-primary-reset-at": str(NOW + 3600),
    "x-codex-primary-reset-after-seconds": "999",  # not a header 0.169.0 reads
    "x-codex-secondary-used-percent": "17",
    "x-codex-secondary-window-minutes": "10080",
    "x-codex-secondary-reset-after-seconds": "432000",  # only this: resetsAt stays null
    "x-codex-credits-has-credits": "true",
    "x-codex-credits-unlimited": "false",
    "x-codex-credits-balance": "12.50",
}
OTHER = {  # a second limit family (limit id codex_other)
    "x-codex-other-primary-used-percent": "70",
    "x-codex-other-primary-window-minutes": "60",
    "x-codex-other-primary-reset-at": str(NOW + 1800),
    "x-codex-other-limit-name": "gpt-5.5-fast",
}
USAGE = {  # GET /api/codex/usage, the shape codex's backend client decodes
    "plan_type": "pro",
    "rate_limit": {
        "allowed": True,
        "limit_reached": False,
        "primary_window": {
            "used_percent": 42,
            "limit_window_seconds": 18000,
            "reset_after_seconds": 3600,
            "reset_at": NOW + 3600,
        },
        "secondary_window": {
            "used_percent": 17,
            "limit_window_seconds": 604800,
            "reset_after_seconds": 432000,
            "reset_at": NOW + 432000,
        },
    },
    "credits": {"has_credits": True, "unlimited": False, "balance": "12.50"},
    "additional_rate_limits": [
        {
            "limit_name": "gpt-5.5-fast",
            "metered_feature": "codex_other",
            "rate_limit": {
                "allowed": True,
                "limit_reached": False,
                "primary_window": {
                    "used_percent": 70,
                    "limit_window_seconds": 3600,
                    "reset_after_seconds": 1800,
                    "reset_at": NOW + 1800,
                },
            },
        }
    ],
}
USAGE_LIMIT = {  # ChatGPT's 429 for a plan's limit, with the reset time codex reads
    "error": {
        "type": "usage_limit_reached",
        "message": "The usage limit has been reached",
        "plan_type": "plus",
        "resets_at": NOW + 3600,
        "resets_in_seconds": 3600,
    }
}
LIMIT_HEADERS = {
    **HEADERS,
    "x-codex-primary-used-percent": "100",
    "x-codex-active-limit": "codex",
    "x-codex-rate-limit-reached-type": "rate_limit_reached",
}
# case -> (response headers, error, usage payload, chatgpt login, gateway's opt-outs,
#          account/rateLimits/read before the thread)
CASES: dict[str, tuple[dict[str, str], Any, Any, bool, bool, bool]] = {
    "headers": (HEADERS, None, None, False, False, False),
    "two-limits": (HEADERS | OTHER, None, None, False, False, False),
    "no-headers": ({}, None, None, False, False, False),
    "gateway-optout": (HEADERS, None, None, False, True, False),
    "chatgpt": (HEADERS | OTHER, None, USAGE, True, False, True),
    "usage-limit": (LIMIT_HEADERS, (429, USAGE_LIMIT), USAGE, True, False, False),
}
PROMPT = 'say hi @@fake {"answer": "Hello from codex!", "chunks": 4, "delay": 0.3}'


async def run(codex: str, case: str) -> None:
    headers, error, usage, chatgpt, optout, pre_read = CASES[case]
    api = await QuotaModelAPI(headers=headers, error=error, usage=usage, log_unknown=False).start()
    tmp = Path(tempfile.mkdtemp(prefix="codex-rl-"))
    user, home, work = tmp / "user", tmp / "home", tmp / "work"
    for d in (user / ".codex", home, work):
        d.mkdir(parents=True)
    if chatgpt:
        auth = codex_auth_json("rt-0", time.time() + 86400, "2099-01-01T00:00:00Z")
        (user / ".codex" / "auth.json").write_text(json.dumps(auth))
    backend = CodexBackend(CodexBackend.options_from({"bin": codex, "base_url": api.url + "/v1"}))
    spec = backend.private_home(str(user))
    for rel, data in spec.files:
        (home / rel).write_bytes(data)
    for rel, target in spec.login:
        (home / rel).symlink_to(target)
    base = {"PATH": os.environ["PATH"], "LANG": "C.UTF-8"}
    if not chatgpt:
        base["CODEX_API_KEY"] = "test"
    env = {**backend.env(base), "HOME": str(home), "CODEX_HOME": str(home)}
    env |= {"HTTPS_PROXY": "http://127.0.0.1:9", "NO_PROXY": "127.0.0.1"}
    env["CODEX_REFRESH_TOKEN_URL_OVERRIDE"] = api.url + "/oauth/token"
    argv = backend.argv(LaunchOptions(model="gpt-5.5"))
    argv += ["--config", f'chatgpt_base_url="{api.url}"']
    proc = await asyncio.create_subprocess_exec(
        *argv, cwd=work, env=env, stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, limit=1 << 24,
    )  # fmt: skip
    assert proc.stdin and proc.stdout
    t0 = time.monotonic()
    sent: list[str] = []
    got: list[str] = []

    def send(msg_id: int | None, method: str, params: Any = None) -> None:
        line = rpc(msg_id, method, params)
        proc.stdin.write(line)  # type: ignore[union-attr]
        sent.append(f"{time.monotonic() - t0:7.3f} {line.decode().rstrip()}")

    # the gateway opted out of the updates when this was captured; it reads them since
    quiet = [*QUIET, "account/rateLimits/updated"] if optout else list(QUIET)
    caps = {"experimentalApi": True, "optOutNotificationMethods": quiet}
    send(
        1, "initialize", {"clientInfo": {"name": "cli_proxy", "version": "0"}, "capabilities": caps}
    )
    send(None, "initialized")
    deadline = t0 + 40
    while time.monotonic() < deadline:
        try:
            raw = await asyncio.wait_for(proc.stdout.readline(), deadline - time.monotonic())
        except TimeoutError:
            break
        if not raw:
            break
        text = raw.decode().rstrip("\n")
        got.append(f"{time.monotonic() - t0:7.3f} {text}")
        try:
            msg = json.loads(text)
        except ValueError:
            continue
        if msg.get("id") == 1:
            if pre_read:
                send(9, "account/rateLimits/read")
            send(2, "thread/start", {"ephemeral": True})
        elif msg.get("id") == 2 and "result" in msg:
            tid = msg["result"]["thread"]["id"]
            send(4, "turn/start", {"threadId": tid, "input": [{"type": "text", "text": PROMPT}]})
        elif msg.get("method") == "turn/completed":
            send(10, "account/rateLimits/read")
        elif msg.get("id") == 10:
            deadline = min(deadline, time.monotonic() + 1)
    proc.stdin.close()
    try:
        rc = await asyncio.wait_for(proc.wait(), 5)
    except TimeoutError:
        proc.kill()
        rc = await proc.wait()
    for raw in (await proc.stdout.read()).decode().splitlines():
        got.append(f"{time.monotonic() - t0:7.3f} {raw}")
    scrub = lambda s: s.replace(api.url, "http://127.0.0.1:PORT").replace(str(tmp), "/tmp/RL")  # noqa: E731
    stem = OUT / f"codex-0.169.0-rate-limits-{case}"
    # the .jsonl files hold the JSON lines only; the timing prefix goes to a .timing.txt
    Path(f"{stem}.stdin.jsonl").write_text(scrub("".join(s[8:] + "\n" for s in sent)))
    Path(f"{stem}.stdout.jsonl").write_text(scrub("".join(s[8:] + "\n" for s in got)))
    timing = sorted(
        [(s[:7], "> " + s[8:200]) for s in sent] + [(s[:7], "< " + s[8:200]) for s in got],
        key=lambda x: float(x[0]),
    )
    Path(f"{stem}.timing.txt").write_text(
        scrub("".join(f"{t} {s}\n" for t, s in timing) + f"rc={rc}\n")
    )
    drop = {"authorization", "cookie"}
    upstream = [
        {
            "method": r["method"],
            "path": r["path"],
            "headers": {
                k: ("<redacted>" if k.lower() in drop else v) for k, v in r["headers"].items()
            },
        }
        for r in api.requests
    ]
    answer = {"response_headers_set_by_fake": headers, "error_body": error, "usage_payload": usage}
    Path(f"{stem}.upstream.json").write_text(
        scrub(json.dumps({"requests": upstream, **answer}, indent=1)) + "\n"
    )
    print(f"{case}: rc={rc} stdout={len(got)} upstream={[r['path'] for r in api.requests]}")
    await api.close()
    shutil.rmtree(tmp, ignore_errors=True)


async def main() -> None:
    for case in sys.argv[2:] or list(CASES):
        await run(sys.argv[1], case)


if __name__ == "__main__":
    asyncio.run(main())
