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
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import openai
import pytest

from tests.conftest import fake
from tests.run.test_reliability import gateway_cmd

ROOT = Path(__file__).resolve().parents[2]
OLD, NEW = "sk-old-1234", "sk-new-5678"


def cmd(keys: Path, state: Path) -> list[str]:
    """``cli-proxy serve`` on the fake claude, as tests/run/test_reliability.py starts it,
    with a keys file and a state dir."""
    return gateway_cmd("--keys", str(keys), "--state-dir", str(state))


def env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("CLI_PROXY_")}


class Gateway:
    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.lines: list[str] = []

    async def event(self, *names: str) -> dict[str, Any]:
        """The next log line whose event is one of ``names``."""
        assert self.proc.stderr is not None
        # only a bound on a hang, as test_reliability's gateway_process has: on a loaded
        # machine a gateway's start alone took over 20 s
        async with asyncio.timeout(90):
            while True:
                line = (await self.proc.stderr.readline()).decode()
                assert line, "the gateway exited: " + "".join(self.lines[-5:])
                self.lines.append(line)
                with contextlib.suppress(ValueError):
                    ev = json.loads(line)
                    if ev.get("event") in names:
                        return dict(ev)


@contextlib.asynccontextmanager
async def gateway(keys: Path, state: Path, *extra: str) -> AsyncIterator[tuple[Gateway, str]]:
    proc = await asyncio.create_subprocess_exec(
        *cmd(keys, state), *extra, stderr=asyncio.subprocess.PIPE, cwd=ROOT, env=env()
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


async def test_max_concurrent_holds_across_two_gateway_workers(tmp_path: Path) -> None:
    """Two gateway processes on one host sharing the keys file and the state dir: a key's
    max_concurrent counts both workers' calls (leases in the usage store); a caller over it
    waits its queue time (let in when the other worker's call ends), then 429; a worker
    killed mid-call frees its lease."""
    import sqlite3

    keys = tmp_path / "keys.toml"
    keys.write_text(f'[keys.old]\nsecret = "{OLD}"\nmax_concurrent = 1\n')
    state, model = tmp_path / "state", "claude-sonnet-4-6"
    hi = [{"role": "user", "content": "hi"}]
    slow = [{"role": "user", "content": fake(answer="slow", hang=2.5)}]

    async def leased() -> None:  # the slow call holds the key's one lease (no fixed sleep)
        async with asyncio.timeout(20):
            while True:
                with contextlib.closing(sqlite3.connect(state / "usage.sqlite3")) as db:
                    if db.execute("SELECT COUNT(*) FROM inflight").fetchone()[0]:
                        return
                await asyncio.sleep(0.05)

    async with (
        gateway(keys, state, "--queue-timeout", "1") as (a, url_a),
        gateway(keys, state, "--queue-timeout", "15") as (_b, url_b),
    ):
        on_a, on_b = client(url_a, OLD), client(url_b, OLD)
        # B's call holds the key: A's caller waits its 1 s, then 429
        held = asyncio.create_task(on_b.chat.completions.create(model=model, messages=slow))
        await leased()
        with pytest.raises(openai.RateLimitError) as err:
            await on_a.chat.completions.create(model=model, messages=hi)
        assert err.value.code == "key_concurrency_limit"
        assert (await held).choices[0].message.content == "slow"
        # A's call holds it: B's caller waits and is let in once A's call ends
        held = asyncio.create_task(on_a.chat.completions.create(model=model, messages=slow))
        await leased()
        waited = await on_b.chat.completions.create(model=model, messages=hi)
        assert held.done() and waited.choices[0].message.content == "ok"
        # A dies mid-call (SIGKILL: nothing of it runs to end its lease); B's next call
        # finds the lease of a pid that is gone, drops it and goes on
        dying = asyncio.create_task(on_a.chat.completions.create(model=model, messages=slow))
        await leased()
        a.proc.kill()
        await a.proc.wait()
        with contextlib.suppress(openai.APIError):
            await dying
        again = await on_b.chat.completions.create(model=model, messages=hi)
        assert again.choices[0].message.content == "ok"
