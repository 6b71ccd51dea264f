"""The ``/status`` page's HTML (``routes.py`` serves it): every value escaped, no script,
no external asset. What it shows and why: ``routes.py``'s docstring."""

from __future__ import annotations

import math
import os
import time
from collections.abc import Iterable
from html import escape

from cli_proxy import __version__
from cli_proxy.backends.base import Backend
from cli_proxy.backends.checks import BackendReport
from cli_proxy.gateway import Gateway, LiveBackends, user_home
from cli_proxy.logs import log
from cli_proxy.run.keys import API_KEY_NAME
from cli_proxy.server.metrics import Metrics
from cli_proxy.server.status.calls_log import ERROR_WINDOW_S, Recent

REFRESH_S = 5
NONE = "\u2013"  # an en dash: nothing to show


# ---------------------------------------------------------------- words for numbers


def e(value: object) -> str:
    """Every value the page shows goes through here."""
    return escape(str(value), quote=True)


def span(seconds: float) -> str:
    """``2 h 12 min``, ``45 s``, ``3 d 4 h``."""
    s = round(abs(seconds))
    if s < 60:
        return f"{s} s"
    m = s // 60
    if m < 60:
        return f"{m} min"
    h, m = divmod(m, 60)
    if h < 24:
        return f"{h} h {m} min" if m else f"{h} h"
    d, h = divmod(h, 24)
    return f"{d} d {h} h" if h else f"{d} d"


def relative(at: float, now: float) -> str:
    return f"in {span(at - now)}" if at >= now else f"{span(now - at)} ago"


def clock(at: float, now: float) -> str:
    """The local clock time; with the day when it is not today."""
    when = time.localtime(at)
    if time.localtime(now)[:3] == when[:3]:
        return time.strftime("%H:%M", when)
    return time.strftime("%a %d %b %H:%M", when)


def seconds(value: float | None) -> str:
    if value is None:
        return NONE
    if value < 1:
        return f"{value * 1000:.0f} ms"
    if value < 60:
        return f"{value:.1f} s"
    return span(value)


def number(n: int) -> str:
    return f"{n:,}".replace(",", "\u202f")  # a thin space: 12 345


def meter(value: float, maximum: float, label: str, **data: str) -> str:
    """A bar: green, then yellow above half, red above 80% of ``maximum``."""
    attrs = "".join(f' data-{e(k)}="{e(v)}"' for k, v in data.items())
    top = max(maximum, 1e-9)
    return (
        f'<meter min="0" max="{e(top)}" low="{e(top * 0.5)}" high="{e(top * 0.8)}" '
        f'optimum="0" value="{e(min(max(value, 0), top))}" title="{e(label)}"{attrs}>'
        f"{e(label)}</meter>"
    )


# ---------------------------------------------------------------- the page


def render(
    gw: Gateway,
    metrics: Metrics,
    live: LiveBackends | None,
    reports: dict[str, BackendReport],
    started: float,
    now: float,
) -> str:
    draining = gw.supervisor.draining or gw.supervisor.closing
    state = "draining" if draining else "serving"
    tz = time.strftime("%Z", time.localtime(now))
    parts = [
        _head(),
        "<body><header>",
        f"<h1>cli-proxy <small>{e(__version__)}</small></h1>",
        f'<p class="state {"bad" if draining else "ok"}" id="state">{e(state)}</p>',
        f'<p class="meta">up {e(span(now - started))} · as of {e(clock(now, now))}'
        f"{e(time.strftime(':%S', time.localtime(now)))} {e(tz)} · "
        f"reloads every {REFRESH_S} s</p>",
        "</header><main>",
        _backend_sections(gw, metrics, live, reports, now),
        _gateway(gw, metrics),
        _keys(gw),
        _recent(metrics.calls.last(), now),
        "</main></body></html>",
    ]
    return "\n".join(parts)


