"""The Claude Code backend: argv, sealed environment, prompt encoding (one stream-json stdin
line), options."""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

from pydantic import SecretStr

from cli_proxy.backends.base import (
    Backend,
    BackendOptions,
    LaunchOptions,
    LoginState,
)
from cli_proxy.backends.claude.login import claude_credentials, claude_login
from cli_proxy.backends.claude.parser import ClaudeParser
from cli_proxy.backends.system_prompt import MINIMAL_SYSTEM_PROMPT, SystemPrompt
from cli_proxy.plan.prompt import Prompt
from cli_proxy.protocol import ChatCompletionRequest
from cli_proxy.run.logins import Login

# OpenAI reasoning levels -> ``claude --effort`` (low, medium, high, xhigh, max). claude has no
# level without thinking in --effort; "none" and "minimal" take its lowest.
CLAUDE_EFFORT = {
    "none": "low",
    "minimal": "low",
    "low": "low",
    "medium": "medium",
    "high": "high",
    "xhigh": "xhigh",
}

SEALED_ENV = {
    "CLAUDE_CODE_DISABLE_ATTACHMENTS": "1",
    "CLAUDE_CODE_DISABLE_CLAUDE_MDS": "1",
    "CLAUDE_CODE_DISABLE_AUTO_MEMORY": "1",
}


class ClaudeOptions(BackendOptions):
    bin: str = "claude"
    system_prompt: SystemPrompt = "cli"
    """``cli`` (default): claude's own agent prompt, which subscription billing reportedly
    expects (docs/security.md); ``minimal``: the gateway's short neutral one
    (``CLI_PROXY_CLAUDE__SYSTEM_PROMPT=minimal``), ~12 kB less upstream per call."""
    oauth_token: SecretStr | None = None
    """A long-lived claude.ai inference token (``claude setup-token``;
    ``CLI_PROXY_CLAUDE__OAUTH_TOKEN``), handed to the CLI as ``CLAUDE_CODE_OAUTH_TOKEN``.
    It is never refreshed and no credential file is read or written: the login for a
    gateway that runs unattended (docs/configuration.md)."""


