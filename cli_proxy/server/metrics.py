"""Prometheus metrics, made with prometheus-client: what a team running the gateway watches.

One registry per gateway (tests run many gateways in one process). Calls are observed
once, at the end of each request, from the same record the request log line is written
from (``CallRecord``), so metrics and logs agree. State that is read, not counted (running
calls, queue, spares, the subscriptions' rate-limit windows), is collected at scrape time
from the gateway's own objects: a scrape costs a few dict reads. The server builds them
(``for_gateway``) and keeps them on the app (``METRICS``); the gateway knows none of it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from cli_proxy.gateway import Gateway
from cli_proxy.read.events import RateLimit
from cli_proxy.run.governor import Governor
from cli_proxy.server.status.calls_log import CallRecord, CallsLog

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30, 60, 120, 300, 600, 1800)
START_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5)
MAX_MODELS = 50
STATUS_LEVEL = {"allowed": 1.0, "allowed_warning": 0.5, "rejected": 0.0}


@dataclass(frozen=True, slots=True)
class Gauges:
    """What the gateway reports at scrape time (callables into its live objects)."""

    running: Callable[[], int]
    waiting: Callable[[], int]
    max_concurrency: Callable[[], int]
    max_queue: Callable[[], int]
    max_starting: Callable[[], int]
    spares: Callable[[], dict[str, int]]  # ready spares by backend
    processes: Callable[[], int]  # CLI processes alive: calls' and spares
    starting: Callable[[], int]  # start slots held


class Metrics:
    """The gateway's metric families; ``observe`` one call, ``scrape`` the text format."""

    def __init__(self, gauges: Gauges) -> None:
        self.registry = CollectorRegistry()
        self.rate_limits: dict[str, dict[str, RateLimit]] = {}  # backend -> window -> latest
        self.rate_limits_seen: dict[str, float] = {}  # backend -> when last reported
        self._models: set[str] = set()
        self.calls = CallsLog()  # the last requests and errors, for the status page
        r = self.registry
        call = ("backend", "model")
        self.requests = Counter(
            "cli_proxy_requests",
            "API requests by endpoint, backend, model and outcome (HTTP status, error code)",
            ("endpoint", *call, "status", "code"),
            registry=r,
        )
        # histograms by backend, not model: 16 series each per label set keep a scrape cheap
        self.duration = Histogram(
            "cli_proxy_request_duration_seconds",
            "Whole request, queue wait included",
            ("endpoint", "backend"),
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.queue_wait = Histogram(
            "cli_proxy_queue_wait_seconds",
            "Time a call waited for a CLI slot",
            ("backend",),
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.start = Histogram(
            "cli_proxy_cli_start_seconds",
            "Spawning the CLI (cold) or taking over a pre-started spare (warm; warming: "
            "still starting)",
            ("backend", "start"),
            buckets=START_BUCKETS,
            registry=r,
        )
        self.ttfc = Histogram(
            "cli_proxy_time_to_first_content_seconds",
            "From a call's start (queue wait included) to its first answer event",
            ("backend", "start"),
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.tokens = Counter(
            "cli_proxy_tokens",
            "Tokens as the CLIs report them; kind: input (cached included), output "
            "(reasoning included), cached, reasoning",
            (*call, "kind"),
            registry=r,
        )
        self.served = Counter(
            "cli_proxy_calls_served",
            "Calls that reached a CLI process, by how it started (warm: a pre-started spare; "
            "warming: one taken while still starting)",
            ("backend", "start"),
            registry=r,
        )
        self.exits = Counter(
            "cli_proxy_cli_exits",
            "CLI processes ended, by kind: ok, error (non-zero exit), or why the gateway "
            "killed it (timeout, idle_timeout, cancelled, lingered, shutdown, ...)",
            ("backend", "kind"),
            registry=r,
        )
        self.answers_refused = Counter(
            "cli_proxy_answers_refused",
            "Answers refused by size (max_answer_bytes, or an oversized output line)",
            ("backend", "reason"),
            registry=r,
        )
        self.billing = Counter(
            "cli_proxy_billing_refusals",
            "Calls a subscription refused as billed outside the plan (extra usage)",
            ("backend",),
            registry=r,
        )
        r.register(_StateCollector(gauges, self))

    def model_label(self, model: str) -> str:
        """A request's model name as a label: the first ``MAX_MODELS`` names seen, then
        ``other`` (a client picks the name: labels must stay bounded)."""
        if model in self._models or len(self._models) < MAX_MODELS:
            self._models.add(model)
            return model
        return "other"

    def observe(self, rec: CallRecord) -> None:
        self.calls.add(rec)
        model = self.model_label(rec.model)
        self.requests.labels(rec.endpoint, rec.backend, model, str(rec.status), rec.code).inc()
        self.duration.labels(rec.endpoint, rec.backend).observe(rec.duration_s)
        start = rec.start_kind
        if start is None:
            return  # no process was started for it
        self.served.labels(rec.backend, start).inc()
        if rec.queue_wait_s is not None:
            self.queue_wait.labels(rec.backend).observe(rec.queue_wait_s)
        if rec.start_s is not None:
            self.start.labels(rec.backend, start).observe(rec.start_s)
        if rec.first_content_s is not None:
            self.ttfc.labels(rec.backend, start).observe(rec.first_content_s)
        if rec.exit_kind is not None:
            self.exits.labels(rec.backend, rec.exit_kind).inc()
        if rec.answer_refused is not None:
            self.answers_refused.labels(rec.backend, rec.answer_refused).inc()
        if rec.billing_refused:
            self.billing.labels(rec.backend).inc()
        u = rec.usage
        if u is not None:
            for kind, n in (
                ("input", u.prompt_tokens),
                ("output", u.completion_tokens),
                ("cached", u.prompt_tokens_details.cached_tokens),
                ("reasoning", u.completion_tokens_details.reasoning_tokens),
            ):
                if n:
                    self.tokens.labels(rec.backend, model, kind).inc(n)

    def rate_limited(self, backend: str, reports: list[RateLimit]) -> None:
        """The latest rate-limit state a CLI reported, per window."""
        if reports:
            windows = self.rate_limits.setdefault(backend, {})
            for report in reports:
                windows[report.window] = report
            self.rate_limits_seen[backend] = time.time()

    def rate_limit_state(self) -> dict[str, dict[str, dict[str, float | str | None]]]:
        """For ``/health``: backend -> window -> status, utilization, resets_at,
        window_minutes."""
        return {
            backend: {
                w: {
                    "status": r.status,
                    "utilization": r.utilization,
                    "resets_at": r.resets_at,
                    "window_minutes": r.window_minutes,
                }
                for w, r in windows.items()
            }
            for backend, windows in self.rate_limits.items()
        }

    def scrape(self) -> bytes:
        return generate_latest(self.registry)


class _StateCollector(Collector):
    """Gauges read from the gateway when scraped."""

    def __init__(self, gauges: Gauges, metrics: Metrics) -> None:
        self.gauges = gauges
        self.metrics = metrics

    def collect(self) -> Iterator[Metric]:
        g = self.gauges
        yield GaugeMetricFamily("cli_proxy_calls_running", "Calls holding a CLI slot", g.running())
        yield GaugeMetricFamily("cli_proxy_calls_waiting", "Calls queued for a slot", g.waiting())
        yield GaugeMetricFamily(
            "cli_proxy_max_concurrency",
            "The process bound in force: CLI processes alive at once, calls and spares",
            g.max_concurrency(),
        )
        yield GaugeMetricFamily(
            "cli_proxy_max_queue", "The queue bound in force: calls waiting at once", g.max_queue()
        )
        yield GaugeMetricFamily(
            "cli_proxy_max_starting",
            "The start bound in force: CLIs starting at once",
            g.max_starting(),
        )
        yield GaugeMetricFamily(
            "cli_proxy_cli_processes",
            "CLI processes alive: running calls and spares",
            g.processes(),
        )
        yield GaugeMetricFamily(
            "cli_proxy_clis_starting", "CLIs starting (start slots held)", g.starting()
        )
        spares = GaugeMetricFamily(
            "cli_proxy_spares_ready", "Pre-started CLI processes waiting", labels=["backend"]
        )
        for backend, n in sorted(g.spares().items()):
            spares.add_metric([backend], n)
        yield spares
        status = GaugeMetricFamily(
            "cli_proxy_rate_limit_status",
            "A subscription window's status as the CLI last reported it: 1 allowed, "
            "0.5 allowed_warning, 0 rejected",
            labels=["backend", "window", "status"],
        )
        used = GaugeMetricFamily(
            "cli_proxy_rate_limit_utilization",
            "How much of a subscription window is used (0-1), as last reported",
            labels=["backend", "window"],
        )
        resets = GaugeMetricFamily(
            "cli_proxy_rate_limit_resets_at_seconds",
            "When a subscription window resets (Unix time), as last reported",
            labels=["backend", "window"],
        )
        length = GaugeMetricFamily(
            "cli_proxy_rate_limit_window_minutes",
            "A subscription window's length in minutes, when reported or known by its name",
            labels=["backend", "window"],
        )
        for backend, windows in sorted(self.metrics.rate_limits.items()):
            for window, r in sorted(windows.items()):
                status.add_metric([backend, window, r.status], STATUS_LEVEL.get(r.status, 0.0))
                if r.utilization is not None:
                    used.add_metric([backend, window], r.utilization)
                if r.resets_at is not None:
                    resets.add_metric([backend, window], r.resets_at)
                if r.window_minutes is not None:
                    length.add_metric([backend, window], r.window_minutes)
        yield status
        yield used
        yield resets
        yield length


def for_gateway(gw: Gateway) -> Metrics:
    """The metrics of ``gw``: its gauges read its supervisor and warm pool at scrape time."""
    return Metrics(
        Gauges(
            running=lambda: gw.supervisor.running,
            waiting=lambda: gw.supervisor.waiting,
            max_concurrency=lambda: gw.supervisor.max_concurrency,
            max_queue=lambda: gw.supervisor.max_queue,
            max_starting=lambda: gw.supervisor.bounds.max_starting,
            spares=lambda: gw.pool.ready() if gw.pool is not None else {},
            processes=lambda: gw.supervisor.processes(),
            starting=lambda: gw.supervisor.starting,
        )
    )


METRICS: web.AppKey[Metrics] = web.AppKey("metrics", Metrics)


# Per-key metric families (``cli_proxy_key_*``), labelled by the key's name, never its secret
# (docs/keys.md, docs/metrics.md). Read at scrape time from the governor and the usage store:
# totals are every worker's that shares the state dir; running calls are this worker's.
class KeysCollector(Collector):
    """Each key's use and limits at scrape time."""

    def __init__(self, governor: Governor) -> None:
        self.governor = governor

    def collect(self) -> Iterator[Metric]:
        gov = self.governor
        totals = gov.store.totals() if gov.store is not None else {}
        status = gov.status()
        requests = CounterMetricFamily(
            "cli_proxy_key_requests", "Calls to a model route, by client key", labels=["key"]
        )
        errors = CounterMetricFamily(
            "cli_proxy_key_errors",
            "Calls of a client key that failed or were refused by a limit",
            labels=["key"],
        )
        tokens = CounterMetricFamily(
            "cli_proxy_key_tokens",
            "Tokens of a client key's calls: input (cached included), cached_input, output",
            labels=["key", "kind"],
        )
        for name, t in sorted(totals.items()):
            requests.add_metric([name], t["requests"])
            errors.add_metric([name], t["errors"])
            tokens.add_metric([name, "input"], t["input_tokens"])
            tokens.add_metric([name, "cached_input"], t["cached_input_tokens"])
            tokens.add_metric([name, "output"], t["output_tokens"])
        yield requests
        yield errors
        yield tokens
        day = GaugeMetricFamily(
            "cli_proxy_key_tokens_24h",
            "Input + output tokens of a client key over the rolling 24 h",
            labels=["key"],
        )
        budget = GaugeMetricFamily(
            "cli_proxy_key_tokens_per_day", "A client key's daily token budget", labels=["key"]
        )
        running = GaugeMetricFamily(
            "cli_proxy_key_calls_running", "A client key's calls running here", labels=["key"]
        )
        most = GaugeMetricFamily(
            "cli_proxy_key_max_concurrent", "A client key's max_concurrent", labels=["key"]
        )
        window = GaugeMetricFamily(
            "cli_proxy_key_max_window_percent",
            "The window share at which a client key's calls are refused",
            labels=["key"],
        )
        for k in status:
            name = str(k["name"])
            day.add_metric([name], float(k["tokens_24h"]))
            running.add_metric([name], float(k["running"]))
            if k["tokens_per_day"] is not None:
                budget.add_metric([name], float(k["tokens_per_day"]))
            if k["max_concurrent"] is not None:
                most.add_metric([name], float(k["max_concurrent"]))
            if k["max_window_percent"] is not None:
                window.add_metric([name], float(k["max_window_percent"]))
        yield day
        yield budget
        yield running
        yield most
        yield window
