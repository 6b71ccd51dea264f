"""The ``system_prompt`` backend option: whose system prompt the model reads.

``cli``: the CLI's own agent prompt (claude ~12.4 kB, gemini ~21.5 kB, codex ~17-22 kB per
model), which tells the model it is a coding agent with shell and file tools it does not
have here, and which API-key users pay for on every call. ``minimal``: ``MINIMAL_SYSTEM_PROMPT``,
one short fixed text shared by every backend; the gateway's ``<instructions>`` in the user
message do the real work. Either is fixed per process (argv, env or a file in the work dir),
so it is part of the launch spec: warm spares and prompt caching work in both modes.

claude keeps ``cli`` by default: Anthropic reportedly bills subscription requests it
classifies as third-party apps to "extra usage", and public reports tie that to the system
prompt's content (docs/security.md).
"""

from __future__ import annotations

from typing import Literal

SystemPrompt = Literal["cli", "minimal"]

MINIMAL_SYSTEM_PROMPT = (
    "You are a helpful assistant. Follow the instructions you are given and answer the "
    "user's last message. You cannot run commands, read or write files, or browse; the only "
    "functions you can call are the ones declared to you, if any.\n"
)
"""Neutral on purpose: no product or app name (the same text behind every CLI), no tool but
the client's functions (declared in our ``<instructions>``, or natively through codex's
channel; a model told about a shell tries to call it); no ``${...}`` either, which gemini
would substitute."""
