"""Per-key metric families (``cli_proxy_key_*``), labelled by the key's name, never its
secret (docs/keys.md, docs/metrics.md). Read at scrape time from the governor and the usage
store: totals are every worker's that shares the state dir; running calls are this worker's.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from cli_proxy.run.governor import Governor


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
