"""Images in (issue #14): the model sees what the user sent, in its place; limits, content
checks and the URL policy answer clear 400s. Through the openai SDK over real HTTP; the
fake claude and gemini echo the content blocks they read on stdin."""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import openai
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from cli_proxy.backends.claude.backend import ClaudeBackend
from cli_proxy.plan.images import ImageError, ImageLimits, extract, sniff
from cli_proxy.plan.prompt import render
from cli_proxy.protocol import ChatCompletionRequest
from cli_proxy.replay.keys import normalized_request, request_key
from tests.conftest import Served, ServeFactory, fake

IMAGES = Path(__file__).resolve().parents[1] / "data" / "images"
PNG = (IMAGES / "red-8x8.png").read_bytes()
JPEG = (IMAGES / "blue-8x8.jpg").read_bytes()
CLAUDE = "claude-sonnet-4-6"


def data_url(raw: bytes, media_type: str = "image/png") -> str:
    return f"data:{media_type};base64," + base64.b64encode(raw).decode()


def image_part(url: str) -> dict[str, Any]:
    return {"type": "image_url", "image_url": {"url": url, "detail": "high"}}


def sha(raw: bytes) -> str:
    return hashlib.sha256(raw).hexdigest()


async def blocks(
    served: Served, messages: list[dict[str, Any]], model: str = CLAUDE, **kw: Any
) -> list[Any]:
    """What the CLI read on stdin (claude's stream-json message, gemini's ACP session/prompt),
    as the fake reports it."""
    r = await served.client.chat.completions.create(model=model, messages=messages, **kw)  # type: ignore[arg-type]
    return list(json.loads(r.choices[0].message.content or "[]"))


def images_of(got: list[dict[str, str]]) -> list[tuple[str, str]]:
    return [(b["image"], b["sha256"]) for b in got if "image" in b]


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("red-8x8.png", "image/png"),
        ("blue-8x8.jpg", "image/jpeg"),
        ("green-8x8.gif", "image/gif"),
        ("white-8x8.webp", "image/webp"),
    ],
)
def test_media_type_is_read_from_the_bytes(name: str, kind: str) -> None:
    assert sniff((IMAGES / name).read_bytes()) == kind
    assert sniff(b"<svg xmlns='http://www.w3.org/2000/svg'/>") is None


@pytest.mark.parametrize("model", [CLAUDE, "gemini-2.5-flash"])
async def test_user_images_reach_the_cli_in_place(served: Served, model: str) -> None:
    got = await blocks(
        served,
        [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "first"},
                    image_part(data_url(PNG)),
                    {"type": "text", "text": "then"},
                    image_part(data_url(JPEG, "image/png")),  # declared wrong: the bytes decide
                    {"type": "text", "text": "which colours?" + fake(echo_blocks=True)},
                ],
            }
        ],
        model,
    )
    assert images_of(got) == [("image/png", sha(PNG)), ("image/jpeg", sha(JPEG))]
    kinds = ["image" if "image" in b else "text" for b in got]
    first = kinds.index("image")
    assert kinds[first + 1] == "text" and kinds[first + 2] == "image"  # in their places
    before_first = got[first - 1]["text"]
    assert before_first.endswith(f'<image n="1" media_type="image/png" sha256="{sha(PNG)}"/>')
    assert "first" in before_first and "then" in got[first + 1]["text"]


SCREENSHOT: dict[str, Any] = {
    "type": "function",
    "function": {"name": "screenshot", "parameters": {"type": "object", "properties": {}}},
}


def two_images_turn(answer: str) -> list[dict[str, Any]]:
    """One user turn with a PNG and a JPEG between captions; the fake model answers ``answer``."""
    content = [
        {"type": "text", "text": "a red square:"},
        image_part(data_url(PNG)),
        {"type": "text", "text": "and a blue one:"},
        image_part(data_url(JPEG, "image/jpeg")),
        {"type": "text", "text": "colours?" + fake(answer=answer)},
    ]
    return [{"role": "user", "content": content}]


