"""Record and replay: byte-identical answers, stable keys, clear misses and corrupt files."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import aiohttp
import openai
import pytest

from cli_proxy.fixtures import (
    FixtureError,
    FixtureStore,
    ReplaySource,
    load_fixture,
    normalized_request,
    request_key,
)
from cli_proxy.gateway import Gateway
from cli_proxy.protocol import ChatCompletionRequest
from cli_proxy.testing import start_gateway

from .conftest import ServeFactory, fake, fake_settings
from .test_chat import TIME, WEATHER

ROOT = Path(__file__).resolve().parent.parent

REQUESTS: list[dict[str, Any]] = [
    {"model": "claude-sonnet-4-6", "messages": [{"role": "user", "content": fake(answer="Hi!")}]},
    {
        "model": "gemini-2.5-flash",
        "messages": [
            {
                "role": "user",
                "content": "weather? "
                + fake(
                    answer='{"tool_call":{"name":"get_weather","arguments":{"city":"Rome"}}}',
                    chunks=4,
                ),
            }
        ],
        "tools": [WEATHER, TIME],
    },
    {
        "model": "claude-sonnet-4-6",
        "messages": [
            {
                "role": "user",
                "content": "both "
                + fake(
                    answer=json.dumps(
                        {
                            "tool_calls": [
                                {"name": "get_weather", "arguments": {"city": "A"}},
                                {"name": "get_time", "arguments": {}},
                            ]
                        }
                    ),
                    chunks=5,
                ),
            }
        ],
        "tools": [WEATHER, TIME],
        "stream": True,
        "stream_options": {"include_usage": True},
    },
    {
        "model": "gemini-2.5-flash",
        "messages": [{"role": "user", "content": "stream " + fake(answer="a b c", chunks=3)}],
        "stream": True,
    },
    {
        "model": "claude-sonnet-4-6",
        "messages": [
            {
                "role": "user",
                "content": fake(is_error=True, api_error_status=429, error_message="rate limited"),
            }
        ],
    },
]


async def post_raw(base_url: str, body: dict[str, Any]) -> tuple[int, bytes]:
    async with aiohttp.ClientSession() as s, s.post(f"{base_url}/chat/completions", json=body) as r:
        return r.status, await r.read()


async def test_record_then_replay_is_byte_identical(serve: ServeFactory, tmp_path: Path) -> None:
    from cli_proxy.cli import make_gateway

    gw, _ = make_gateway(fake_settings(record_dir=tmp_path))
    recorder = await serve(gateway=gw)
    recorded = [await post_raw(recorder.base_url, body) for body in REQUESTS]
    assert [status for status, _ in recorded] == [200, 200, 200, 200, 429]
    files = sorted(tmp_path.glob("*.json"))
    assert len(files) == len(REQUESTS)

    settings = fake_settings(replay_dir=tmp_path)
    replayer = await serve(gateway=Gateway(settings, ReplaySource.load(tmp_path, settings)))
    replayed = [await post_raw(replayer.base_url, body) for body in REQUESTS]
    assert replayed == recorded
    # a recorded non-stream request also replays as a stream, and vice versa
    status, body = await post_raw(replayer.base_url, {**REQUESTS[0], "stream": True})
    assert status == 200 and body.endswith(b"data: [DONE]\n\n")
    chunks = [json.loads(e[6:]) for e in body.decode().split("\n\n") if e.startswith("data: {")]
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert text.startswith("Hi!")


def test_fixture_file_is_readable_and_secret_free(tmp_path: Path) -> None:
    data = {
        "format": "cli-proxy-fixture",
        "version": 1,
        "backend": "claude",
        "request": {"model": "m", "messages": []},
        "stdout": [],
        "exit_code": 0,
    }
    (tmp_path / "a.json").write_text(json.dumps(data))
    fx = load_fixture(tmp_path / "a.json")
    assert fx.key == request_key({"model": "m", "messages": []})


async def test_recorded_fixture_contents(serve: ServeFactory, tmp_path: Path) -> None:
    from cli_proxy.cli import make_gateway

    gw, _ = make_gateway(fake_settings(record_dir=tmp_path, api_keys=["sekrit-key"]))
    s = await serve(gateway=gw)
    client = openai.AsyncOpenAI(base_url=s.base_url, api_key="sekrit-key", max_retries=0)
    await client.chat.completions.create(**REQUESTS[1])
    await client.close()
    (path,) = tmp_path.glob("*.json")
    text = path.read_text()
    assert "sekrit-key" not in text
    data = json.loads(text)
    assert data["format"] == "cli-proxy-fixture" and data["version"] == 1
    assert data["backend"] == "gemini" and data["exit_code"] == 0
    assert data["request"]["tools"][0]["function"]["name"] == "get_weather"
    assert "<conversation_history>" in data["prompt"]
    assert data["argv"][0] == Path(sys.executable).name
    assert "--acp" in data["argv"]
    assert all(
        isinstance(e["t"], float | int) and isinstance(e["line"], str) for e in data["stdout"]
    )
    assert [e["t"] for e in data["stdout"]] == sorted(e["t"] for e in data["stdout"])
    assert len(data["response_ids"]["call_ids"]) == 1
    assert path.name.endswith(data["key"][:12] + ".json")


def test_key_ignores_json_order_stream_and_sampling() -> None:
    a = ChatCompletionRequest.model_validate(
        {
            "model": "m",
            "messages": [{"role": "user", "content": "x", "name": "u"}],
            "tools": [WEATHER],
            "temperature": 0.1,
            "stream": True,
        }
    )
    b = ChatCompletionRequest.model_validate(
        json.loads(
            json.dumps(
                {
                    "tools": [
                        {
                            "function": {
                                "parameters": WEATHER["function"]["parameters"],
                                "description": WEATHER["function"]["description"],
                                "name": "get_weather",
                            },
                            "type": "function",
                        }
                    ],
                    "messages": [{"name": "u", "content": "x", "role": "user"}],
                    "model": "m",
                    "seed": 4,
                }
            )
        )
    )
    assert request_key(normalized_request(a)) == request_key(normalized_request(b))
    c = a.model_copy(update={"model": "other"})
    assert request_key(normalized_request(a)) != request_key(normalized_request(c))


async def test_miss_names_key_and_nearest(serve: ServeFactory, tmp_path: Path) -> None:
    from cli_proxy.cli import make_gateway

    gw, _ = make_gateway(fake_settings(record_dir=tmp_path))
    rec = await serve(gateway=gw)
    assert (await post_raw(rec.base_url, REQUESTS[0]))[0] == 200
    settings = fake_settings(replay_dir=tmp_path)
    rep = await serve(gateway=Gateway(settings, ReplaySource.load(tmp_path, settings)))
    changed = {**REQUESTS[0], "messages": [{"role": "user", "content": "something else"}]}
    with pytest.raises(openai.NotFoundError) as info:
        await rep.client.chat.completions.create(**changed)
    body: Any = info.value.body
    assert body["code"] == "fixture_not_found"
    key = request_key(normalized_request(ChatCompletionRequest.model_validate(changed)))
    assert key in body["message"]
    (only,) = tmp_path.glob("*.json")
    assert only.name in body["message"] and "messages" in body["message"]
    with pytest.raises(openai.NotFoundError):
        await rep.client.chat.completions.create(
            model="gemini-2.5-pro", messages=[{"role": "user", "content": "x"}]
        )


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        ("{not json", "not valid JSON"),
        ('{"format": "other"}', "not a cli-proxy fixture"),
        ('{"format": "cli-proxy-fixture", "version": 99}', "version 99"),
        (
            '{"format": "cli-proxy-fixture", "version": 1, "backend": "claude",'
            ' "request": {"model": "m"}, "stdout": "x", "exit_code": 0}',
            "stdout must be",
        ),
        ('{"format": "cli-proxy-fixture", "version": 1, "backend": "x"}', "backend must be"),
    ],
)
def test_corrupt_fixture_names_the_file(tmp_path: Path, content: str, fragment: str) -> None:
    bad = tmp_path / "broken.json"
    bad.write_text(content)
    with pytest.raises(FixtureError) as info:
        FixtureStore.load(tmp_path)
    assert str(bad) in str(info.value) and fragment in str(info.value)


def test_serve_with_corrupt_fixture_exits_with_clear_message(tmp_path: Path) -> None:
    (tmp_path / "broken.json").write_text("{oops")
    proc = subprocess.run(
        [sys.executable, "-m", "cli_proxy", "serve", "--replay", str(tmp_path), "--port", "0"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert "broken.json" in proc.stderr and "not valid JSON" in proc.stderr
    assert "Traceback" not in proc.stderr


async def test_testing_helper_serves_replays_sync(serve: ServeFactory, tmp_path: Path) -> None:
    from cli_proxy.cli import make_gateway

    gw, _ = make_gateway(fake_settings(record_dir=tmp_path))
    rec = await serve(gateway=gw)
    live = await rec.client.chat.completions.create(**REQUESTS[1])

    def replay() -> Any:
        with start_gateway(tmp_path) as running:
            client = running.client()
            try:
                return client.chat.completions.create(**REQUESTS[1])
            finally:
                client.close()

    replayed = await asyncio.to_thread(replay)
    assert replayed.model_dump() == live.model_dump()


def test_pytest_plugin_fixture(pytester: pytest.Pytester, tmp_path: Path) -> None:
    shipped = Path(__file__).resolve().parent.parent / "fixtures"
    if not any(shipped.glob("*.json")):
        pytest.skip("no shipped fixtures")
    data = next(
        d
        for d in (json.loads(p.read_text()) for p in sorted(shipped.glob("*.json")))
        if d["exit_code"] == 0
    )
    pytester.makeini(f"[pytest]\ncli_proxy_fixtures = {shipped}\n")
    pytester.makepyfile(
        test_user=f"""
