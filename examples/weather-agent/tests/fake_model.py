"""Script lines for the fake model API the example's CI records against: the CLIs run for
real, the model behind them is scripted (tests/fake_model_api.py in cli-proxy). Against a
real model, ask the question alone and let the model answer."""

from __future__ import annotations

import json
from typing import Any


def scripted(text: str, answer: str) -> str:
    """``text``, then the fake model's next answer (the last such line in a prompt wins)."""
    return f"{text} @@fake {json.dumps({'answer': answer})}"


def tool_call(name: str, **arguments: Any) -> str:
    return json.dumps({"tool_call": {"name": name, "arguments": arguments}})


def reply(text: str) -> str:
    return json.dumps({"tool_call": None, "response": text})