def screenshot_turns(tool_content: list[dict[str, Any]], then: str) -> list[dict[str, Any]]:
    """A conversation whose screenshot tool answered with ``tool_content``, then a user turn."""
    call = {"id": "c1", "type": "function", "function": {"name": "screenshot", "arguments": "{}"}}
    return [
        {"role": "user", "content": "take a screenshot"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": tool_content},
        {"role": "user", "content": then},
    ]


@pytest.mark.parametrize("model", [CLAUDE, "gemini-2.5-flash"])
async def test_tool_result_images_reach_the_cli(served: Served, model: str) -> None:
    got = await blocks(
        served,
        screenshot_turns(
            [{"type": "text", "text": "here"}, image_part(data_url(PNG))],
            "what is on it?" + fake(echo_blocks=True),
        ),
        model,
        tools=[SCREENSHOT],
    )
    assert images_of(got) == [("image/png", sha(PNG))]
    i = next(i for i, b in enumerate(got) if "image" in b)
    assert 'role="tool_result"' in got[i - 1]["text"]


async def test_responses_input_image_reaches_claude(served: Served) -> None:
    r = await served.client.responses.create(
        model=CLAUDE,
        input=[
            {
                "role": "user",
                "content": [
                    {"type": "input_text", "text": "describe" + fake(echo_blocks=True)},
                    {
                        "type": "input_image",
                        "image_url": data_url(JPEG, "image/jpeg"),
                        "detail": "auto",
                    },
                ],
            }
        ],
    )
    assert images_of(json.loads(r.output_text)) == [("image/jpeg", sha(JPEG))]
    with pytest.raises(openai.BadRequestError) as info:
        await served.client.responses.create(
            model=CLAUDE,
            input=[
                {
                    "role": "user",
                    "content": [{"type": "input_image", "file_id": "file-1", "detail": "auto"}],
                }
            ],
        )
    assert "file_id" in str(info.value)


def bad(body: Any) -> dict[str, Any]:
    assert isinstance(body, dict)
    return body


@pytest.mark.parametrize(
    ("content", "code", "settings"),
    [
        ([image_part("data:image/png;base64,@@@@")], "invalid_image", {}),
        ([image_part("data:image/png," + "x")], "invalid_image", {}),
        ([image_part(data_url(b"GIF-not-really-an-image-at-all"))], "unsupported_image_type", {}),
        ([image_part(data_url(PNG + b"\0" * 3000))], "image_too_large", {"max_image_bytes": 2048}),
        (
            [image_part(data_url(PNG)), image_part(data_url(JPEG))],
            "too_many_images",
            {"max_images": 1},
        ),
        (
            [image_part(data_url(PNG)), image_part(data_url(JPEG))],
            "image_too_large",
            {"max_image_total_bytes": 700},
        ),
        ([image_part("https://example.com/cat.png")], "image_url_not_fetched", {}),
    ],
)
async def test_bad_images_are_clear_400s(
    serve: ServeFactory, content: list[dict[str, Any]], code: str, settings: dict[str, Any]
) -> None:
    s = await serve(**settings)
    with pytest.raises(openai.BadRequestError) as info:
        await s.client.chat.completions.create(
            model=CLAUDE, messages=[{"role": "user", "content": content}]
        )  # type: ignore[misc]
    body = bad(info.value.body)
    assert body["code"] == code
    assert body["param"].startswith("messages[0].content[")
    if code == "image_url_not_fetched":
        assert "data URL" in body["message"] and "CLI_PROXY_IMAGE_FETCH" in body["message"]


async def test_images_elsewhere_than_user_and_tool_messages_are_refused(served: Served) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        await served.client.chat.completions.create(
            model=CLAUDE,
            messages=[
                {"role": "system", "content": [image_part(data_url(PNG))]},  # type: ignore[list-item]
                {"role": "user", "content": "hi"},
            ],
        )
    assert "system" in bad(info.value.body)["message"]


async def test_a_backend_without_an_image_channel_says_so(serve: ServeFactory) -> None:
    """Every built-in backend has an image channel now (claude stream-json, gemini ACP, codex
    app-server); a backend without one refuses images before any process starts."""
    from cli_proxy.backends.claude.backend import ClaudeBackend
    from cli_proxy.backends.registry import register, unregister

    class TextOnly(ClaudeBackend):
        name = "textonly"
        model_prefixes = ("textonly-",)
        aliases = ()
        known_models = ()
        accepts_images = False

    register(TextOnly)
    try:
        served = await serve()
        with pytest.raises(openai.BadRequestError) as info:
            await served.client.chat.completions.create(
                model="textonly-1",
                messages=[{"role": "user", "content": [image_part(data_url(PNG))]}],  # type: ignore[list-item]
            )
    finally:
        unregister("textonly")
    body = bad(info.value.body)
    assert body["code"] == "images_not_supported" and "textonly" in body["message"]


# ------------------------------------------------------------------ remote URLs


@pytest.fixture
async def image_server() -> AsyncIterator[TestServer]:
    async def png(_: web.Request) -> web.Response:
        return web.Response(body=PNG, content_type="image/png")

    async def html(_: web.Request) -> web.Response:
        return web.Response(text="<html></html>", content_type="text/html")

    async def big(_: web.Request) -> web.Response:
        return web.Response(body=PNG + b"\0" * 100_000, content_type="image/png")

    async def hop(_: web.Request) -> web.Response:
        raise web.HTTPFound("/red.png")

    app = web.Application()
    app.router.add_get("/red.png", png)
    app.router.add_get("/page", html)
    app.router.add_get("/big.png", big)
    app.router.add_get("/hop", hop)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    yield server
    await server.close()


async def test_remote_urls_are_fetched_only_when_allowed_and_never_from_private_addresses(
    serve: ServeFactory, image_server: TestServer
) -> None:
    url = str(image_server.make_url("/red.png"))
    content = [image_part(url), {"type": "text", "text": "?" + fake(echo_blocks=True)}]
    off = await serve()
    with pytest.raises(openai.BadRequestError) as info:
        await blocks(off, [{"role": "user", "content": content}])
    assert bad(info.value.body)["code"] == "image_url_not_fetched"
    public_only = await serve(image_fetch=True)  # loopback is not public: refused
    with pytest.raises(openai.BadRequestError) as info:
        await blocks(public_only, [{"role": "user", "content": content}])
    body = bad(info.value.body)
    assert body["code"] == "image_fetch_failed" and "public address" in body["message"]
    trusted = await serve(image_fetch=True, image_fetch_private=True, max_image_bytes=50_000)
    got = await blocks(trusted, [{"role": "user", "content": content}])
    assert images_of(got) == [("image/png", sha(PNG))]
    hop = [image_part(str(image_server.make_url("/hop"))), content[1]]
    assert images_of(await blocks(trusted, [{"role": "user", "content": hop}])) == [
        ("image/png", sha(PNG))
    ]
    for path, code in [
        ("/page", "unsupported_image_type"),
        ("/big.png", "image_too_large"),
        ("/missing.png", "image_fetch_failed"),
    ]:
        with pytest.raises(openai.BadRequestError) as info:
            await blocks(
                trusted,
                [{"role": "user", "content": [image_part(str(image_server.make_url(path)))]}],
            )
        assert bad(info.value.body)["code"] == code, path


# ------------------------------------------------------- caching and fixtures


def _request(turns: int) -> ChatCompletionRequest:
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": [{"type": "text", "text": "look"}, image_part(data_url(PNG))]}
    ]
    for i in range(1, turns):
        messages += [
            {"role": "assistant", "content": f"answer {i}"},
            {"role": "user", "content": f"more {i}"},
        ]
    return ChatCompletionRequest.model_validate({"model": CLAUDE, "messages": messages})


