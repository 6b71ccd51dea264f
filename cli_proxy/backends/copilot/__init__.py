"""GitHub Copilot CLI over ACP: ``copilot --acp --stdio`` (1.0.102), on the ACP client it
shares with gemini (``backends/acp/``).

Models are ``copilot/<id>``: the id goes to ``--model`` (a BYOK provider refuses to start
without one; ACP has no model selection in 1.0.102's BYOK session). Sealed by flags (no tool
at all: ``--available-tools`` with a name that is no tool, no GitHub MCP servers, no
ask-user tool, no auto-update, no client telemetry), by a private ``COPILOT_HOME`` per call
(config, logs, session state and copilot-instructions.md die with the call) and by a ``.git``
file in the work dir (no AGENTS.md, CLAUDE.md or .github/copilot-instructions.md of an
ancestor). One package cache (``COPILOT_CACHE_HOME``) is shared by every call.

Logins: ``COPILOT_GITHUB_TOKEN`` / ``GH_TOKEN`` / ``GITHUB_TOKEN``, BYOK
(``COPILOT_PROVIDER_*``, passed unchanged), or the user's stored ``copilot login`` linked
into the private home. Copilot reports upstream failures as answer text ("Error: ...") after
its own retries: the parser reads them into the gateway's failures.

The folder: ``backend.py`` (argv, env, homes, cache), ``parser.py`` (the session),
``login.py`` (which login serves).
"""
