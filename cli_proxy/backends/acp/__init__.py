"""The one ACP client (Agent Client Protocol over stdio) that the gemini and copilot backends
share: ``rpc.py`` (JSON-RPC lines, the warm prefix, content blocks) and ``session.py`` (the
client side of one session: it answers the CLI's requests, sends the prompt once
``session/new`` answers, and hands each update and the prompt's result to the backend's own
subclass, which knows what its CLI means by them).

Why hand-written and not PyPI's ``agent-client-protocol`` (0.12.1, measured 2026-11-28,
docs/architecture.md): its client is an asyncio ``Connection`` that owns the process's pipes,
while here the run layer owns them (warm spares get the prefix at spawn, before any call
exists; containment, kill and time limits are the run layer's) and a backend is a sans-I/O
parser fed line by line. Its pydantic schema accepted every line of gemini 0.61.0 and copilot
1.0.102 seen here, but cost 33-45 us of CPU per line against 7-8 us for ``json.loads`` and
dict reads, and ``import acp`` took 2.1 s of CPU. What the gateway uses of ACP is small: three
requests, two kinds of request to refuse, four kinds of update.
"""
