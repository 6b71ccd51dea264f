"""Images in requests: decoded, checked by content and bounded before any prompt is built.

Pure part (``extract``): data URLs -> ``PromptImage`` (bytes, media type sniffed from the
bytes, digest), with the request's limits; used by ``Gateway.plan``. I/O part (``fetch_all``):
remote ``http(s)`` URLs become data URLs, only when the ``image_fetch`` setting allows it,
never from a private, loopback or link-local address (the check is made on the addresses the
connection then uses, so a DNS answer cannot change between check and connect), with a size
limit, a time limit, no redirects beyond three checked hops and a content-type check.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import ipaddress
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urljoin, urlsplit

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult

from cli_proxy.failures import InvalidRequest
from cli_proxy.protocol import (
    ChatCompletionRequest,
    ImagePart,
    Message,
    ToolMessage,
    UserMessage,
)

SUPPORTED = ("image/png", "image/jpeg", "image/gif", "image/webp")


class ImageError(InvalidRequest):
    """A request's image that cannot be used; ``param`` names the part."""

    def __init__(self, message: str, param: str, code: str = "invalid_image") -> None:
        super().__init__(message, param, code)


@dataclass(frozen=True, slots=True)
class PromptImage:
    """One image as the model receives it. ``sha256`` names it in the prompt text (so replay
    keys and fixtures carry a digest, not megabytes)."""

    media_type: str
    data: bytes
    sha256: str

    @property
    def base64(self) -> str:
        return base64.b64encode(self.data).decode("ascii")


@dataclass(frozen=True, slots=True)
class ImageLimits:
    max_images: int = 20
    max_image_bytes: int = 5 * 1024 * 1024
    max_total_bytes: int = 12 * 1024 * 1024


def sniff(data: bytes) -> str | None:
    """The media type the bytes really are (of those the models take), or None."""
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if data.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if data.startswith((b"GIF87a", b"GIF89a")):
        return "image/gif"
    if len(data) >= 12 and data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None


def image_parts(messages: list[Message]) -> Iterator[tuple[str, ImagePart, Message]]:
    """(param path, part, its message) for every image part, in order."""
    for i, msg in enumerate(messages):
        content = getattr(msg, "content", None)
        if isinstance(content, list):
            for j, part in enumerate(content):
                if isinstance(part, ImagePart):
                    yield f"messages[{i}].content[{j}].image_url.url", part, msg


def decode_data_url(url: str, param: str, max_bytes: int) -> bytes:
    head, sep, payload = url.partition(",")
    if not sep or not head.lower().startswith("data:") or not head.lower().endswith(";base64"):
        raise ImageError("an image data URL must look like data:image/png;base64,<data>", param)
    if len(payload) > (max_bytes + 2) // 3 * 4 + 4:
        raise ImageError(f"the image is larger than {max_bytes} bytes", param, "image_too_large")
    try:
        return base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        raise ImageError("the image data URL is not valid base64", param) from None


def extract(req: ChatCompletionRequest, limits: ImageLimits) -> dict[str, PromptImage]:
    """Every image of the request, by URL, decoded and checked. Images go in user turns and
    tool results only; remote URLs must have been fetched (``fetch_all``) before."""
    images: dict[str, PromptImage] = {}
    total = count = 0
    for param, part, msg in image_parts(req.messages):
        if not isinstance(msg, UserMessage | ToolMessage):
            raise ImageError(
                f"images are accepted in user and tool messages, not in {msg.role} messages",
                param,
            )
        count += 1
        if count > limits.max_images:
            raise ImageError(
                f"at most {limits.max_images} images per request", param, "too_many_images"
            )
        url = part.image_url.url
        if url.startswith(("http://", "https://")):
            raise ImageError(
                "remote image URLs are not fetched by this gateway: send the image inline as "
                "a data URL (data:image/png;base64,...), or start the gateway with "
                "image_fetch enabled (CLI_PROXY_IMAGE_FETCH=true; docs/configuration.md)",
                param,
                "image_url_not_fetched",
            )
        if url in images:
            continue
        data = decode_data_url(url, param, limits.max_image_bytes)
        if len(data) > limits.max_image_bytes:
            raise ImageError(
                f"the image is larger than {limits.max_image_bytes} bytes", param, "image_too_large"
            )
        media_type = sniff(data)
        if media_type is None:
            raise ImageError(
                f"the image is not one of {', '.join(SUPPORTED)} (checked by its content)",
                param,
                "unsupported_image_type",
            )
        total += len(data)
        if total > limits.max_total_bytes:
            raise ImageError(
                f"the request's images exceed {limits.max_total_bytes} bytes in all",
                param,
                "image_too_large",
            )
        images[url] = PromptImage(media_type, data, hashlib.sha256(data).hexdigest())
    return images


