"""``cli-proxy doctor``: why a backend does or does not answer, in one screen (the facts of
each backend from ``backends/checks.py``).

One line per backend (binary, version and whether the tests cover it, login present; a
second, ``warning``, when the login is there but likely refused, e.g. gemini with only a
personal Google login), then
the containment in force, the warm pool's memory and where replayed fixtures come from. A
newcomer whose call fails learns here whether the CLI is missing, logged out, or running
without bubblewrap (no prompt caching). Exit status 0 when at least one backend can serve.

Nothing here prints a secret: a login is named by its file or its variable's name.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from cli_proxy import __version__
from cli_proxy.backends.checks import check_backend
from cli_proxy.backends.registry import at_rest_mib
from cli_proxy.config import Settings
from cli_proxy.run.containment import BwrapLauncher, PdeathsigLauncher, default_work_root
from cli_proxy.run.limits import from_settings as limits_from_settings


def containment_line(settings: Settings) -> str:
    if settings.launcher in ("auto", "bwrap") and BwrapLauncher.available():
        return (
            "bwrap: PID namespace, private /tmp, HOME limited to each CLI's state; "
            "same in-sandbox paths every call, so prompts cache"
        )
    if settings.launcher == "bwrap":
        return "bwrap asked for (launcher=bwrap) but bubblewrap is missing or cannot run here"
    why = "launcher=pdeathsig" if settings.launcher == "pdeathsig" else "no usable bubblewrap"
    work = settings.work_root or default_work_root()
    setpriv = "setpriv" if PdeathsigLauncher._setpriv else "a preexec hook (full fork, ~5 ms)"
    return (
        f"pdeathsig fallback ({why}; via {setpriv}; work dirs in {work}). It costs: prompt "
        "caching (each call's own work dir path is in its prompt; one CLI measured 27% of "
        "input read from cache instead of 95%), and a kill -9 of the gateway leaves escaped "
        "grandchildren running. Install bubblewrap (apt-get install bubblewrap)"
    )


def warm_pool_line(settings: Settings, ready: list[str]) -> str:
    if not settings.warm_pool or settings.warm_max_total == 0 or settings.warm_max_per_key == 0:
        return "off (warm_pool=false): every call starts its CLI cold"
    sizes = at_rest_mib(ready)
    each = ", ".join(f"~{mib} MiB per {n} spare" for n, mib in sizes.items())
    if not sizes:
        return f"up to {settings.warm_max_total} spares; no ready backend to pre-start"
    worst = settings.warm_max_total * max(sizes.values())
    return (
        f"up to {settings.warm_max_total} spares ({each}): at most ~{worst} MiB RSS "
        "(warm_max_total bounds it, warm_pool=false turns it off)"
    )


def capacity_line(settings: Settings) -> str:
    """The bounds this machine gets from the settings (``limits.py``; also on ``/health``)."""
    b, t = limits_from_settings(settings)
    if b.source == "memory":
        why = f"from {b.budget_mib} MiB for CLIs / {b.cli_mib} MiB per CLI"
    else:
        why = "max_concurrency"
    caps = ", ".join(f"{n} at most {c}" for n, c in b.per_backend.items())
    return (
        f"{b.max_processes} CLI processes at once, calls and spares ({why}); "
        f"{b.max_starting} starting at once; queue {settings.max_queue} for "
        f"{t.queue_timeout_s:g} s" + (f"; {caps}" if caps else "")
    )


def fixtures_line(settings: Settings, any_live: bool) -> str:
    from cli_proxy.replay.sources import shipped_fixtures
    from cli_proxy.replay.store import FixtureError, FixtureStore

    directory = settings.replay_dir or shipped_fixtures()
    try:
        count = f"{len(FixtureStore.load(directory))} recorded fixtures in {directory}"
    except FixtureError as exc:
        return f"cannot load: {exc}"
    if settings.replay_dir is not None:
        return f"{count}: served for every call (--replay)"
    if any_live:
        return f"{count}: not served (a CLI is found; --replay DIR serves fixtures)"
    return f"{count}: SERVED, no CLI is found (replay mode)"


def run(settings: Settings, env: Mapping[str, str] | None = None) -> tuple[int, list[str]]:
    """The report's lines and the exit status (0: at least one backend can serve)."""
    env = os.environ if env is None else env
    home = Path(env.get("HOME") or os.path.expanduser("~"))
    with ThreadPoolExecutor(max_workers=max(1, len(settings.backends))) as pool:
        reports = list(pool.map(lambda n: check_backend(n, settings, env, home), settings.backends))
    ready = [r.name for r in reports if r.can_serve]
    width = max([11, *(len(r.name) for r in reports)])
    lines = [f"cli-proxy {__version__}: doctor"]
    for r in reports:
        lines.append(f"{r.name:<{width}} {r.status:<8} {r.line()}")
        if r.path is not None and r.login.warning:
            lines.append(f"{'':<{width}} {'warning':<8} {r.login.warning}")
    lines.append(f"{'containment':<{width}} {containment_line(settings)}")
    lines.append(f"{'capacity':<{width}} {capacity_line(settings)}")
    lines.append(f"{'warm pool':<{width}} {warm_pool_line(settings, ready)}")
    found = any(r.path is not None for r in reports)
    lines.append(f"{'fixtures':<{width}} {fixtures_line(settings, found)}")
    verdict = (
        f"{len(ready)} of {len(reports)} backends can serve: {', '.join(ready)}"
        if ready
        else f"no backend can serve (of {', '.join(settings.backends)})"
    )
    lines.append(f"{'result':<{width}} {verdict}")
    return (0 if ready else 1), lines
