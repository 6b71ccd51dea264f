#!/usr/bin/env python3
"""Prompt-cache bench: a 20-step agent tool loop through the gateway with the REAL CLIs.

openai SDK -> gateway (this process, loopback) -> real claude / gemini -> the fake model API
(tests/fakes/fake_model_api.py, loopback), which for claude simulates Anthropic prompt caching by
its documented rules (``PromptCache``: a request reads the longest prefix a previous request
wrote at a breakpoint, ending at one of its block boundaries within 20 blocks before one of
its own breakpoints). The loop: an 8 kB system prompt, 40 tools, every step one tool call
and a 2 kB tool result appended.

Reported per step and in total, for each value of the backends' ``system_prompt`` option
(``cli``: the CLI's own agent prompt; ``minimal``: the gateway's short one), each in a fresh
gateway:
- claude: upstream input characters, the share read from the cache, and what the client saw
  in ``usage.prompt_tokens_details.cached_tokens``;
- gemini (whose caching is implicit, by prefix): the share of each request that is a
  byte-identical prefix of the next one.

Usage: ``python bench/cache.py [--steps 20] [--modes cli,minimal] [--out
bench/cache-results.json]``; the real CLIs come from $CLI_PROXY_REAL_CLI_DIR or
.cli/*/node_modules/.bin (``make real-clis``).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from aiohttp import web  # noqa: E402
from openai import AsyncOpenAI  # noqa: E402

from cli_proxy.config import Settings  # noqa: E402
from cli_proxy.gateway import Gateway, live_backends  # noqa: E402
from cli_proxy.server.app import create_app  # noqa: E402
from tests.fakes.fake_model_api import FakeModelAPI, start_fake_model_api  # noqa: E402

SYSTEM = (
    "You are the planning agent of a desktop automation system. "
    + " ".join(
        f"Rule {i}: act carefully, verify each step and report what changed." for i in range(120)
    )
)[:8192]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": f"tool_{i:02d}",
            "description": f"Tool number {i}: performs operation {i} on the current document.",
            "parameters": {
                "type": "object",
                "properties": {"target": {"type": "string"}, "count": {"type": "integer"}},
                "required": ["target"],
            },
        },
    }
    for i in range(40)
]


def cli_dir() -> Path:
    for c in (
        os.environ.get("CLI_PROXY_REAL_CLI_DIR"),
        *sorted(map(str, ROOT.glob(".cli/*/node_modules/.bin"))),
    ):
        if c and all(os.access(Path(c) / n, os.X_OK) for n in ("claude", "gemini")):
            return Path(c)
    sys.exit("real CLIs not found: run `make real-clis` first")


def point_clis_at(url: str) -> None:
    """A throw-away HOME and the environment that sends the real CLIs to the fake API."""
    home = Path(tempfile.mkdtemp(prefix="cli-proxy-bench-home-"))
    (home / ".gemini").mkdir()
    (home / ".gemini" / "settings.json").write_text(
        json.dumps({"security": {"auth": {"selectedType": "gemini-api-key"}}})
    )
    os.environ.update(
        HOME=str(home),
        ANTHROPIC_BASE_URL=url,
        ANTHROPIC_API_KEY="bench",
        DISABLE_TELEMETRY="1",
        CLAUDE_CODE_MAX_RETRIES="0",
        GEMINI_API_KEY="bench",
        CODEX_API_KEY="bench",
        GOOGLE_GEMINI_BASE_URL=url,
        # copilot through BYOK: the fake's Messages endpoint, no GitHub call
        COPILOT_PROVIDER_BASE_URL=url,
        COPILOT_PROVIDER_TYPE="anthropic",
        COPILOT_PROVIDER_API_KEY="bench",
    )


def directive(step: int) -> str:
    call = {"tool_call": {"name": f"tool_{step % 40:02d}", "arguments": {"target": f"item {step}"}}}
    return "@@fake " + json.dumps({"answer": json.dumps(call)})


def tool_result(step: int) -> str:
    body = f"Result of step {step}: " + (
        "the document now reads: lorem ipsum dolor sit amet. " * 40
    )
    return body[:2048] + " " + directive(step + 1)


def model_requests(api: FakeModelAPI, path_end: str) -> list[dict[str, Any]]:
    return [r["body"] for r in api.requests if r["path"].endswith(path_end)]


def common_prefix(a: str, b: str) -> int:
    n = min(len(a), len(b))
    lo, hi = 0, n
    while lo < hi:  # binary search on equal prefixes
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


async def loop(client: AsyncOpenAI, model: str, steps: int) -> list[int]:
    """The agent loop; returns the cached_tokens the client saw per step."""
    messages: list[Any] = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "Tidy up the open document. " + directive(1)},
    ]
    seen: list[int] = []
    for step in range(1, steps + 1):
        r = await client.chat.completions.create(model=model, messages=messages, tools=TOOLS)
        calls = r.choices[0].message.tool_calls or []
        assert r.choices[0].finish_reason == "tool_calls" and calls, r
        details = r.usage.prompt_tokens_details if r.usage else None
        seen.append(details.cached_tokens or 0 if details else 0)
        messages.append(r.choices[0].message.model_dump(exclude_none=True))
        messages.append({"role": "tool", "tool_call_id": calls[0].id, "content": tool_result(step)})
    return seen


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--out", default=str(ROOT / "bench" / "cache-results.json"))
    ap.add_argument("--launcher", default="auto", help="auto, bwrap or pdeathsig")
    ap.add_argument("--modes", default="cli,minimal", help="system_prompt values to run")
    args = ap.parse_args()
    clis = cli_dir()
    api = await start_fake_model_api(cache=True)
    point_clis_at(api.url)
    results: dict[str, Any] = {"runs": {}}
    try:
        for mode in args.modes.split(","):
            results["runs"][mode] = await run_mode(api, clis, mode, args, results)
    finally:
        await api.close()
    Path(args.out).write_text(json.dumps(results, indent=1))
    report(results, args.steps, args.out)


async def run_mode(
    api: FakeModelAPI, clis: Path, mode: str, args: argparse.Namespace, results: dict[str, Any]
) -> dict[str, Any]:
    """Both loops through a fresh gateway whose claude and gemini use this system prompt."""
    settings = Settings(
        host="127.0.0.1",
        port=0,
        claude={"bin": str(clis / "claude"), "system_prompt": mode},
        gemini={"bin": str(clis / "gemini"), "system_prompt": mode},
        timeout_s=60,
        launcher=args.launcher,
    )
    gateway = Gateway(settings, live_backends(settings))
    runner = web.AppRunner(create_app(gateway), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    client = AsyncOpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="x", max_retries=0)
    results["launcher"] = gateway.launcher.describe()
    out: dict[str, Any] = {}
    try:
        seen = await loop(client, "claude-sonnet-4-6", args.steps)
        uses = api.cache_uses[-args.steps :]
        rows = [
            {
                "step": i + 1,
                "input_chars": u.total_chars,
                "read_chars": u.read_chars,
                "read_share": round(u.read_chars / u.total_chars, 4),
                "client_cached_tokens": seen[i],
            }
            for i, u in enumerate(uses)
        ]
        later = uses[1:]
        total = sum(u.total_chars for u in later)
        read = sum(u.read_chars for u in later)
        out["claude"] = {
            "steps": rows,
            "steps_2_on_input_chars": total,
            "steps_2_on_read_chars": read,
            "steps_2_on_read_share": round(read / total, 4),
            "client_cached_tokens_total": sum(seen),
            "simulated_read_tokens_total": sum(u.usage()["cache_read_input_tokens"] for u in uses),
        }
        before = len(model_requests(api, ":streamGenerateContent"))
        await loop(client, "gemini-2.5-flash", args.steps)
        bodies = model_requests(api, ":streamGenerateContent")[before:]
        texts = [
            json.dumps(
                [b.get("systemInstruction"), b.get("tools"), b.get("contents")], ensure_ascii=False
            )
            for b in bodies
        ]
        shares = [common_prefix(a, b) / len(a) for a, b in itertools.pairwise(texts)]
        out["gemini"] = {
            "request_chars": [len(t) for t in texts],
            "prefix_share_of_next": [round(x, 4) for x in shares],
            "median_prefix_share": round(statistics.median(shares), 4),
        }
    finally:
        await client.close()
        await runner.cleanup()
    return out


def report(results: dict[str, Any], steps: int, out: str) -> None:
    print(f"containment: {results['launcher']}")
    for mode, run in results["runs"].items():
        c, g = run["claude"], run["gemini"]
        print(f"system_prompt = {mode}")
        print("  claude step  input_chars  read_share  client_cached_tokens")
        for r in c["steps"]:
            share, seen = r["read_share"], r["client_cached_tokens"]
            print(f"    {r['step']:>4}  {r['input_chars']:>11}  {share:>10.3f}  {seen:>8}")
        share = c["steps_2_on_read_share"]
        print(
            f"  claude steps 2-{steps}: {share:.1%} of upstream input chars read from cache"
            " (>= 85%)"
        )
        seen, simulated = c["client_cached_tokens_total"], c["simulated_read_tokens_total"]
        print(f"  claude cached_tokens seen by the client: {seen} (simulated reads: {simulated})")
        median = g["median_prefix_share"]
        print(f"  gemini median share of a request that prefixes the next: {median:.3f} (>= 0.90)")
    print(f"results: {out}")


if __name__ == "__main__":
    asyncio.run(main())