def _content(req: ChatCompletionRequest) -> list[dict[str, Any]]:
    backend = ClaudeBackend(ClaudeBackend.options_model(bin="claude"))
    prompt = render(req, images=extract(req, ImageLimits()))
    return list(json.loads(backend.encode_prompt(prompt, req))["message"]["content"])


def test_an_early_image_keeps_the_cached_prefix_and_is_sent_once() -> None:
    one, three = _content(_request(1)), _content(_request(3))
    assert [b.get("type") for b in three].count("image") == 1
    strip = [{k: v for k, v in b.items() if k != "cache_control"} for b in one[:-1]]
    assert [
        {k: v for k, v in b.items() if k != "cache_control"} for b in three[: len(strip)]
    ] == strip
    assert "cache_control" in three[-2]  # the breakpoint: on the last turn's last piece


def test_fixture_key_names_images_by_digest() -> None:
    req = _request(1)
    normalized = normalized_request(req)
    text = json.dumps(normalized)
    assert base64.b64encode(PNG).decode() not in text
    assert f"sha256:{sha(PNG)}" in text
    again = ChatCompletionRequest.model_validate(
        {
            "model": CLAUDE,
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "look"},
                        image_part(data_url(PNG, "image/jpeg")),
                    ],
                }
            ],
        }
    )
    # the same bytes under another declared type: the same key (the digest is of the bytes)
    assert request_key(normalized_request(again)) == request_key(normalized)


def test_extract_refuses_unknown_bytes() -> None:
    req = ChatCompletionRequest.model_validate(
        {
            "model": CLAUDE,
            "messages": [{"role": "user", "content": [image_part(data_url(b"\0" * 64))]}],
        }
    )
    with pytest.raises(ImageError) as info:
        extract(req, ImageLimits())
    assert info.value.code == "unsupported_image_type"


@pytest.mark.parametrize(
    ("address", "public"),
    [
        ("8.8.8.8", True),
        ("2606:4700:4700::1111", True),
        ("127.0.0.1", False),
        ("10.1.2.3", False),
        ("192.168.0.1", False),
        ("169.254.169.254", False),  # cloud metadata
        ("::1", False),
        ("::ffff:127.0.0.1", False),  # loopback in an IPv6 disguise
        ("fe80::1%eth0", False),
        ("0.0.0.0", False),
        ("224.0.0.1", False),
    ],
)
def test_only_public_addresses_are_fetched_from(address: str, public: bool) -> None:
    from cli_proxy.plan.images import _public

    assert _public(address) is public
