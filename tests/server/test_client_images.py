"""Images from real client libraries (issue #14): LangChain's ``HumanMessage`` with an image
part and the OpenAI Agents SDK's ``input_image`` reach the model as images (the fake claude
reports the content blocks it read on stdin). Tracing is off: nothing leaves loopback."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.conftest import Served, fake
from tests.plan.test_images import JPEG, PNG, data_url, images_of, sha

CLAUDE = "claude-sonnet-4-6"


async def test_langchain_human_message_with_an_image(served: Served) -> None:
    langchain_openai = pytest.importorskip("langchain_openai")
    from langchain_core.messages import HumanMessage

    llm = langchain_openai.ChatOpenAI(
        model=CLAUDE, base_url=served.base_url, api_key="test", max_retries=0
    )
    message = HumanMessage(
        content=[
            {"type": "text", "text": "what colour?" + fake(echo_blocks=True)},
            {"type": "image_url", "image_url": {"url": data_url(PNG)}},
        ]
    )
    answer = await llm.ainvoke([message])
    assert images_of(json.loads(str(answer.content))) == [("image/png", sha(PNG))]


async def test_agents_sdk_input_image(served: Served) -> None:
    agents = pytest.importorskip("agents")
    from openai import AsyncOpenAI

    agents.set_tracing_disabled(True)
    client = AsyncOpenAI(base_url=served.base_url, api_key="test", max_retries=0)
    agent = agents.Agent(
        name="describer",
        instructions="Describe the image.",
        model=agents.OpenAIResponsesModel(model=CLAUDE, openai_client=client),
    )
    items: list[Any] = [
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
    ]
    result = await agents.Runner.run(agent, input=items)
    assert images_of(json.loads(result.final_output)) == [("image/jpeg", sha(JPEG))]
    await client.close()
