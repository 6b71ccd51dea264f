"""JSON text from outside, decoded only when it is shallow enough to decode safely.

Python's JSON decoder, ``json.dumps``, jsonschema and pydantic all recurse once per nesting
level: text nested ~1,000 deep (a client's tool-call arguments in the history, a model's
answer) makes them raise ``RecursionError``, which no ``except ValueError`` catches, and which
a traceback then renders with the text it was decoding. So text from outside is measured
first by a loop that cannot recurse, and only text within ``MAX_DEPTH`` levels is handed to
a recursive decoder; deeper text is never decoded (callers keep it as opaque text or treat
it as not an object).
"""

from __future__ import annotations

import json
import re
from typing import Any

MAX_DEPTH = 200
"""Deepest nesting the gateway decodes: far beyond any real tool call's arguments, far below
the interpreter's recursion limit (1,000) even when called from deep in a request's stack."""

MAX_BODY_DEPTH = 64
"""Deepest request body the HTTP edge accepts (any field, tool schemas included): the same
measure, before decoding, with a lower bound because pydantic's validation of the decoded
body recurses again per level."""

# a complete string (skipped: brackets in it do not nest), or one bracket
_TOKENS = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]', re.DOTALL)


class TooDeep(ValueError):
    """The JSON text nests deeper than the gateway decodes."""


def depth(text: str) -> int:
    """How deep the brackets of ``text`` nest, strings skipped; a loop, never recursion.

    Exact for valid JSON; for other text an estimate (it then fails to decode anyway)."""
    if text.count("[") + text.count("{") <= 1:
        return min(1, text.count("[") + text.count("{"))
    level = deepest = 0
    for m in _TOKENS.finditer(text):
        c = m.group()
        if c == "[" or c == "{":
            level += 1
            if level > deepest:
                deepest = level
        elif c == "]" or c == "}":
            level -= 1
    return deepest


def loads(text: str | bytes, max_depth: int = MAX_DEPTH) -> Any:
    """``json.loads(text)``, or ``TooDeep`` (a ``ValueError``) if it nests deeper than
    ``max_depth``: callers that catch ``ValueError`` for bad JSON need nothing more. Bytes
    are decoded as ``json.loads`` would (UTF-8, -16 or -32, told by the first bytes)."""
    if isinstance(text, bytes):
        text = text.decode(json.detect_encoding(text), "surrogatepass")
    if depth(text) > max_depth:
        raise TooDeep(f"JSON nested deeper than {max_depth} levels")
    return json.loads(text)
