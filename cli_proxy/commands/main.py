"""``cli-proxy serve``: start the gateway; ``cli-proxy doctor``: say what it would serve with."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import ctypes.util
import os
import signal
import sys
from pathlib import Path
from typing import Any

from aiohttp import web

from cli_proxy import __version__
from cli_proxy.backends.registry import names
from cli_proxy.config import Settings
from cli_proxy.gateway import Gateway, reload_keys
from cli_proxy.logs import configure, log
from cli_proxy.replay.sources import make_gateway
from cli_proxy.run.containment import enable_subreaper
from cli_proxy.server.app import create_app
from cli_proxy.server.listener import GatewayRunner


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="cli-proxy", description=__doc__)
    p.add_argument("--version", action="version", version=f"cli-proxy {__version__}")
    sub = p.add_subparsers(dest="command")
    _settings_args(sub.add_parser("serve", help="run the OpenAI-compatible gateway (the default)"))
    _settings_args(
        sub.add_parser(
            "doctor",
            help="check each backend's CLI, login, containment and fixtures (exit 1: none "
            "can serve); takes serve's flags, so it checks what serve would run",
        )
    )
    return p


def _settings_args(s: argparse.ArgumentParser) -> None:
    s.add_argument("--host", help="bind address (default 127.0.0.1)")
    s.add_argument("--port", type=int, help="port (default 8080; 0 picks a free one)")
    for name in names():
        s.add_argument(
            f"--{name}-bin",
            dest=f"{name}_bin",
            help=f"{name} command (path or command line; default {name!r})",
        )
    s.add_argument("--backends", help=f"comma-separated backends to enable ({','.join(names())})")
    s.add_argument("--api-key", action="append", dest="api_keys", help="require this Bearer key")
    s.add_argument(
        "--keys", type=Path, dest="keys_file", help="named client keys and limits (docs/keys.md)"
    )
    s.add_argument(
        "--state-dir", type=Path, help="where usage per key is kept (default: per-user data dir)"
    )
    s.add_argument(
        "--max-concurrency",
        type=int,
        help="CLI processes alive at once, calls and spares (default: from the memory)",
    )
    for name in names():
        s.add_argument(
            f"--{name}-max-concurrency",
            type=int,
            dest=f"{name}__max_concurrency",
            help=f"{name} calls at once (an upstream account's limit; default: no cap)",
        )
    s.add_argument("--max-starting", type=int, help="CLIs starting at once (default: CPUs)")
    s.add_argument("--max-queue", type=int, help="requests waiting for a slot before 429")
    s.add_argument(
        "--queue-timeout", type=float, dest="queue_timeout_s", help="seconds a call may queue"
    )
    s.add_argument(
        "--timeout", type=float, dest="timeout_s", help="seconds per call from admission, at most"
    )
    s.add_argument("--idle-timeout", type=float, dest="idle_timeout_s", help="seconds of silence")
    s.add_argument(
        "--write-timeout",
        type=float,
        dest="write_timeout_s",
        help="seconds a streaming client may take no bytes",
    )
    s.add_argument(
        "--drain-timeout", type=float, dest="drain_timeout_s", help="on SIGTERM: seconds to finish"
    )
    s.add_argument("--record", type=Path, dest="record_dir", help="save every call as a fixture")
    s.add_argument("--replay", type=Path, dest="replay_dir", help="answer from fixtures in DIR")
    s.add_argument("--replay-speed", type=float, help="1 = recorded pace, 0 = instant")
    s.add_argument("--log-level", help="debug, info, warning, error")
    s.add_argument("--log-json", action="store_true", default=None, help="JSON log lines")


def settings_from_args(args: argparse.Namespace) -> Settings:
    overrides: dict[str, Any] = {}
    for k, v in vars(args).items():
        if v is None or k == "command":
            continue
        name, nested, field = k.partition("__")  # --claude-max-concurrency: claude's own
        if nested:
            overrides.setdefault(name, {})[field] = v
        else:
            overrides[k] = v
    return Settings(**overrides)


def _return_large_buffers_to_the_os() -> None:
    """glibc keeps freed multi-MB buffers (a large answer's lines and copies) in its heap
    once its adaptive mmap threshold has grown; fixing the threshold at 1 MiB makes every
    buffer that large its own mapping, returned when freed. Measured in bench/memory.py:
    after four 7.5 MB answers the gateway kept 59 MiB above idle without this, 30 with it."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").mallopt(-3, 1024 * 1024)


