"""gemini over ACP (``gemini --acp``), checked on the REAL binary against the fake model API:
images in place with their bytes, thoughts kept out of the content, the token-limit stop as
the CLI reports it, and the JSON-RPC exchange the gateway relies on.

Set ``CLI_PROXY_CAPTURE_DIR`` to keep the upstream request bodies."""

from __future__ import annotations

import base64
import contextlib
from pathlib import Path
from typing import Any

import pytest

from cli_proxy.protocol import ChatCompletionRequest
from cli_proxy.read.answer_events import ContentDelta, ReasoningDelta
from tests.conftest import fake
from tests.plan.test_images import (
    JPEG,
    PNG,
    SCREENSHOT,
    data_url,
    image_part,
    screenshot_turns,
    sha,
    two_images_turn,
)

# `real` is the real-CLI fixture; the tests' parameters of that name are its uses (F811)
from tests.realcli.test_real_cli import GEMINI, RealCLIs, real  # noqa: F401
from tests.run.test_reliability import wait_until

pytestmark = [pytest.mark.realcli, pytest.mark.timeout(90)]


def upstream_parts(real: RealCLIs, capture: str) -> list[dict[str, Any]]:  # noqa: F811
    """The parts of the last user content gemini sent to the model API."""
    body = real.only_body(capture)
    users = [c for c in body["contents"] if c.get("role", "user") == "user"]
    return list(users[-1]["parts"])


def images_in_order(parts: list[dict[str, Any]]) -> list[tuple[str, bytes, str]]:
    """(mime type, bytes, the text part just before) for every inline image part."""
    out = []
    for i, p in enumerate(parts):
        if "inlineData" in p:
            before = parts[i - 1].get("text", "") if i else ""
            data = p["inlineData"]
            out.append((data["mimeType"], base64.b64decode(data["data"]), before))
    return out


async def test_user_turn_png_and_jpeg_arrive_in_place(real: RealCLIs) -> None:  # noqa: F811
    r = await real.client.chat.completions.create(
        model=GEMINI,
        messages=two_images_turn("red and blue"),  # type: ignore[arg-type]
    )
    assert r.choices[0].message.content == "red and blue"
    parts = upstream_parts(real, "gemini-image-user-turn.request.json")
    got = images_in_order(parts)
    assert [(t, raw) for t, raw, _ in got] == [("image/png", PNG), ("image/jpeg", JPEG)]
    assert got[0][2].endswith(f'media_type="image/png" sha256="{sha(PNG)}"/>')
    assert "a red square:" in got[0][2] and "and a blue one:" in got[1][2]
    # in place: text follows each image (the blue one's caption, then the question)
    index = [i for i, p in enumerate(parts) if "inlineData" in p]
    assert all("text" in parts[i + 1] for i in index)
    assert "colours?" in parts[index[-1] + 1]["text"]


async def test_tool_result_png_arrives_in_place(real: RealCLIs) -> None:  # noqa: F811
    r = await real.client.chat.completions.create(
        model=GEMINI,
        tools=[SCREENSHOT],  # type: ignore[list-item]
        messages=screenshot_turns(  # type: ignore[arg-type]
            [image_part(data_url(PNG))],
            "and now?" + fake(answer='{"tool_call":null,"response":"red"}'),
        ),
    )
    assert r.choices[0].message.content == "red"
    got = images_in_order(upstream_parts(real, "gemini-image-tool-result.request.json"))
    assert [(t, raw) for t, raw, _ in got] == [("image/png", PNG)]
    assert 'role="tool_result"' in got[0][2] and 'name="screenshot"' in got[0][2]


async def test_thoughts_are_reasoning_never_content(real: RealCLIs) -> None:  # noqa: F811
    """The fake API sends a part marked ``thought: true`` first: gemini passes it as an
    agent_thought_chunk, the parser as reasoning; the content is the answer alone."""
    gw = real.served.gateway
    req = ChatCompletionRequest.model_validate(
        {
            "model": GEMINI,
            "messages": [
                {
                    "role": "user",
                    "content": "6x7?" + fake(answer="42", thought="**Multiplying**\n\nSix sevens."),
                }
            ],
        }
    )
    content, reasoning = [], []
    call = await gw.open_call(req)
    async with contextlib.aclosing(call.events()) as events:
        async for ev in events:
            if isinstance(ev, ContentDelta):
                content.append(ev.text)
            elif isinstance(ev, ReasoningDelta):
                reasoning.append(ev.text)
    assert "".join(content) == "42"
    assert "Six sevens." in "".join(reasoning) and "Multiplying" in "".join(reasoning)
    r = await real.client.chat.completions.create(
        model=GEMINI,
        messages=[{"role": "user", "content": "again" + fake(answer="42", thought="hmm")}],
    )
    assert r.choices[0].message.content == "42"


@pytest.mark.xfail(
    strict=True,
    reason="gemini --acp 0.61.0 ends a MAX_TOKENS finish after text with stopReason end_turn "
    "(its ACP loop ignores the finish reason): no signal reaches the gateway",
)
@pytest.mark.parametrize("stream", [False, True])
async def test_max_tokens_after_text_is_length(real: RealCLIs, stream: bool) -> None:  # noqa: F811
    messages: Any = [
        {"role": "user", "content": "long" + fake(answer="cut off here", stop_reason="max_tokens")}
    ]
    if stream:
        finish, text = None, ""
        chunks = await real.client.chat.completions.create(
            model=GEMINI, messages=messages, stream=True
        )
        async for chunk in chunks:
            if chunk.choices:
                text += chunk.choices[0].delta.content or ""
                finish = chunk.choices[0].finish_reason or finish
    else:
        r = await real.client.chat.completions.create(model=GEMINI, messages=messages)
        finish, text = r.choices[0].finish_reason, r.choices[0].message.content or ""
    assert text == "cut off here"
    assert finish == "length"


