#!/usr/bin/env python3
"""Capture copilot 1.0.102's login path with an ACCEPTED GitHub token: which requests it makes
of GitHub and the Copilot API, what ``session/new`` reports (``models``), and where a prompt's
model call goes.

    .venv/bin/python tests/data/real-cli/copilot-login-capture.py --copilot PATH/copilot \\
        --out tests/data/real-cli/copilot-1.0.102-login.json

``tests/fakes/fake_copilot_api.py`` (taking only the token set here) serves ``api.github.com``
and ``api.individual.githubcopilot.com`` through ``tests/fakes/fake_connect_proxy.py`` (a
loopback CONNECT proxy ending TLS with a test CA: ``HTTPS_PROXY``, ``NODE_EXTRA_CA_CERTS``);
any other host is refused, so nothing leaves the machine. copilot runs with the backend's own
seal flags in a throw-away home and package cache, gets ``initialize``, ``session/new`` and one
``session/prompt`` ("say hi"), and is killed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

from cli_proxy.backends.acp.rpc import ACP_PREFIX, NEW_SESSION, PROMPT, rpc_line  # noqa: E402
from cli_proxy.backends.copilot.backend import NO_TOOL, SEAL_FLAGS  # noqa: E402
from tests.fakes.fake_connect_proxy import ConnectProxy  # noqa: E402
from tests.fakes.fake_copilot_api import HOSTS, FakeCopilotAPI  # noqa: E402

TOKEN = "gho_capture_test_token"


async def capture(copilot: str, cache: str) -> dict[str, Any]:
    api = await FakeCopilotAPI(TOKEN).start()
    proxy = await ConnectProxy(HOSTS, api.port).start()
    out: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="copilot-login-capture-") as home:
        work = Path(home, "work")
        work.mkdir()
        (work / ".git").write_bytes(b"gitdir: /nonexistent\n")
        env = {
            "PATH": os.environ.get("PATH", os.defpath),
            "HOME": home,
            "COPILOT_HOME": home,
            "COPILOT_CACHE_HOME": cache,
            "COPILOT_AUTO_UPDATE": "false",
            "NO_COLOR": "1",
            "GH_TOKEN": TOKEN,
            "HTTPS_PROXY": proxy.url,
            "NODE_EXTRA_CA_CERTS": str(proxy.ca_pem),
            "TMPDIR": str(work),
        }
        argv = [copilot, "--acp", "--stdio", f"--available-tools={NO_TOOL}", *SEAL_FLAGS]
        proc = await asyncio.create_subprocess_exec(
            *argv,
            env=env,
            cwd=work,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
            start_new_session=True,
        )
        assert proc.stdin is not None and proc.stdout is not None

        async def until(rpc_id: int) -> dict[str, Any]:
            assert proc.stdout is not None
            while line := await proc.stdout.readline():
                obj = json.loads(line)
                out.append(obj)
                if obj.get("id") == rpc_id:
                    return dict(obj)
            raise RuntimeError("copilot closed stdout")

        try:
            proc.stdin.write(ACP_PREFIX)
            new = await asyncio.wait_for(until(NEW_SESSION), 90)
            sid = new["result"]["sessionId"]
            prompt = [{"type": "text", "text": "say hi"}]
            params = {"sessionId": sid, "prompt": prompt}
            proc.stdin.write(rpc_line({"id": PROMPT, "method": "session/prompt", "params": params}))
            done = await asyncio.wait_for(until(PROMPT), 90)
        finally:
            os.killpg(proc.pid, 9)
            await proc.wait()
            await proxy.close()
            await api.close()
    requests = []
    for r in api.requests:
        body = r["body"]
        if isinstance(body, dict) and "system" in body:  # the model call: its shape, not text
            body = {
                "model": body.get("model"),
                "keys": sorted(body),
                "system_chars": len(json.dumps(body["system"])),
                "tools": len(body.get("tools") or []),
            }
        scheme, _, token = r["auth"].partition(" ")
        auth = f"{scheme} <the token set in GH_TOKEN>" if token == TOKEN else r["auth"]
        requests.append({**r, "auth": auth, "body": body})
    updates = [m["params"]["update"] for m in out if m.get("method") == "session/update"]
    return {
        "what": "copilot 1.0.102, GH_TOKEN accepted by tests/fakes/fake_copilot_api.py "
        "(answer shapes and their source: that module's docstring); made by "
        "tests/data/real-cli/copilot-login-capture.py",
        "argv": ["copilot", *argv[1:]],
        "connects": proxy.connects,
        "refused": proxy.refused,
        "requests": requests,
        "session_new_models": new["result"].get("models"),
        "session_new_keys": sorted(new["result"]),
        "prompt_updates": [
            {k: v for k, v in u.items() if k != "availableCommands"}
            for u in updates
            if u.get("sessionUpdate") != "available_commands_update"
        ],
        "prompt_result": done.get("result"),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--copilot", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--cache", help="COPILOT_CACHE_HOME (default: a temp dir, 235 MB)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="copilot-login-cache-") as tmp:
        result = asyncio.run(capture(args.copilot, args.cache or tmp))
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