# ------------------------------------------------------------------- fetching (I/O)


@dataclass(frozen=True, slots=True)
class FetchPolicy:
    enabled: bool = False
    allow_private: bool = False  # tests (a loopback image server) and trusted networks only
    timeout_s: float = 10.0
    max_bytes: int = 5 * 1024 * 1024
    max_redirects: int = 3


def _public(address: str) -> bool:
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_global and not ip.is_multicast


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return False
    return True


class _CheckedResolver(AbstractResolver):
    """Resolves like the system, then keeps only the addresses the policy allows: the
    connection is made to exactly the addresses that were checked."""

    def __init__(self, allow_private: bool) -> None:
        self.allow_private = allow_private

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        infos = await asyncio.get_running_loop().getaddrinfo(
            host, port, type=socket.SOCK_STREAM, family=family
        )
        out: list[ResolveResult] = []
        for fam, _, proto, _, sockaddr in infos:
            address = str(sockaddr[0])
            if not self.allow_private and not _public(address):
                continue
            out.append(
                ResolveResult(
                    hostname=host,
                    host=address,
                    port=int(sockaddr[1]),
                    family=fam,
                    proto=proto,
                    flags=socket.AI_NUMERICHOST,
                )
            )
        if not out:
            raise OSError(f"{host} resolves to no public address")
        return out

    async def close(self) -> None:
        return None


async def fetch(url: str, param: str, policy: FetchPolicy) -> str:
    """The image at ``url`` as a data URL (see the module docstring for the checks)."""
    connector = aiohttp.TCPConnector(resolver=_CheckedResolver(policy.allow_private))
    timeout = aiohttp.ClientTimeout(total=policy.timeout_s)
    try:
        async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
            for _ in range(policy.max_redirects + 1):
                parts = urlsplit(url)
                if parts.scheme not in ("http", "https") or not parts.hostname:
                    raise ImageError("only http(s) image URLs can be fetched", param)
                host = parts.hostname
                # an address literal is connected to without the resolver: checked here
                if not policy.allow_private and _is_ip(host) and not _public(host):
                    raise OSError(f"{host} is not a public address")
                async with session.get(url, allow_redirects=False) as resp:
                    if resp.status in (301, 302, 303, 307, 308) and "Location" in resp.headers:
                        url = urljoin(url, resp.headers["Location"])
                        continue
                    if resp.status != 200:
                        raise ImageError(
                            f"fetching the image answered HTTP {resp.status}",
                            param,
                            "image_fetch_failed",
                        )
                    ctype = resp.headers.get("Content-Type", "").split(";")[0].strip().lower()
                    if not ctype.startswith("image/"):
                        raise ImageError(
                            f"the URL did not return an image (Content-Type {ctype!r})",
                            param,
                            "unsupported_image_type",
                        )
                    data = await _read_capped(resp, policy.max_bytes, param)
                    media_type = sniff(data)
                    if media_type is None:
                        raise ImageError(
                            f"the fetched image is not one of {', '.join(SUPPORTED)}",
                            param,
                            "unsupported_image_type",
                        )
                    return f"data:{media_type};base64," + base64.b64encode(data).decode()
            raise ImageError("too many redirects fetching the image", param, "image_fetch_failed")
    except ImageError:
        raise
    except (aiohttp.ClientError, OSError, TimeoutError) as exc:
        reason = str(exc) or type(exc).__name__
        raise ImageError(
            f"the image could not be fetched: {reason}", param, "image_fetch_failed"
        ) from None


async def _read_capped(resp: aiohttp.ClientResponse, max_bytes: int, param: str) -> bytes:
    chunks: list[bytes] = []
    size = 0
    async for chunk in resp.content.iter_chunked(65536):
        size += len(chunk)
        if size > max_bytes:
            raise ImageError(
                f"the image is larger than {max_bytes} bytes", param, "image_too_large"
            )
        chunks.append(chunk)
    return b"".join(chunks)


async def fetch_all(req: ChatCompletionRequest, policy: FetchPolicy) -> ChatCompletionRequest:
    """The request with its remote image URLs replaced by fetched data URLs (a copy; the
    request is returned unchanged when it has none or fetching is off)."""
    remote = [
        (param, part)
        for param, part, _ in image_parts(req.messages)
        if part.image_url.url.startswith(("http://", "https://"))
    ]
    if not remote or not policy.enabled:
        return req
    urls = {part.image_url.url: param for param, part in remote}
    fetched = await asyncio.gather(*(fetch(u, p, policy) for u, p in urls.items()))
    data_urls: dict[str, Any] = dict(zip(urls, fetched, strict=True))
    copy = req.model_copy(deep=True)
    for _, part, _ in image_parts(copy.messages):
        part.image_url.url = data_urls.get(part.image_url.url, part.image_url.url)
    return copy