# The Gemini API's 429 for a model's daily quota, as captured
# (gemini-0.61.0-quota-apikey-429-per-day)
QUOTA_METRIC = "generativelanguage.googleapis.com/generate_content_requests"
DAILY_429 = {
    "error": {
        "code": 429,
        "message": "You exceeded your current quota, please check your plan and billing details.",
        "status": "RESOURCE_EXHAUSTED",
        "details": [
            {
                "@type": "type.googleapis.com/google.rpc.QuotaFailure",
                "violations": [
                    {
                        "quotaMetric": QUOTA_METRIC,
                        "quotaId": "GenerateRequestsPerDayPerProjectPerModel-FreeTier",
                        "quotaDimensions": {"model": GEMINI},
                        "quotaValue": "10",
                    }
                ],
            },
            {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "20000s"},
        ],
    }
}


async def test_a_daily_quota_is_a_429_until_midnight_pacific(
    serve: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The real gemini drops the API's RetryInfo of a daily quota and says only "You have
    exhausted your daily quota on this model.": the gateway answers 429 naming the daily
    quota, Retry-After running to midnight Pacific time (when the API's daily quotas reset),
    and ``/health`` shows the model's quota rejected until then."""
    import time
    from datetime import datetime, timedelta
    from zoneinfo import ZoneInfo

    import aiohttp

    from cli_proxy.config import Settings
    from cli_proxy.gateway import Gateway, live_backends
    from tests.fakes.fake_quota_api import QuotaModelAPI
    from tests.realcli.test_real_cli import CLI_DIR, point_clis_at

    assert CLI_DIR is not None
    api = await QuotaModelAPI(error=(429, DAILY_429), log_unknown=False).start()
    point_clis_at(api, tmp_path / "home", monkeypatch)
    settings = Settings(
        backends=["gemini"],
        gemini={"bin": str(CLI_DIR / "gemini")},
        timeout_s=60,
        idle_timeout_s=45,
        kill_grace_s=1,
        warm_pool=False,
    )
    try:
        served = await serve(Gateway(settings, live_backends(settings)))
        async with (
            aiohttp.ClientSession() as s,
            s.post(
                f"{served.base_url}/chat/completions",
                json={"model": GEMINI, "messages": [{"role": "user", "content": "say hi"}]},
            ) as r,
        ):
            assert r.status == 429
            retry_after = int(r.headers["Retry-After"])
            body = await r.json()
        now = datetime.now(ZoneInfo("America/Los_Angeles"))
        midnight = now.replace(hour=0, minute=0, second=0, microsecond=0) + timedelta(days=1)
        assert abs(retry_after - (midnight.timestamp() - time.time())) < 10
        assert f"gemini's daily quota of {GEMINI} is used up" in body["error"]["message"]
        base = served.base_url.removesuffix("/v1")
        async with aiohttp.ClientSession() as s, s.get(f"{base}/health") as r:
            state = (await r.json())["rate_limits"]["gemini"][GEMINI]
        assert state == {
            "status": "rejected",
            "utilization": None,
            "resets_at": midnight.timestamp(),
            "window_minutes": 1440,
        }
        calls = [q for q in api.requests if q["path"].endswith(":streamGenerateContent")]
        assert len(calls) == 1  # one attempt (maxAttempts 1): nothing retried
    finally:
        await api.close()


@pytest.mark.parametrize("real", [{"warm_pool": True}], indirect=True)
async def test_a_spare_is_one_node_process(real: RealCLIs) -> None:  # noqa: F811
    """``GEMINI_CLI_NO_RELAUNCH``: the gemini a call gets is one node process (0.61.0 otherwise
    starts a second one with a larger heap and runs in that, twice the start's CPU). Checked
    on a warm spare, the process a call is handed, and the call it then serves answers."""

    import psutil

    pool = real.served.gateway.pool
    assert pool is not None
    first = await real.client.chat.completions.create(
        model=GEMINI, messages=[{"role": "user", "content": "one" + fake(answer="cold")}]
    )
    assert first.choices[0].message.content == "cold"
    # a spare follows the call; its start takes seconds on a busy machine
    await wait_until(lambda: pool.status()["ready"].get("gemini"), 60, "a gemini spare")  # type: ignore[attr-defined]
    (spares,) = [s for spec, s in pool._spares.items() if spec.backend == "gemini"]
    (spare,) = spares
    tree = [psutil.Process(spare.proc.pid)]
    tree += tree[0].children(recursive=True)
    nodes = [p for p in tree if p.name() == "node"]  # bwrap's own two processes aside
    assert len(nodes) == 1, [p.cmdline() for p in tree]
    assert ("GEMINI_CLI_NO_RELAUNCH", "true") in spare.spec.env
    warm = await real.client.chat.completions.create(
        model=GEMINI, messages=[{"role": "user", "content": "two" + fake(answer="warm")}]
    )
    assert warm.choices[0].message.content == "warm"
