"""docs/deploy/grafana-dashboard.json: a well-formed Grafana dashboard (the classic JSON model,
a ``${datasource}`` variable of type datasource), and every query of every panel returns data
from a real Prometheus scraping a gateway that served a mix of calls (tests/server/
test_prometheus_scrape.py's server; skipped where the binary is not installed)."""

from __future__ import annotations

import asyncio
import json
import math
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.conftest import Served, ServeFactory, fake
from tests.server.test_prometheus_scrape import PROMETHEUS, query, running_prometheus

DASHBOARD = Path(__file__).resolve().parents[2] / "docs" / "deploy" / "grafana-dashboard.json"
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
KEY = "dash-key"
RATE_INTERVAL = "1m"  # what Grafana's $__rate_interval becomes for a 1 s scrape


def load() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    return data


def queries() -> list[tuple[str, str]]:
    """(panel title, expr) of every target of every panel."""
    return [
        (p["title"], t["expr"])
        for p in load()["panels"]
        if p["type"] != "row"
        for t in p["targets"]
    ]


def test_the_dashboard_is_a_grafana_dashboard() -> None:
    d = load()
    assert d["uid"] == "cli-proxy" and d["title"] and d["schemaVersion"] >= 36
    variables = {v["name"]: v for v in d["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    ids = [p["id"] for p in d["panels"]]
    assert len(ids) == len(set(ids))
    cells: set[tuple[int, int]] = set()
    for p in d["panels"]:
        g = p["gridPos"]
        assert g["x"] >= 0 and g["x"] + g["w"] <= 24 and g["h"] > 0, p["title"]
        mine = {
            (x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])
        }
        assert not mine & cells, f"{p['title']} overlaps another panel"
        cells |= mine
        if p["type"] == "row":
            continue
        assert p["datasource"] == DATASOURCE, p["title"]
        assert p["targets"], p["title"]
        refs = [t["refId"] for t in p["targets"]]
        assert len(refs) == len(set(refs)), p["title"]
        for t in p["targets"]:
            assert t["datasource"] == DATASOURCE and t["expr"].strip(), p["title"]
    exprs = " ".join(e for _, e in queries())
    for family in (
        "cli_proxy_requests_total",
        "cli_proxy_request_duration_seconds_bucket",
        "cli_proxy_time_to_first_content_seconds_bucket",
        "cli_proxy_calls_waiting",
        "cli_proxy_max_queue",
        "cli_proxy_cli_processes",
        "cli_proxy_max_concurrency",
        "cli_proxy_calls_served_total",
        "cli_proxy_rate_limit_utilization",
        "cli_proxy_rate_limit_resets_at_seconds",
    ):
        assert family in exprs, family


def user(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


async def a_mix_of_calls(served: Served, session: aiohttp.ClientSession) -> None:
    """ok (cold, then warm), a 429 with a rejected window, gemini, a refused request; the
    claude calls report their subscription windows."""
    url = f"{served.base_url}/chat/completions"
    now = time.time()
    five = {"status": "allowed", "rateLimitType": "five_hour", "utilization": 0.42}
    week = {"status": "rejected", "rateLimitType": "seven_day", "utilization": 1.0}
    calls = [
        ("claude-sonnet-4-6", fake(answer="one", rate_limit={**five, "resetsAt": now + 7200})),
        ("claude-sonnet-4-6", fake(answer="two", cached=3)),
        (
            "claude-sonnet-4-6",
            fake(
                rate_limit={**week, "resetsAt": now + 86400},
                is_error=True,
                api_error_status=429,
                error_message="API Error: 429 limit",
                exit=1,
                print_before_exit=True,
            ),
        ),
        ("gemini-2.5-pro", fake(answer="three")),
        ("nope-1", "refused"),
    ]
    for i, (model, content) in enumerate(calls):
        async with session.post(url, json={"model": model, "messages": user(content)}) as r:
            await r.read()
        if i == 0:  # the next claude call takes the spare this one left
            pool = served.gateway.pool
            for _ in range(200):
                if pool is not None and pool.ready().get("claude"):
                    break
                await asyncio.sleep(0.05)


@pytest.mark.skipif(
    PROMETHEUS is None,
    reason="Prometheus not installed (Debian package 'prometheus'; `make test` installs it "
    "when run as root with apt-get)",
)
async def test_every_panel_query_returns_data(serve: ServeFactory, tmp_path: Path) -> None:
    served = await serve(api_keys=[KEY], warm_pool=True)
    headers = {"Authorization": f"Bearer {KEY}"}
    started = time.monotonic()
    async with (
        running_prometheus(served, KEY, tmp_path) as base,
        aiohttp.ClientSession(headers=headers) as gateway,
        aiohttp.ClientSession() as prom,
    ):
        # twice, a few scrapes apart: every series then has an increase inside the rate window
        await a_mix_of_calls(served, gateway)
        await asyncio.sleep(3)
        await a_mix_of_calls(served, gateway)
        await asyncio.sleep(3)
        empty, results = [], {}
        for title, expr in queries():
            promql = expr.replace("$__rate_interval", RATE_INTERVAL)
            result = await query(prom, base, promql)
            values = [float(r["value"][1]) for r in result]  # type: ignore[index]
            results[f"{title}: {promql}"] = values
            if not any(math.isfinite(v) for v in values):
                empty.append(f"{title}: {promql} -> {result}")
    print(f"\n{len(results)} queries of {DASHBOARD.name} in {time.monotonic() - started:.1f} s")
    for name, values in results.items():
        print(f"  {name} -> {[round(v, 3) for v in values]}")
    assert not empty, "queries without data:\n" + "\n".join(empty)
