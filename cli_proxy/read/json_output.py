"""``response_format`` answers: the content is exactly one JSON object.

Models wrap JSON in a code fence or put a sentence before it; clients (``parse()``,
LangChain's structured output) need the object alone. Pure: it finds the first JSON object
in the text (any fence or prose around it dropped) and, for a strict ``json_schema``, checks
it against the schema. When no object can be recovered, or a strict schema is not met, the
call fails with a 502 ``invalid_json_answer`` (SDKs retry it with a fresh process).
"""

from __future__ import annotations

import json
from typing import Any

import jsonschema

from cli_proxy import jsondepth
from cli_proxy.protocol import ResponseFormat


class JsonAnswerError(ValueError):
    """The answer holds no usable JSON object; the message says why."""


def extract_object(text: str) -> str:
    """The first complete JSON object in ``text``, exactly as the model wrote it.

    Text nesting deeper than ``jsondepth.MAX_DEPTH`` is refused at once: the recursive
    decoder would fail on it at every ``{`` in turn (20,000 levels: 8.5 s of event loop)."""
    if jsondepth.depth(text) > jsondepth.MAX_DEPTH:
        raise JsonAnswerError(
            f"the model's answer nests deeper than {jsondepth.MAX_DEPTH} levels; "
            "no JSON object is taken from it"
        )
    decoder = json.JSONDecoder()
    start = text.find("{")
    while start >= 0:
        try:
            value, end = decoder.raw_decode(text, start)
        except (ValueError, RecursionError):
            value, end = None, start
        if isinstance(value, dict):
            return text[start:end]
        start = text.find("{", start + 1)
    raise JsonAnswerError("the model's answer holds no JSON object")


SCHEMA_CHECK_DEPTH = 64
"""Deepest answer checked against a strict schema. jsonschema recurses several frames per
level (more with ``$ref``/``anyOf``): 150 levels already exhaust the interpreter's stack with
a recursive schema, so deeper answers are refused before the check, which never recurses
out of bounds (and its own ``RecursionError`` is caught, should a schema cost more)."""


def checked(text: str, fmt: ResponseFormat) -> str:
    """The answer's JSON object, checked against a strict schema when there is one."""
    obj_text = extract_object(text)
    schema_spec: dict[str, Any] = fmt.json_schema or {}
    schema = schema_spec.get("schema")
    if fmt.type == "json_schema" and schema_spec.get("strict") and isinstance(schema, dict):
        if jsondepth.depth(obj_text) > SCHEMA_CHECK_DEPTH:
            raise JsonAnswerError(
                f"the model's JSON nests deeper than {SCHEMA_CHECK_DEPTH} levels; "
                "it cannot be checked against the strict schema"
            )
        try:
            jsonschema.validate(json.loads(obj_text), schema)
        except RecursionError:
            raise JsonAnswerError(
                "the model's JSON nests too deep to be checked against the strict schema"
            ) from None
        except jsonschema.ValidationError as exc:
            where = "/".join(map(str, exc.absolute_path)) or "(root)"
            raise JsonAnswerError(
                f"the model's JSON does not match the strict schema at {where}: {exc.message}"
            ) from None
        except jsonschema.SchemaError as exc:
            raise JsonAnswerError(f"the response_format schema is invalid: {exc.message}") from None
    return obj_text
