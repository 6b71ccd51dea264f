"""Images through the REAL claude binary (issue #14): a PNG and a JPEG, from a user turn and
from a tool result, arrive at the model API as image blocks in their places (gemini's: in
tests/realcli/test_real_cli_gemini_acp.py).

Set ``CLI_PROXY_CAPTURE_DIR`` to keep the upstream request bodies (tests/data/real-cli/
holds the captures of the pinned version)."""

from __future__ import annotations

import base64
from typing import Any

import pytest

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
from tests.realcli.test_real_cli import RealCLIs, real  # noqa: F401

CLAUDE = "claude-sonnet-4-6"

pytestmark = [pytest.mark.realcli, pytest.mark.timeout(60)]


def upstream_blocks(real: RealCLIs, capture: str) -> list[dict[str, Any]]:  # noqa: F811
    """The content blocks of the last user message the CLI sent to the model API."""
    body = real.only_body(capture)
    user_msgs = [m for m in body["messages"] if m["role"] == "user"]
    return list(user_msgs[-1]["content"])


def images_in_order(blocks: list[dict[str, Any]]) -> list[tuple[str, bytes, str]]:
    """(media type, bytes, the text just before) for every image block."""
    out = []
    for i, b in enumerate(blocks):
        if b.get("type") == "image":
            before = blocks[i - 1].get("text", "") if i else ""
            out.append((b["source"]["media_type"], base64.b64decode(b["source"]["data"]), before))
    return out


async def test_user_turn_png_and_jpeg_arrive_as_image_blocks_in_place(real: RealCLIs) -> None:  # noqa: F811
    r = await real.client.chat.completions.create(
        model=CLAUDE,
        messages=two_images_turn("red and blue"),  # type: ignore[arg-type]
    )
    assert r.choices[0].message.content == "red and blue"
    blocks = upstream_blocks(real, "claude-image-user-turn.request.json")
    got = images_in_order(blocks)
    assert [(t, raw) for t, raw, _ in got] == [("image/png", PNG), ("image/jpeg", JPEG)]
    assert got[0][2].endswith(f'media_type="image/png" sha256="{sha(PNG)}"/>')
    assert "a red square:" in got[0][2] and "and a blue one:" in got[1][2]


async def test_tool_result_png_and_jpeg_arrive_as_image_blocks(real: RealCLIs) -> None:  # noqa: F811
    r = await real.client.chat.completions.create(
        model=CLAUDE,
        tools=[SCREENSHOT],  # type: ignore[list-item]
        messages=screenshot_turns(  # type: ignore[arg-type]
            [image_part(data_url(PNG)), image_part(data_url(JPEG, "image/jpeg"))],
            "and now?" + fake(answer='{"tool_call":null,"response":"blue"}'),
        ),
    )
    assert r.choices[0].message.content == "blue"
    got = images_in_order(upstream_blocks(real, "claude-image-tool-result.request.json"))
    assert [(t, raw) for t, raw, _ in got] == [("image/png", PNG), ("image/jpeg", JPEG)]
    assert 'role="tool_result"' in got[0][2] and 'name="screenshot"' in got[0][2]