def _head() -> str:
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="refresh" content="{REFRESH_S}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="referrer" content="no-referrer">
<title>cli-proxy status</title>
<style>{CSS}</style></head>"""


CSS = """
:root { color-scheme: light dark; --fg: #1f2328; --muted: #656d76; --line: #d0d7de;
  --card: #f6f8fa; --ok: #1a7f37; --warn: #9a6700; --bad: #cf222e; }
@media (prefers-color-scheme: dark) { :root { --fg: #e6edf3; --muted: #8d96a0;
  --line: #30363d; --card: #161b22; --ok: #3fb950; --warn: #d29922; --bad: #f85149; } }
* { box-sizing: border-box; }
body { margin: 0 auto; max-width: 1240px; padding: 16px 24px 32px; color: var(--fg);
  font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "Noto Sans", sans-serif; }
header { display: flex; align-items: baseline; gap: 16px; flex-wrap: wrap;
  border-bottom: 1px solid var(--line); padding-bottom: 8px; }
h1 { font-size: 22px; margin: 0; }
h1 small { color: var(--muted); font-weight: 400; font-size: 14px; }
h2 { font-size: 16px; margin: 22px 0 8px; }
h3 { font-size: 15px; margin: 0 0 6px; display: flex; gap: 10px; align-items: baseline; }
.meta, .muted { color: var(--muted); margin: 0; }
.state { margin: 0; font-weight: 600; padding: 1px 10px; border-radius: 12px; border: 1px solid; }
.badge { font-size: 12px; font-weight: 500; border: 1px solid; border-radius: 10px;
  padding: 0 8px; }
.ok { color: var(--ok); } .warn { color: var(--warn); } .bad { color: var(--bad); }
.cards { display: grid; grid-template-columns: repeat(auto-fill, minmax(380px, 1fr)); gap: 12px; }
.card { background: var(--card); border: 1px solid var(--line); border-radius: 8px;
  padding: 12px 14px; }
dl { display: grid; grid-template-columns: max-content 1fr; gap: 3px 12px; margin: 0 0 8px; }
dt { color: var(--muted); } dd { margin: 0; overflow-wrap: anywhere; }
code { font: 12.5px ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; }
table { border-collapse: collapse; width: 100%; }
th, td { text-align: left; padding: 3px 10px 3px 0; vertical-align: middle; }
thead th { color: var(--muted); font-weight: 500; border-bottom: 1px solid var(--line); }
.calls tbody tr + tr td, #errors tbody tr + tr td { border-top: 1px solid var(--line); }
td.n, th.n { text-align: right; font-variant-numeric: tabular-nums; }
meter { width: 160px; height: 14px; vertical-align: middle; }
h4 { font-size: 13px; font-weight: 500; color: var(--muted); margin: 10px 0 4px;
  border-top: 1px solid var(--line); padding-top: 8px; }
.window { margin: 0 0 8px; }
.window meter { width: 100%; display: block; margin: 2px 0; }
.wtop { display: flex; gap: 10px; align-items: baseline; }
.wtop .share { margin-left: auto; font-variant-numeric: tabular-nums; }
.gauges th { font-weight: 500; width: 150px; } .gauges td { white-space: nowrap; }
.calls td { font-variant-numeric: tabular-nums; white-space: nowrap; }
.calls td.model { white-space: normal; overflow-wrap: anywhere; }
.two { display: grid; grid-template-columns: 1fr 1fr; gap: 12px; }
@media (max-width: 900px) { .two { grid-template-columns: 1fr; } }
"""


def _backend_sections(
    gw: Gateway,
    metrics: Metrics,
    live: LiveBackends | None,
    reports: dict[str, BackendReport],
    now: float,
) -> str:
    windows = metrics.rate_limit_state()
    enabled = list(live.backends) if live is not None else []
    names = [*enabled, *(b for b in windows if b not in enabled)]
    cards = []
    for name in names:
        backend = live.backends.get(name) if live is not None else None
        rows, badge = [], ""
        if backend is not None:
            report = reports.get(name)
            rows += _binary_rows(name, report)
            text, css = _login(backend, report, now)
            rows.append(f'<dt>login</dt><dd class="{css}" data-login="{e(name)}">{text}</dd>')
            if report is not None and report.login.warning:  # e.g. a refused personal login
                dd = f'<dd class="warn" data-warning="{e(name)}">{e(report.login.warning)}'
                rows.append(f"<dt>warning</dt>{dd}</dd>")
            if report is not None:  # doctor's verdict, the login as read now
                ready = report.path is not None and css != "bad"
                verdict = "ready" if ready else "missing" if report.path is None else "no login"
                badge = f'<span class="{"ok" if ready else "bad"} badge">{verdict}</span>'
        else:
            rows.append("<dt>backend</dt><dd>not enabled here (windows reported earlier)</dd>")
        seen = metrics.rate_limits_seen.get(name)
        cards.append(
            f'<div class="card backend" id="backend-{e(name)}"><h3>{e(name)}{badge}</h3>'
            f"<dl>{''.join(rows)}</dl>{_windows(name, windows.get(name, {}), seen, now)}</div>"
        )
    replay = '<p class="muted">replaying recorded fixtures: no live CLI</p>' if live is None else ""
    return (
        f'<section id="backends"><h2>Backends</h2>{replay}'
        f'<div class="cards">{"".join(cards)}</div></section>'
    )


def _binary_rows(name: str, report: BackendReport | None) -> list[str]:
    if report is None:
        return ['<dt>binary</dt><dd class="muted">checking…</dd>']
    command = " ".join([report.path or report.command[0], *report.command[1:]])
    if report.path is None:
        return [f'<dt>binary</dt><dd class="bad"><code>{e(command)}</code> not found on PATH</dd>']
    if report.version is None:
        version = '<span class="warn">unknown</span>'
    elif report.tested:
        version = f'{e(report.version)} <span class="ok">tested release</span>'
    elif report.pin is not None:
        version = (
            f'{e(report.version)} <span class="warn">untested: the tests pin '
            f"{e(report.pin.version)}</span>"
        )
    else:
        version = f'{e(report.version)} <span class="warn">untested</span>'
    return [
        f"<dt>binary</dt><dd><code>{e(command)}</code></dd>",
        f'<dt>version</dt><dd data-version="{e(name)}">{version}</dd>',
    ]


def _login(backend: Backend, report: BackendReport | None, now: float) -> tuple[str, str]:
    """What login the backend's CLI uses and when its access token expires (the login
    file's cached read); else doctor's finding (a file or a variable, by name)."""
    try:
        login = backend.login(user_home(), backend.env(os.environ))
    except Exception:  # a backend's reader must not take the page down
        log.exception("status_login_read_failed", backend=backend.name)
        login = None
    if login is not None:
        where = f"{e(login.kind)} <code>{e(_tilde(login.path))}</code>"
        if login.expires_at is None:
            return f"{where}: access token expiry unknown", "warn"
        at = login.expires_at
        if at <= now:
            when = f"access token expired {e(span(now - at))} ago; the next call refreshes it"
            return f"{where}: {when}", "warn"
        when = f"access token expires in {e(span(at - now))} ({e(clock(at, now))})"
        return f"{where}: {when}", "warn" if login.due(now) else "ok"
    if report is None:
        return "checking…", "muted"
    css = {True: "ok", False: "bad", None: "warn"}[report.login.present]
    return e(report.login.detail), css


def _tilde(path: str) -> str:
    home = user_home()
    return "~/" + path[len(home) :].lstrip("/") if path.startswith(home.rstrip("/") + "/") else path


WINDOW_FIELDS = ("status", "utilization", "resets_at")


def _windows(
    backend: str, windows: dict[str, dict[str, float | str | None]], seen: float | None, now: float
) -> str:
    if not windows:
        return '<p class="muted windows-none">no rate-limit window reported yet</p>'
    blocks = []
    for window, w in sorted(windows.items()):
        used = w.get("utilization")
        if isinstance(used, int | float) and math.isfinite(used):
            share = f"{used:.0%} used"
            bar = meter(float(used), 1.0, share, backend=backend, window=window)
        else:
            share, bar = "used share not reported", ""
        status = str(w.get("status") or "")
        css = {"allowed": "ok", "allowed_warning": "warn", "rejected": "bad"}.get(status, "")
        resets = w.get("resets_at")
        if isinstance(resets, int | float) and math.isfinite(resets):
            verb = "resets" if resets >= now else "reset"
            reset = f"{verb} {e(relative(resets, now))} ({e(clock(resets, now))})"
        else:
            reset = "reset time not reported"
        extra = "".join(
            f" · {e(k)}: {e(v)}" for k, v in w.items() if k not in WINDOW_FIELDS and v is not None
        )
        blocks.append(
            f'<div class="window"><div class="wtop"><b>{e(window)}</b>'
            f'<span class="{css}">{e(status)}</span><span class="share">{e(share)}</span></div>'
            f'{bar}<div class="muted">{reset}{extra}</div></div>'
        )
    said = f" (reported {e(relative(seen, now))})" if seen is not None else ""
    return f'<div class="windows"><h4>rate-limit windows{said}</h4>{"".join(blocks)}</div>'


def _gateway(gw: Gateway, metrics: Metrics) -> str:
    sup = gw.supervisor
    bounds = sup.bounds
    status = sup.status()
    queue = status["queue"]
    oldest = queue.get("oldest_wait_s", 0.0) if isinstance(queue, dict) else 0.0
    by_backend = ", ".join(
        f"{e(b)} {n}" for b, n in sorted(status_dict(status, "running_by_backend"))
    )
    caps = ", ".join(f"{e(b)} at most {n}" for b, n in sorted(bounds.per_backend.items()))

    def row(label: str, value: int, maximum: int, note: str = "") -> str:
        bar = meter(value, maximum, f"{value} of {maximum}", gauge=label)
        return (
            f'<tr><th>{e(label)}</th><td>{bar}</td><td class="n">{value} / {maximum}</td>'
            f'<td class="muted">{note}</td></tr>'
        )

    gauges = [
        row("calls running", sup.running, bounds.max_processes, by_backend or caps),
        row(
            "calls queued",
            sup.waiting,
            sup.max_queue,
            f"oldest waits {e(seconds(float(oldest)))}" if sup.waiting else "",
        ),
        row(
            "CLI processes",
            sup.processes(),
            bounds.max_processes,
            f"calls and spares; peak {sup.peak_processes}",
        ),
        row("CLIs starting", sup.starting, bounds.max_starting),
    ]
    calls = metrics.calls
    warm, warming, cold = (calls.served[k] for k in ("warm", "warming", "cold"))
    if gw.pool is not None:
        pool = gw.pool.status()
        ready = status_dict(pool, "ready")
        spares = ", ".join(f"{e(b)} {n}" for b, n in sorted(ready)) or "none ready"
        starting = pool.get("starting", 0)
        pool_text = (
            f"on, up to {gw.settings.warm_max_total} spares: {spares}"
            f"{f'; {e(starting)} starting' if starting else ''}; "
            f"{e(pool.get('discarded', 0))} discarded"
        )
    else:
        pool_text = "off: every call starts its CLI cold"
    served = (
        f'<dl id="served"><dt>requests</dt><dd>{number(calls.requests)} since start</dd>'
        f"<dt>calls served</dt><dd>{number(warm + warming + cold)}: {number(warm)} warm, "
        f"{f'{number(warming)} warming, ' if warming else ''}"
        f"{number(cold)} cold</dd><dt>warm pool</dt><dd>{pool_text}</dd></dl>"
    )
    errors = calls.errors()
    if errors:
        error_rows = "".join(
            f'<tr><td>{e(kind)}</td><td class="n">{number(n)}</td></tr>'
            for kind, n in errors.items()
        )
        error_table = (
            '<table id="errors"><thead><tr><th>error</th><th class="n">count</th></tr>'
            f"</thead><tbody>{error_rows}</tbody></table>"
        )
    else:
        error_table = '<p class="muted" id="errors">none</p>'
    return (
        '<section id="gateway"><h2>Gateway</h2><div class="two">'
        f'<div class="card"><table class="gauges"><tbody>{"".join(gauges)}</tbody></table>'
        f"{served}</div>"
        f'<div class="card"><h3>Errors in the last {ERROR_WINDOW_S // 60} min</h3>'
        f"{error_table}</div></div></section>"
    )


def status_dict(status: dict[str, object], key: str) -> Iterable[tuple[str, int]]:
    value = status.get(key)
    if not isinstance(value, dict):
        return []
    return [(str(k), int(v)) for k, v in value.items() if isinstance(v, int)]


def _keys(gw: Gateway) -> str:
    """Each client key's use against its limits (docs/keys.md): names only, never secrets."""
    keys = gw.governor.status()
    if not gw.governor.ring.keys or all(k["name"] == API_KEY_NAME for k in keys):
        return ""
    rows = []
    for k in keys:
        name, limit = str(k["name"]), k["tokens_per_day"]
        used = int(k["tokens_24h"])
        tokens = number(used)
        if limit is not None:
            share = f"{number(used)} of {number(limit)} tokens a day"
            tokens = meter(used, float(limit), share, key=name) + f" {e(share)}"
        running = f"{k['running']}" + (
            f" of {k['max_concurrent']}" if k["max_concurrent"] is not None else ""
        )
        window = NONE if k["max_window_percent"] is None else f"{k['max_window_percent']:g} %"
        models = NONE if k["models"] is None else ", ".join(map(str, k["models"]))
        rows.append(
            f'<tr class="key" data-key="{e(name)}"><td>{e(name)}</td><td>{tokens}</td>'
            f'<td class="n">{e(running)}</td><td class="n">{e(window)}</td>'
            f"<td>{e(models)}</td></tr>"
        )
    aliases = "".join(
        f"<li><code>{e(a)}</code>: {e(' → '.join(t))}</li>"
        for a, t in gw.governor.ring.aliases.items()
    )
    return (
        '<section id="keys"><h2>Keys</h2>'
        '<table class="keys"><thead><tr><th>key</th><th>tokens, last 24 h</th>'
        '<th class="n">calls running</th><th class="n">window limit</th><th>models</th>'
        f"</tr></thead><tbody>{''.join(rows)}</tbody></table>"
        + (f'<ul class="aliases">{aliases}</ul>' if aliases else "")
        + "</section>"
    )


def _recent(recent: list[Recent], now: float) -> str:
    rows = []
    for r in recent:
        rec = r.record
        usage = rec.usage
        tokens_in = number(usage.prompt_tokens) if usage else NONE
        cached = number(usage.prompt_tokens_details.cached_tokens) if usage else NONE
        tokens_out = number(usage.completion_tokens) if usage else NONE
        start = rec.start_kind or NONE
        css = "ok" if rec.status < 400 else "warn" if rec.status in (429, 499) else "bad"
        code = f" {e(rec.code)}" if rec.code else ""
        when = time.strftime("%H:%M:%S", time.localtime(r.at))
        rows.append(
            f'<tr class="call"><td>{e(when)}</td><td>{e(rec.endpoint)}</td>'
            f'<td>{e(rec.backend or NONE)}</td><td class="model">{e(rec.model or NONE)}</td>'
            f'<td class="{css}">{rec.status}{code}</td>'
            f'<td class="n">{e(seconds(rec.duration_s))}</td>'
            f'<td class="n">{e(seconds(rec.first_content_s))}</td>'
            f'<td class="n">{tokens_in}</td><td class="n">{cached}</td>'
            f'<td class="n">{tokens_out}</td><td>{start}</td></tr>'
        )
    body = "".join(rows) or '<tr><td colspan="11" class="muted">no request yet</td></tr>'
    return (
        f'<section id="recent"><h2>Last {len(recent)} requests</h2>'
        '<table class="calls" id="calls"><thead><tr><th>ended</th><th>API</th>'
        '<th>backend</th><th>model</th><th>status</th><th class="n">duration</th>'
        '<th class="n">first content</th><th class="n">tokens in</th>'
        '<th class="n">cached</th><th class="n">out</th><th>start</th></tr></thead>'
        f"<tbody>{body}</tbody></table></section>"
    )
