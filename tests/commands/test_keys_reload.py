"""``cli-proxy serve --keys FILE`` as a real process (issue 47): SIGHUP re-reads the file
(new keys at once, a call in flight goes on; a broken file keeps the old keys and logs the
problem and its line); a broken file or state dir at start refuses to start, with the
message and no traceback; no secret in its log."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import openai
import pytest

from tests.conftest import FAKE_CLI, fake

ROOT = Path(__file__).resolve().parents[2]
OLD, NEW = "sk-old-1234", "sk-new-5678"


def cmd(keys: Path, state: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "cli_proxy",
        "serve",
        "--port",
        "0",
        "--backends",
        "claude",
        "--claude-bin",
        f"{sys.executable} {FAKE_CLI} claude",
        "--log-json",
        "--keys",
        str(keys),
        "--state-dir",
        str(state),
    ]


def env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("CLI_PROXY_")}


class Gateway:
    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.lines: list[str] = []

    async def event(self, *names: str) -> dict[str, Any]:
        """The next log line whose event is one of ``names``."""
        assert self.proc.stderr is not None
        async with asyncio.timeout(20):
            while True:
                line = (await self.proc.stderr.readline()).decode()
                assert line, "the gateway exited: " + "".join(self.lines[-5:])
                self.lines.append(line)
                with contextlib.suppress(ValueError):
                    ev = json.loads(line)
                    if ev.get("event") in names:
                        return dict(ev)


@contextlib.asynccontextmanager
async def gateway(keys: Path, state: Path) -> AsyncIterator[tuple[Gateway, str]]:
    proc = await asyncio.create_subprocess_exec(
        *cmd(keys, state), stderr=asyncio.subprocess.PIPE, cwd=ROOT, env=env()
    )
    gw = Gateway(proc)
    try:
        url = (await gw.event("listening"))["url"]
        yield gw, url
    finally:
        if proc.returncode is None:
            proc.terminate()
        assert proc.stderr is not None
        rest = await proc.stderr.read()
        gw.lines.append(rest.decode())
        await proc.wait()


def client(url: str, key: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=url, api_key=key, max_retries=0, timeout=30)


async def test_sighup_reloads_good_and_keeps_old_keys_when_broken(tmp_path: Path) -> None:
    keys = tmp_path / "keys.toml"
    keys.write_text(f'[keys.old]\nsecret = "{OLD}"\n')
    async with gateway(keys, tmp_path / "state") as (gw, url):
        old = client(url, OLD)
        hi = [{"role": "user", "content": "hi"}]
        assert (await old.chat.completions.create(model="claude-sonnet-4-6", messages=hi)).choices
        with pytest.raises(openai.AuthenticationError):
            await client(url, NEW).chat.completions.create(model="claude-sonnet-4-6", messages=hi)
        # a call in flight while the file changes goes on
        slow = asyncio.create_task(
            old.chat.completions.create(
                model="claude-sonnet-4-6",
                messages=[{"role": "user", "content": fake(answer="slow", hang=1.5)}],
            )
        )
        await asyncio.sleep(0.3)
        keys.write_text(f'[keys.new]\nsecret = "{NEW}"\n')
        gw.proc.send_signal(signal.SIGHUP)
        ev = await gw.event("keys_reloaded", "keys_reload_failed")
        assert ev["event"] == "keys_reloaded" and ev["keys"] == ["new"]
        assert (
            await client(url, NEW).chat.completions.create(model="claude-sonnet-4-6", messages=hi)
        ).choices
        with pytest.raises(openai.AuthenticationError):
            await old.chat.completions.create(model="claude-sonnet-4-6", messages=hi)
        assert (await slow).choices[0].message.content == "slow"
        # broken: the old (new) keys stay, the log names the problem and its line
        keys.write_text(f'[keys.new]\nsecret = "{NEW}"\n\n[keys.twin]\nsecret = "{NEW}"\n')
        gw.proc.send_signal(signal.SIGHUP)
        ev = await gw.event("keys_reloaded", "keys_reload_failed")
        assert ev["event"] == "keys_reload_failed" and ev["level"] == "error"
        assert "line 5" in ev["error"] and "same secret as key 'new'" in ev["error"]
        assert (
            await client(url, NEW).chat.completions.create(model="claude-sonnet-4-6", messages=hi)
        ).choices
    log = "".join(gw.lines)
    assert OLD not in log and NEW not in log


@pytest.mark.parametrize("broken", ["keys", "state"])
def test_a_broken_keys_file_or_state_dir_refuses_to_start(tmp_path: Path, broken: str) -> None:
    import subprocess

    keys = tmp_path / "keys.toml"
    state = tmp_path / "state"
    if broken == "keys":
        keys.write_text('[keys.a]\nsecret = "ok-1"\n[keys.b]\nsecret = "   "\n')
        want = f"{keys}, line 4: key 'b' has an empty or blank secret"
    else:
        keys.write_text('[keys.a]\nsecret = "ok-1"\n')
        state.write_text("a file, not a dir")
        want = f"state dir {state} cannot be created"
    done = subprocess.run(
        cmd(keys, state), capture_output=True, text=True, cwd=ROOT, env=env(), timeout=60
    )
    assert done.returncode == 2
    assert want in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and "ok-1" not in done.stderr
