"""``/status`` in a real browser: Debian's ``chromium``, headless, renders the page of a gateway
that served a few calls with the fake CLIs; the DOM it built has the meters and the calls
table, and its screenshot is a picture of the page (docs/status.png is one: ``make status-png``
takes it, with ``CLI_PROXY_STATUS_SCREENSHOT=docs/status.png`` and pytest's base temp at a
neutral path, so the page shows no path of the machine it was taken on). Skipped, with a
note, where chromium is not installed (``make browser`` installs it, as ``make test`` does)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shlex
import shutil
import signal
import struct
import sys
import time
from pathlib import Path

import aiohttp
import pytest

from tests.conftest import CODEX_FAKE_CLI, FAKE_CLI, Served, ServeFactory, fake
from tests.server.status.test_routes import CANARY_PROMPT, Page, user

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(
    CHROMIUM is None,
    reason="chromium not installed (Debian package 'chromium'; `make browser`, which "
    "`make test` runs, installs it when run as root with apt-get)",
)
KEY = "browser-key"
WIDTH, HEIGHT = 1280, 1000


async def chromium(profile: Path, *args: str) -> bytes:
    """Run headless chromium to its end (in a session of its own: all of it is killed on a
    timeout); its stdout."""
    assert CHROMIUM is not None
    proc = await asyncio.create_subprocess_exec(
        CHROMIUM,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        "--disable-extensions",
        "--disable-dev-shm-usage",
        "--hide-scrollbars",
        f"--user-data-dir={profile}",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
        start_new_session=True,
        env={**os.environ, "TZ": os.environ.get("TZ", "UTC")},
    )
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), 90)
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        await proc.wait()
        raise
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # what it left (zygote, utility processes)
    assert proc.returncode == 0, f"chromium exited {proc.returncode}"
    return out


async def make_calls(served: Served) -> None:
    model = "claude-sonnet-4-6"
    windows = [
        {"status": "allowed", "rateLimitType": "five_hour", "utilization": 0.42},
        {"status": "allowed_warning", "rateLimitType": "seven_day", "utilization": 0.83},
    ]
    now = time.time()
    directives = [
        fake(answer="first", rate_limit={**windows[0], "resetsAt": now + 2 * 3600 + 12 * 60}),
        fake(answer="second", rate_limit={**windows[1], "resetsAt": now + 3 * 86400 + 5 * 3600}),
        fake(
            is_error=True,
            api_error_status=429,
            error_message="API Error: 429",
            exit=1,
            print_before_exit=True,
        ),
    ]
    headers = {"Authorization": f"Bearer {KEY}"}
    async with aiohttp.ClientSession(headers=headers) as s:
        for d in directives:
            body = {"model": model, "messages": user(CANARY_PROMPT + d)}
            async with s.post(f"{served.base_url}/chat/completions", json=body) as r:
                await r.read()
        body = {"model": "gemini-2.5-pro", "messages": user(CANARY_PROMPT + fake(answer="hi"))}
        async with s.post(f"{served.base_url}/chat/completions", json=body) as r:
            assert r.status == 200
        body = {"model": "nope-1", "messages": user(CANARY_PROMPT)}
        async with s.post(f"{served.base_url}/chat/completions", json=body) as r:
            assert r.status == 404
        # the page probes the binaries once (doctor's check); the browser sees them
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            async with s.get(served.base_url.removesuffix("/v1") + "/status") as r:
                if "checking…" not in await r.text():
                    break


def cli_commands(root: Path) -> Path:
    """Each fake CLI as a command named like the real one (``claude``, ``gemini``, ``codex``) in
    ``root/bin``: the page names the binary it finds on PATH, and this way that is
    ``<pytest base temp>/bin/claude``, not this checkout's Python and fake CLI paths."""
    bindir = root / "bin"
    bindir.mkdir(exist_ok=True)
    for name, argv in (
        ("claude", [sys.executable, "-S", str(FAKE_CLI), "claude"]),
        ("gemini", [sys.executable, "-S", str(FAKE_CLI), "gemini"]),
        ("codex", [sys.executable, "-S", str(CODEX_FAKE_CLI)]),
    ):
        (bindir / name).write_text(f'#!/bin/sh\nexec {shlex.join(argv)} "$@"\n')
        (bindir / name).chmod(0o755)
    return bindir


def png_size(path: Path) -> tuple[int, int]:
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    width, height = struct.unpack(">II", head[16:24])
    return width, height


async def test_chromium_renders_the_status_page(
    serve: ServeFactory,
    tmp_path: Path,
    tmp_path_factory: pytest.TempPathFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # a claude.ai login whose access token expires in three hours (no token is shown)
    home = tmp_path / "home"
    (home / ".claude").mkdir(parents=True)
    expires_ms = (time.time() + 3 * 3600 + 120) * 1000
    (home / ".claude" / ".credentials.json").write_text(
        '{"claudeAiOauth": {"accessToken": "SECRET-A", "refreshToken": "SECRET-R", '
        f'"expiresAt": {expires_ms}}}}}'
    )
    monkeypatch.setenv("HOME", str(home))
    for var in (
        "ANTHROPIC_API_KEY",
        "ANTHROPIC_AUTH_TOKEN",
        "CLAUDE_CODE_OAUTH_TOKEN",
        "CLAUDE_CONFIG_DIR",
        "GEMINI_API_KEY",
        "GOOGLE_API_KEY",
        "GOOGLE_APPLICATION_CREDENTIALS",
    ):
        monkeypatch.delenv(var, raising=False)
    bindir = cli_commands(tmp_path_factory.getbasetemp())
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ.get('PATH', os.defpath)}")
    bins = {f"{n}_bin": n for n in ("claude", "gemini", "codex")}
    served = await serve(api_keys=[KEY], warm_pool=True, **bins)
    await make_calls(served)
    # the key as Basic auth's password, in the URL for chromium only: the page never takes
    # it from a query string
    url = served.base_url.removesuffix("/v1").replace("://", f"://operator:{KEY}@") + "/status"

    started = time.monotonic()
    dom = (await chromium(tmp_path / "profile", "--dump-dom", url)).decode()
    page = Page(dom)
    assert "<h1>cli-proxy" in dom, dom[:500]
    assert CANARY_PROMPT not in dom and "SECRET" not in dom
    windows = {a["data-window"]: a for a in page.meters(backend="claude")}
    assert windows["five_hour"]["value"] == "0.42" and windows["seven_day"]["value"] == "0.83"
    gauges = {a.get("data-gauge") for t, a in page.tags if t == "meter" and "data-gauge" in a}
    assert gauges == {"calls running", "calls queued", "CLI processes", "CLIs starting"}
    statuses = ["404 model_not_found", "200", "429 rate_limit_exceeded", "200", "200"]
    assert [r[4] for r in page.rows] == statuses  # newest first
    assert "claude.ai oauth" in dom and "access token expires in 3 h" in dom
    assert '<h3>claude<span class="ok badge">ready</span></h3>' in dom
    assert '<h3>gemini<span class="bad badge">no login</span></h3>' in dom

    shot = tmp_path / "status.png"
    await chromium(
        tmp_path / "profile2",
        f"--screenshot={shot}",
        f"--window-size={WIDTH},{HEIGHT}",
        url,
    )
    assert png_size(shot) == (WIDTH, HEIGHT)
    print(f"\nchromium: DOM and screenshot in {time.monotonic() - started:.1f} s")
    keep = os.environ.get("CLI_PROXY_STATUS_SCREENSHOT")
    if keep:
        shutil.copyfile(shot, keep)