def _watch_children_with_pidfds() -> None:
    """Python 3.11 waits for each child in a thread of its own (ThreadedChildWatcher); a
    pidfd watcher needs none: ~2 ms less latency and CPU per call (docs/performance.md).
    Python 3.12+ does this by itself. Only for the CLI's own single, main-thread loop."""
    if sys.version_info >= (3, 12) or not hasattr(os, "pidfd_open"):
        return
    try:
        os.close(os.pidfd_open(os.getpid()))  # needs Linux >= 5.3
    except OSError:
        return
    watcher = asyncio.PidfdChildWatcher()
    watcher.attach_loop(asyncio.get_running_loop())
    asyncio.set_child_watcher(watcher)


async def serve(settings: Settings) -> None:
    _watch_children_with_pidfds()
    _return_large_buffers_to_the_os()
    enable_subreaper()
    gateway, mode = make_gateway(settings)
    log.info("starting", mode=mode, containment=gateway.launcher.describe())
    app = create_app(gateway)
    runner = GatewayRunner(
        app, header_timeout_s=settings.header_timeout_s, handler_cancellation=True, access_log=None
    )
    await runner.setup()
    site = web.TCPSite(runner, settings.host, settings.port)
    await site.start()
    addrs = [f"http://{h}:{p}" for h, p, *_ in (runner.addresses or [])]
    log.info("listening", url=f"{addrs[0]}/v1" if addrs else None, mode=mode)
    stop, force = asyncio.Event(), asyncio.Event()

    def on_signal() -> None:  # the first signal drains, a second one stops at once
        (force if stop.is_set() else stop).set()

    def on_hangup() -> None:  # SIGHUP: re-read the keys file (a broken one keeps the old)
        if settings.keys_file is None:
            log.info("keys_not_reloaded", reason="no keys file (--keys)")
            return
        problem = reload_keys(gateway)
        if problem is not None:
            log.error("keys_reload_failed", error=problem, kept="the keys loaded before")
        else:
            log.info("keys_reloaded", keys=[k.name for k in gateway.governor.ring.keys])

    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, on_signal)
    with contextlib.suppress(NotImplementedError):
        loop.add_signal_handler(signal.SIGHUP, on_hangup)
    try:
        await stop.wait()
        await drain(gateway, force, settings.drain_timeout_s)
    finally:
        log.info("stopping", running=gateway.supervisor.running)
        await runner.cleanup()


async def drain(gateway: Gateway, force: asyncio.Event, timeout_s: float) -> None:
    """New and queued calls get 503 and /health says draining; running calls may finish, up to
    ``timeout_s`` or a second signal; what is left is then killed by the shutdown."""
    gateway.supervisor.drain()  # queued calls: 503 at once
    log.info("draining", running=gateway.supervisor.running, timeout_s=timeout_s)
    deadline = asyncio.get_running_loop().time() + timeout_s
    # running counts every slot held, a call whose CLI is still starting too: it must finish
    while gateway.supervisor.running + gateway.supervisor.waiting and not force.is_set():
        left = deadline - asyncio.get_running_loop().time()
        if left <= 0:
            break
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(force.wait(), min(left, 0.1))


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        settings = settings_from_args(args)
    except ValueError as exc:
        print(f"cli-proxy: invalid settings: {exc}", file=sys.stderr)
        return 2
    if args.command == "doctor":
        from cli_proxy.commands.doctor import run

        status, lines = run(settings)
        print("\n".join(lines), flush=True)
        return status
    configure(settings.log_level, bool(settings.log_json))
    from cli_proxy.replay.store import FixtureError
    from cli_proxy.run.keys import KeysFileError
    from cli_proxy.run.usage import StateError

    try:
        asyncio.run(serve(settings))
    except (FixtureError, KeysFileError, StateError) as exc:
        print(f"cli-proxy: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # e.g. the port is taken
        print(f"cli-proxy: cannot serve on {settings.host}:{settings.port}: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
