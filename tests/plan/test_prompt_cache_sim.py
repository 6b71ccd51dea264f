"""The fake API's prompt-cache simulation follows the documented rules (it measures the bench)."""

from __future__ import annotations

from typing import Any

from tests.fakes.fake_model_api import CACHE_MIN_CHARS, CacheUse, PromptCache

BIG = "x" * CACHE_MIN_CHARS


def body(*texts: str, marks: tuple[int, ...] = ()) -> dict[str, Any]:
    blocks: list[dict[str, Any]] = [{"type": "text", "text": t} for t in texts]
    for i in marks:
        blocks[i]["cache_control"] = {"type": "ephemeral"}
    return {"system": [{"type": "text", "text": BIG, "cache_control": {"type": "ephemeral"}}],
            "messages": [{"role": "user", "content": blocks}]}  # fmt: skip


def test_reads_the_prefix_a_previous_request_wrote_at_a_block_boundary() -> None:
    cache = PromptCache()
    first = cache.use(body("a", "b", "</end>", marks=(1, 2)))
    assert isinstance(first, CacheUse) and first.read_chars == 0
    assert first.write_chars == first.total_chars  # everything up to the last breakpoint
    second = cache.use(body("a", "b", "c", "d", "</end>", marks=(3, 4)))
    assert isinstance(second, CacheUse)
    assert second.read_chars == len(BIG) + 2  # system + "a" + "b": written by the first
    # the first request's last breakpoint (its "</end>") is not a prefix of the second
    third = cache.use(body("a", "b", "c", "X", marks=(3,)))
    assert isinstance(third, CacheUse) and third.read_chars == len(BIG) + 2


def test_lookback_is_twenty_blocks() -> None:
    cache = PromptCache()
    cache.use(body("a", marks=(0,)))
    near = cache.use(body("a", *["n"] * 20, marks=(20,)))
    far = PromptCache()
    far.use(body("a", marks=(0,)))
    beyond = far.use(body("a", *["n"] * 21, marks=(21,)))
    assert isinstance(near, CacheUse) and isinstance(beyond, CacheUse)
    assert near.read_chars == len(BIG) + 1
    assert beyond.read_chars == len(BIG)  # only the system breakpoint's own prefix


def test_more_than_four_breakpoints_is_refused() -> None:
    assert isinstance(PromptCache().use(body("a", "b", "c", "d", marks=(0, 1, 2, 3))), str)
