"""Gemini CLI over ACP: ``gemini --acp``, the Agent Client Protocol (JSON-RPC 2.0, one message
per line on stdin/stdout).

Why ACP and not ``--output-format stream-json``: the prompt goes in as content blocks, so
images reach the model in place (``inlineData`` between the text parts), and the answer comes
back with thoughts apart (``agent_thought_chunk``), a stop reason and usage. The sequence
(measured on 0.61.0, tests/data/real-cli/gemini-acp-*.md):

    -> initialize, session/new {cwd: "."}     (the warm prefix: a spare has done both)
    <- results: protocol, then {sessionId}
    -> session/prompt {sessionId, prompt: [text | image blocks]}   (sent by the parser)
    <- session/update notifications: agent_thought_chunk, agent_message_chunk ...
    <- the prompt's result {stopReason, _meta.quota.token_count} or a JSON-RPC error
       whose code is the upstream HTTP status (401, 429, 503; 500 for the rest)

Then stdin is closed and the CLI exits (~0.5 s). A "Login with Google" whose refresh is
refused never reaches the protocol: the CLI starts its interactive login instead, printing
the authorization URL on stdout before any JSON-RPC answer, then reads a code from stdin and
waits there (capture gemini-0.61.0-acp-refresh-invalid-grant): that line ends the call as
``login_expired``. A Google login that Code Assist refuses as ineligible (every personal
account since 2026-06-18: ``UNSUPPORTED_CLIENT``) comes back as the ``session/new`` error
(-32000) whose message is Google's reason (capture gemini-0.61.0-code-assist-ineligible): the
call fails as ``cli_auth_failed``, its message naming what still works (``login.py``). A
request from the CLI is never granted:
``session/request_permission`` is answered ``cancelled``, anything else with a JSON-RPC
error. The seal is the workspace settings (no core tools): with a tool enabled, 0.61.0 ran
``run_shell_command`` and ``write_file`` without asking permission at all, so a tool that
starts or completes ends the call as a failure.

Quota: 0.61.0 says nothing of it over ACP (the Code Assist quota it fetches with a Google
login stays inside the CLI, tests/data/real-cli/gemini-0.61.0-quota.md). What reaches stdout
is a model's answer or its 429 and that error's text: read into the model's quota state
(``RateLimit``, its window the model), the wait and the message (``quota_failure``).

The folder: ``backend.py`` (argv, settings, private home), ``parser.py`` (reading the
session, on the ACP client it shares with copilot: ``backends/acp/``), ``quota.py`` (a 429's
text), ``login.py`` (the Google login).
"""