class ClaudeBackend(Backend):
    name = "claude"
    options_model = ClaudeOptions
    model_prefixes = ("claude-",)
    aliases = ("sonnet", "opus", "haiku")
    home_paths = (".claude", ".claude.json", ".config/claude")
    accepts_images = True  # stream-json image blocks, in place
    # measured (bench/capacity.py, docs/performance.md): 152 MiB at rest, 193 mid-call,
    # ~300 for a moment while it starts
    resident_mib = 250
    at_rest_mib = 150
    login_files = (".claude/.credentials.json",)
    login_vars = ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN")
    login_how = "run `claude` and /login, or set ANTHROPIC_API_KEY"
    known_models = (
        "claude-sonnet-4-6",
        "claude-opus-4-6",
        "claude-haiku-4-5",
        "sonnet",
        "opus",
        "haiku",
    )
    env_allow = (
        "ANTHROPIC_*",
        "CLAUDE_CODE_*",
        "CLAUDE_CONFIG_DIR",
        "DISABLE_*",
        "MAX_THINKING_TOKENS",
        "API_TIMEOUT_MS",
    )
    nesting_vars: ClassVar[frozenset[str]] = frozenset(
        {
            "CLAUDECODE",
            "CLAUDE_CODE_ENTRYPOINT",
            "CLAUDE_CODE_SSE_PORT",
            "CLAUDE_AGENT_SDK_VERSION",
            "CLAUDE_CODE_SESSION_ID",
            "TERM_PROGRAM_VERSION",
        }
    )

    def argv(self, launch: LaunchOptions) -> list[str]:
        argv = [
            *self.command,
            "-p",
            # The prompt arrives as one user message of content blocks (encode_prompt): in
            # this mode claude never expands @path mentions into file reads (it does in plain
            # text mode, even with --tools ""), and it waits for input with no time limit.
            "--input-format",
            "stream-json",
            "--output-format",
            "stream-json",
            "--verbose",
            f"--model={launch.model}",  # one word: no model name can be read as an option
            # The model must never act on the host: no built-in tools, no MCP servers.
            "--tools",
            "",
            "--strict-mcp-config",
            # No CLAUDE.md from the user's memory or any parent dir, no user/project settings.
            "--setting-sources",
            "",
            # No transcript of the call under ~/.claude/projects.
            "--no-session-persistence",
            # cwd, platform and OS out of the system prompt (2.1.197 puts them there), so it
            # is the same for every call: the provider caches it.
            "--exclude-dynamic-system-prompt-sections",
        ]
        argv += self.system_prompt_args()
        if launch.effort is not None:
            argv += ["--effort", CLAUDE_EFFORT[launch.effort]]
        # Always: token deltas for streaming; the parser skips the whole-message copy, so a
        # non-streaming call reads the same output. The argv is then the same for both, and
        # one pre-started process serves either.
        argv.append("--include-partial-messages")
        return argv

    def system_prompt_args(self) -> list[str]:
        """``minimal``: our text replaces the agent prompt (the billing header and a one-line
        identity stay); ``--system-prompt=`` in one argument, so no text is read as a flag."""
        mode = getattr(self.options, "system_prompt", "cli")
        return [f"--system-prompt={MINIMAL_SYSTEM_PROMPT}"] if mode == "minimal" else []

    def env(self, base: Mapping[str, str]) -> dict[str, str]:
        env = super().env(base)
        env.setdefault("DISABLE_AUTOUPDATER", "1")
        env.setdefault("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
        # One retry layer: the client's. The CLI's default is 10 retries over ~3 minutes of
        # silence, and each SDK attempt would start them again (one create() with default
        # SDK retries sent 9 upstream requests); the gateway answers 429/5xx with their real
        # status and Retry-After, and the SDK retries at most twice: 3 upstream attempts.
        env.setdefault("CLAUDE_CODE_MAX_RETRIES", "0")
        # The sealed box (tests/data/real-cli/claude-sealing.md): no @path reads, even in the
        # last input block, where stream-json input still expands them; no CLAUDE.md of any
        # kind; no auto memory (13 kB of system prompt naming HOME, and a memory dir per call).
        env.update(SEALED_ENV)
        token = self.options.oauth_token if isinstance(self.options, ClaudeOptions) else None
        if token is not None:
            env["CLAUDE_CODE_OAUTH_TOKEN"] = token.get_secret_value()
        return env

    def login(self, user_home: str, env: Mapping[str, str]) -> Login | None:
        return claude_login(user_home, env)

    @classmethod
    def login_paths(cls, env: Mapping[str, str], home: Path) -> list[Path]:
        return [claude_credentials(str(home), env)]

    @classmethod
    def login_state(cls, env: Mapping[str, str], home: Path, drop: frozenset[str]) -> LoginState:
        state = super().login_state(env, home, drop)
        if state.present is False and sys.platform == "darwin":
            return LoginState(None, "no credentials file (may be in the macOS keychain)")
        return state

    def encode_prompt(self, prompt: Prompt, request: ChatCompletionRequest) -> bytes:
        """One stream-json user message whose content blocks are the prompt's blocks (a block
        with images: its text and image blocks in order, each image right after its tag), with a
        cache breakpoint on the last turn: the CLI puts its own on the last block (the
        history's close, which the next call does not repeat), so without ours the next call
        of the conversation could never read this one's prefix from the cache. The CLI sets
        two more on its system prompt: four in all, the API's maximum."""
        blocks: list[dict[str, Any]] = []
        for i in range(len(prompt.blocks)):
            for piece in prompt.pieces(i):
                blocks.append(
                    {"type": "text", "text": piece}
                    if isinstance(piece, str)
                    else {
                        "type": "image",
                        "source": {
                            "type": "base64",
                            "media_type": piece.media_type,
                            "data": piece.base64,
                        },
                    }
                )
            if i == prompt.cache_block:  # on the turn's last piece: the whole turn is cached
                blocks[-1]["cache_control"] = {"type": "ephemeral"}
        message = {"type": "user", "message": {"role": "user", "content": blocks}}
        line = json.dumps(message, ensure_ascii=False).translate(_LINE_BREAKS_ESCAPED)
        return line.encode("utf-8") + b"\n"

    def new_parser(self, prompt: Prompt, request: ChatCompletionRequest) -> ClaudeParser:
        return ClaudeParser()

    @classmethod
    def cli_version(cls, stdout_lines: Sequence[str]) -> str | None:
        """The init line (one of the first) names the version."""
        for line in stdout_lines[:3]:
            try:
                obj = json.loads(line)
            except ValueError:
                continue
            if isinstance(obj, dict) and isinstance(obj.get("claude_code_version"), str):
                return str(obj["claude_code_version"])
        return None


# JSON allows these raw in a string, but a reader that splits its input on Unicode line
# breaks (Python's str.splitlines) would cut the one stdin line in two: escaped, they are
# the same text for any JSON reader.
_LINE_BREAKS_ESCAPED = str.maketrans({"\x85": "\\u0085", "\u2028": "\\u2028", "\u2029": "\\u2029"})
