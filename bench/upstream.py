#!/usr/bin/env python3
"""Upstream-bytes bench: what the model API receives for a trivial call, per backend and mode.

openai SDK -> gateway (this process, loopback) -> the REAL claude / gemini / codex -> the fake
model API (tests/fakes/fake_model_api.py, loopback). One "say hi" call (no system message, no tools)
per backend and per value of its ``system_prompt`` option (``cli``: the CLI's own agent
prompt; ``minimal``: the gateway's short neutral one); each call runs in a fresh gateway with
the warm pool off, so every figure is one cold process's one request.

Reported per row: the upstream request body in bytes (as sent, before any parsing); the
bytes of text the CLI added of its own (system prompt, identity and billing lines, context
parts such as claude's ``<system-reminder>`` or gemini's ``<session_context>``: every text
that is neither the gateway's rendered prompt nor the gateway's own system text) and their
share of the body; and whether the gateway's prompt reached the model intact (one text
equal to what the gateway rendered).

Usage: ``python bench/upstream.py [--out bench/upstream-results.json] [--launcher auto]``;
the real CLIs come from $CLI_PROXY_REAL_CLI_DIR or .cli/*/node_modules/.bin.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import typing
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from aiohttp import web  # noqa: E402
from openai import AsyncOpenAI  # noqa: E402

from bench.cache import cli_dir, point_clis_at  # noqa: E402
from cli_proxy.backends.registry import backend_class  # noqa: E402
from cli_proxy.config import Settings  # noqa: E402
from cli_proxy.gateway import Gateway, live_backends  # noqa: E402
from cli_proxy.protocol import ChatCompletionRequest  # noqa: E402
from tests.fakes.fake_model_api import FakeModelAPI, start_fake_model_api, text_pieces  # noqa: E402

MODELS = {"claude": "claude-sonnet-4-6", "gemini": "gemini-2.5-flash", "codex": "gpt-5.5"}
PATHS = {"claude": "/v1/messages", "gemini": ":streamGenerateContent", "codex": "/v1/responses"}
TEXT = "say hi"


def modes(backend: str) -> list[str | None]:
    """The values of the backend's ``system_prompt`` option (None: the option does not exist)."""
    field = backend_class(backend).options_model.model_fields.get("system_prompt")
    return list(typing.get_args(field.annotation)) if field is not None else [None]


def measure(
    backend: str, mode: str | None, raw: int, body: dict[str, Any], prompt: str, ours: str
) -> dict[str, Any]:
    system, messages = text_pieces(PATHS[backend], body)
    own = [t for t in system if t.strip() != ours.strip()] if ours else list(system)
    # the gateway's prompt may arrive as several blocks (claude): each one a piece of it
    own += [t for t in messages if not (t.strip() and t.strip() in prompt)]
    own_bytes = sum(len(t.encode()) for t in own)
    return {
        "backend": backend,
        "mode": mode or "(no option)",
        "body_bytes": raw,
        "cli_text_bytes": own_bytes,
        "cli_text_share": round(own_bytes / raw, 4),
        "system_bytes": sum(len(t.encode()) for t in system),
        "prompt_intact": prompt in "".join(messages) or prompt in messages,
        "cli_texts": [{"bytes": len(t.encode()), "starts": t[:100]} for t in own],
    }


async def one(
    api: FakeModelAPI, clis: Path, backend: str, mode: str | None, launcher: str
) -> dict[str, Any]:
    options: dict[str, Any] = {"bin": str(clis / backend)}
    if mode is not None:
        options["system_prompt"] = mode
    if backend == "codex":
        options["base_url"] = api.url + "/v1"
    settings = Settings(
        host="127.0.0.1",
        port=0,
        backends=[backend],
        timeout_s=90,
        warm_pool=False,
        launcher=launcher,
        **{backend: options},
    )
    from cli_proxy.server.app import create_app

    gateway = Gateway(settings, live_backends(settings))
    runner = web.AppRunner(create_app(gateway), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    client = AsyncOpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="x", max_retries=0)
    before = len(api.requests)
    try:
        messages: list[Any] = [{"role": "user", "content": TEXT}]
        r = await client.chat.completions.create(model=MODELS[backend], messages=messages)
        assert r.choices[0].message.content, r
        req = ChatCompletionRequest.model_validate({"model": MODELS[backend], "messages": messages})
        prompt = gateway.plan(req).call.prompt
    finally:
        await client.close()
        await runner.cleanup()
    sent = [r for r in api.requests[before:] if r["path"].endswith(PATHS[backend])]
    assert len(sent) == 1, [r["path"] for r in api.requests[before:]]
    ours = _minimal_text() if mode == "minimal" or (mode is None and backend == "codex") else ""
    return measure(backend, mode, sent[0]["bytes"], sent[0]["body"], prompt, ours)


def _minimal_text() -> str:
    try:
        from cli_proxy.backends.system_prompt import MINIMAL_SYSTEM_PROMPT

        return MINIMAL_SYSTEM_PROMPT
    except ImportError:  # before the option existed: codex's own base instructions
        from cli_proxy.backends.codex.catalog import BASE_INSTRUCTIONS

        return BASE_INSTRUCTIONS


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--out", default=str(ROOT / "bench" / "upstream-results.json"))
    ap.add_argument("--launcher", default="auto", help="auto, bwrap or pdeathsig")
    ap.add_argument("--backends", default="claude,gemini,codex")
    args = ap.parse_args()
    clis = cli_dir()
    api = await start_fake_model_api()
    point_clis_at(api.url)
    os.environ["CODEX_API_KEY"] = "bench"
    rows: list[dict[str, Any]] = []
    try:
        for backend in args.backends.split(","):
            if not os.access(clis / backend, os.X_OK):
                print(f"{backend}: binary not found in {clis}, skipped")
                continue
            for mode in modes(backend):
                rows.append(await one(api, clis, backend, mode, args.launcher))
    finally:
        await api.close()
    Path(args.out).write_text(json.dumps(rows, indent=1))
    print(f'upstream request for one "{TEXT}" call (fake model API, cold process)')
    print("backend  mode          body_bytes  cli_text_bytes  cli_share  prompt_intact")
    for r in rows:
        print(
            f"{r['backend']:<8} {r['mode']:<13} {r['body_bytes']:>10}  {r['cli_text_bytes']:>14}"
            f"  {r['cli_text_share']:>9.1%}  {r['prompt_intact']}"
        )
    print(f"results: {args.out}")


if __name__ == "__main__":
    asyncio.run(main())