import json
request = json.loads({json.dumps(json.dumps(data["request"]))})

def test_replayed(cli_proxy_client):
    r = cli_proxy_client.chat.completions.create(**request)
    assert r.choices[0].finish_reason in ("stop", "tool_calls")
"""
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)


async def test_a_huge_unmatched_request_does_not_stall_the_gateway(serve: ServeFactory) -> None:
    """The nearest-fixture hint is linear: a multi-megabyte miss answers 404 quickly, and
    /health is answered meanwhile (difflib took 17.9 s for 3.9M characters, on the loop)."""
    import asyncio
    import time

    import aiohttp

    settings = fake_settings(replay_dir=ROOT / "fixtures")
    served = await serve(gateway=Gateway(settings, ReplaySource.load(ROOT / "fixtures", settings)))
    body = {
        "model": "claude-sonnet-4-6",
        "messages": [{"role": "user", "content": "y" * 3_900_000}],
    }
    async with aiohttp.ClientSession() as s:
        t0 = time.monotonic()
        miss = asyncio.create_task(
            s.post(served.server.make_url("/v1/chat/completions"), json=body)
        )
        await asyncio.sleep(0.05)
        async with s.get(served.server.make_url("/health")) as h:
            assert h.status == 200
        resp = await miss
        assert resp.status == 404 and (await resp.json())["error"]["code"] == "fixture_not_found"
        assert time.monotonic() - t0 < 5


def test_the_replayer_never_waits_for_stdin_to_close(tmp_path: Path) -> None:
    """A duplex backend (JSON-RPC on stdin) keeps stdin open and writes to it while the CLI
    runs: the replayer prints its lines and exits with the recorded code all the same, and
    drains what it is sent meanwhile (8 MB here, far more than a pipe holds)."""
    data = {
        "format": "cli-proxy-fixture",
        "version": 1,
        "backend": "gemini",
        "request": {"model": "gemini-2.5-flash", "messages": []},
        "stdout": [{"t": 0, "line": '{"jsonrpc":"2.0","id":1,"result":{}}'}, {"t": 3, "line": "x"}],
        "stderr": "",
        "exit_code": 7,
    }
    path = tmp_path / "duplex.json"
    path.write_text(json.dumps(data))
    proc = subprocess.Popen(
        [sys.executable, "-m", "cli_proxy.replayer", str(path), "--speed", "1"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        cwd=ROOT,
    )
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(b'{"jsonrpc":"2.0","id":1,"method":"initialize"}\n' * 2)
    proc.stdin.flush()
    assert proc.stdout.readline() == b'{"jsonrpc":"2.0","id":1,"result":{}}\n'
    proc.stdin.write(b"y" * (8 * 1024 * 1024))  # drained, or this blocks until it exits
    proc.stdin.flush()
    assert proc.poll() is None  # written while it still waits to print its last line
    assert proc.wait(30) == 7  # stdin is still open
    assert proc.stdout.read() == b"x\n"
    proc.stdin.close()
    proc.stdout.close()


def test_a_replayed_run_is_never_recorded(tmp_path: Path) -> None:
    """``--record`` beside a replay (explicit, or make run's no-CLI fallback) writes live runs
    only: a replay written back would carry the replayer's argv and its instant timings."""
    from cli_proxy.fixtures import Recorder

    settings = fake_settings()
    source = ReplaySource.load(ROOT / "fixtures", settings)
    gw = Gateway(settings, source)
    req = ChatCompletionRequest.model_validate(
        {"model": "claude-sonnet-4-6", "messages": [{"role": "user", "content": "say hi"}]}
    )
    plan = gw.plan(req)
    assert plan.launch.backend == "replay:claude"
    assert Recorder(tmp_path).sink_for(plan) is None
    assert source.sink_for(plan) is None
