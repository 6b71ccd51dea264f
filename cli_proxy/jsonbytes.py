"""JSON as the bytes the gateway sends: every body, SSE event and error goes through here."""

from __future__ import annotations

import json
from typing import Any


def utf8(text: str) -> bytes:
    """UTF-8 bytes of any str: a lone surrogate (from a client's ``\\ud800`` escape or a
    model's) becomes U+FFFD instead of failing the whole response."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogatepass").decode("utf-8", "replace").encode("utf-8")


def json_bytes(payload: Any, **kw: Any) -> bytes:
    """JSON as UTF-8 bytes, whatever strings it holds."""
    return utf8(json.dumps(payload, ensure_ascii=False, **kw))
