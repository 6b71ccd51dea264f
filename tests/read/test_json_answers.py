"""``response_format`` answers are exactly one JSON object (fences and prose removed), or a
clear 502 ``invalid_json_answer``; strict schemas are checked (both backends, stream and not)."""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest
from pydantic import BaseModel

from tests.conftest import Served, fake

MODELS = ["claude-sonnet-4-6", "gemini-2.5-flash"]


class City(BaseModel):
    name: str
    population: int


async def answer(served: Served, model: str, text: str, stream: bool, **kw: Any) -> str:
    args: dict[str, Any] = {
        "model": model,
        "messages": [{"role": "user", "content": "go" + fake(answer=text)}],
        **kw,
    }
    if not stream:
        r = await served.client.chat.completions.create(**args)
        return r.choices[0].message.content or ""
    chunks = await served.client.chat.completions.create(stream=True, **args)
    return "".join([c.choices[0].delta.content or "" async for c in chunks if c.choices])


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize(
    "text",
    [
        '```json\n{"name": "Oslo", "population": 709000}\n```',
        'Sure, here it is:\n{"name": "Oslo", "population": 709000} Hope that helps.',
        '{"name": "Oslo", "population": 709000}',
    ],
    ids=["fenced", "prose", "plain"],
)
async def test_content_is_exactly_the_object(
    served: Served, model: str, stream: bool, text: str
) -> None:
    got = await answer(served, model, text, stream, response_format={"type": "json_object"})
    assert json.loads(got) == {"name": "Oslo", "population": 709000}
    assert got.startswith("{") and got.endswith("}")


@pytest.mark.parametrize("model", MODELS)
async def test_parse_helper_works_on_a_fenced_answer(served: Served, model: str) -> None:
    r = await served.client.chat.completions.parse(
        model=model,
        messages=[
            {
                "role": "user",
                "content": "go" + fake(answer='```json\n{"name":"Oslo","population":1}\n```'),
            }
        ],
        response_format=City,
    )
    assert r.choices[0].message.parsed == City(name="Oslo", population=1)


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("model", MODELS)
async def test_no_object_or_a_broken_strict_schema_is_a_clear_502(
    served: Served, model: str, stream: bool
) -> None:
    with pytest.raises(openai.InternalServerError) as info:
        await answer(
            served, model, "I cannot do that.", stream, response_format={"type": "json_object"}
        )
    assert info.value.status_code == 502 and "no JSON object" in str(info.value)
    strict = {
        "type": "json_schema",
        "json_schema": {"name": "city", "strict": True, "schema": City.model_json_schema()},
    }
    with pytest.raises(openai.InternalServerError) as info:
        await answer(served, model, '{"name": "Oslo"}', stream, response_format=strict)
    assert "strict schema" in str(info.value) and "population" in str(info.value)
