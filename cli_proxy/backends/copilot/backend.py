"""The GitHub Copilot CLI backend: argv, sealed private home and work dir, shared package
cache, options."""

from __future__ import annotations

import os
import subprocess
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

from cli_proxy.backends.acp.rpc import ACP_PREFIX, agent_version, prompt_blocks
from cli_proxy.backends.base import Backend, BackendOptions, LaunchOptions, LoginState
from cli_proxy.backends.copilot import models as reported
from cli_proxy.backends.copilot.login import BYOK_VAR, LOGIN_FILE, TOKEN_VARS
from cli_proxy.backends.copilot.parser import CopilotParser
from cli_proxy.plan.prompt import Prompt
from cli_proxy.plan.spec import PrivateHome
from cli_proxy.protocol import ChatCompletionRequest

NO_TOOL = "none-offered-by-cli-proxy"
"""``--available-tools`` takes an allowlist: one name that is no tool leaves the model none,
whatever tools a later version adds (``--excluded-tools`` would have to name them all).
Copilot then says "Info: Unknown tool name in the tool allowlist" (kept from the client)."""

SEAL_FLAGS = (
    "--disable-builtin-mcps",  # no GitHub MCP servers (their tools)
    "--no-ask-user",  # no ask_user tool
    "--no-auto-update",  # no update check or download (without it: a lookup of api.github.com)
    "--disable-client-telemetry",
)

GIT_FILE = (".git", b"gitdir: /nonexistent\n")
"""A ``.git`` file makes the work dir its own git root: copilot reads AGENTS.md, CLAUDE.md and
.github/copilot-instructions.md of the git root and the cwd, and without it an ancestor
repository's reached the model (``--no-custom-instructions`` is ignored with ``--acp``;
tests/data/real-cli/copilot-1.0.102-seal.md). An empty ``.git`` directory does not stop it."""

# OpenAI reasoning levels -> ``--reasoning-effort`` (copilot takes the same names, and max)
COPILOT_EFFORT = {
    "none": "none",
    "minimal": "minimal",
    "low": "low",
    "medium": "medium",
    "high": "high",
    "xhigh": "xhigh",
}


def default_cache_dir() -> str:
    """The gateway's cache, shared by every call: copilot extracts ~235 MB into it once."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "cli-proxy", "copilot")


class CopilotOptions(BackendOptions):
    bin: str = "copilot"
    cache_dir: str | None = None
    """Copilot's package cache (``COPILOT_CACHE_HOME``), shared by all calls and read-only in
    the sandbox (``CLI_PROXY_COPILOT__CACHE_DIR``); default ``~/.cache/cli-proxy/copilot``."""


class CopilotBackend(Backend):
    name = "copilot"
    options_model = CopilotOptions
    # no bare prefix: copilot serves claude-, gpt- and gemini- models, which route to their
    # own CLIs; ``copilot/<id>`` picks copilot
    known_models = ("copilot/claude-sonnet-4.6", "copilot/gpt-5.5")
    """Listed when copilot reports no models (BYOK, no login, a failed probe); with a GitHub
    login ``/v1/models`` lists what copilot reports (``models.py``)."""
    # measured on 1.0.102 with ``bench/capacity.py --only sizes`` (2026-11-28, two runs, BYOK
    # to the fake, RSS summed over the bwrap tree: bwrap, launcher, node loader, native
    # binary; docs/performance.md): 359-360 MiB with the session open, 378-380 MiB mid-call
    # (an earlier one-off psutil script: 304-353 / 323-372 MiB, two processes, no sandbox)
    resident_mib = 380
    at_rest_mib = 360
    login_vars = (*TOKEN_VARS, BYOK_VAR)
    login_how = (
        "run `copilot login`, or set COPILOT_GITHUB_TOKEN, or COPILOT_PROVIDER_BASE_URL (BYOK)"
    )
    warm_prefix = ACP_PREFIX
    duplex = True
    accepts_images = True  # ACP image blocks (appended after the text upstream, see docs)
    env_allow = (*TOKEN_VARS, "COPILOT_PROVIDER_*", "GH_HOST", "COPILOT_GH_HOST")
    nesting_vars: ClassVar[frozenset[str]] = frozenset()

    _extracted: ClassVar[set[tuple[str, ...]]] = set()
    _extract_lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._probes: set[subprocess.Popen[bytes]] = set()  # model probes running

    @property
    def cache_dir(self) -> str:
        configured = self.options.cache_dir if isinstance(self.options, CopilotOptions) else None
        return configured or default_cache_dir()

    def argv(self, launch: LaunchOptions) -> list[str]:
        argv = [
            *self.command,
            "--acp",
            "--stdio",
            f"--model={launch.model}",  # one word: no model name can be read as an option
            f"--available-tools={NO_TOOL}",
            *SEAL_FLAGS,
        ]
        if launch.effort is not None:
            argv.append(f"--reasoning-effort={COPILOT_EFFORT[launch.effort]}")
        return argv

    def env(self, base: Mapping[str, str]) -> dict[str, str]:
        env = super().env(base)
        env["COPILOT_AUTO_UPDATE"] = "false"
        env["COPILOT_CACHE_HOME"] = self.cache_dir
        env["NO_COLOR"] = "1"
        if env.get(BYOK_VAR):
            # a provider of the user's own: no GitHub call at all (auth, telemetry, MCP)
            env["COPILOT_OFFLINE"] = "true"
        return env

    def workdir_files(self, launch: LaunchOptions) -> tuple[tuple[str, bytes], ...]:
        return (GIT_FILE,)

    def read_paths(self) -> tuple[str, ...]:
        cache = self.cache_dir
        return (cache,) if os.path.isdir(cache) else ()

    def private_home(self, user_home: str) -> PrivateHome:
        """COPILOT_HOME holds config, logs, session state (the whole conversation), plugins
        and ``copilot-instructions.md`` (sent to the model): a fresh one per call, with the
        user's stored login linked when no token or provider of the environment replaces
        it. HOME is the same directory (copilot keeps a device id under ~/.cache)."""
        real = Path(user_home) / ".copilot" / LOGIN_FILE
        login: tuple[tuple[str, str], ...] = ()
        if real.is_file() and not self._env_login():
            login = ((LOGIN_FILE, str(real)),)
        return PrivateHome(env=("HOME", "COPILOT_HOME"), files=(), login=login)

    def _env_login(self) -> bool:
        return any(
            os.environ.get(var) and var not in self.drop_env for var in (*TOKEN_VARS, BYOK_VAR)
        )

    @classmethod
    def login_state(cls, env: Mapping[str, str], home: Path, drop: frozenset[str]) -> LoginState:
        for var in cls.login_vars:
            if env.get(var) and var not in drop:
                return LoginState(True, f"${var} set")
        stored = home / ".copilot" / LOGIN_FILE
        if stored.is_file():
            return LoginState(
                None,
                f"~/.copilot/{LOGIN_FILE} (a `copilot login` kept there in plaintext serves; "
                "one in the system keychain does not reach the sandbox)",
            )
        return LoginState(False, f"none: {cls.login_how}")

    def warm_up(self) -> None:
        """Copilot's first start extracts its ~235 MB package into the cache (1.5-6 s): done
        once here, on the host, so every call (sandboxed: the cache is read-only there) finds
        it ready."""
        self._extract()
        self._probe_models()

    def _extract(self) -> None:
        key = (*self.command, self.cache_dir)
        with self._extract_lock:
            if key in self._extracted:
                return
            os.makedirs(self.cache_dir, mode=0o700, exist_ok=True)
            env = {**self.env(os.environ), "HOME": self.cache_dir}
            env.pop("COPILOT_HOME", None)
            try:
                subprocess.run(
                    [*self.command, "--version"],
                    env=env,
                    cwd=self.cache_dir,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    timeout=120,
                    check=False,
                )
            except (OSError, subprocess.SubprocessError):
                return  # a missing binary is reported by the call itself
            self._extracted.add(key)

    def _models_key(self) -> tuple[object, ...] | None:
        """(binary, login) of the model list; None under BYOK, where copilot lists none."""
        env = self.env(os.environ)
        if env.get(BYOK_VAR):
            return None
        stored = Path(os.path.expanduser("~")) / ".copilot" / LOGIN_FILE
        path_env = os.environ.get("PATH", os.defpath)
        return (
            *reported.binary_key(self.command, path_env),
            *reported.login_key(env, TOKEN_VARS, stored),
        )

    def _probe_models(self) -> None:
        """Once per binary and login, in the background (a call never waits for it): a
        sealed copilot opens a session and reports its models (the GitHub calls copilot
        makes at every session start; no model request)."""
        key = self._models_key()
        if key is None or not reported.claim(key):
            return
        home = self.private_home(os.path.expanduser("~"))
        argv = [*self.command, "--acp", "--stdio", f"--available-tools={NO_TOOL}", *SEAL_FLAGS]
        env = self.env(os.environ)

        def run() -> None:
            reported.remember(key, reported.probe(argv, env, home.login, self._probes))

        threading.Thread(target=run, name="copilot-models", daemon=True).start()

    def close(self) -> None:
        reported.stop(self._probes)

    def models(self) -> tuple[str, ...]:
        key = self._models_key()
        ids = reported.cached(key) if key is not None else None
        return tuple(f"copilot/{i}" for i in ids) if ids else self.known_models

    def encode_prompt(self, prompt: Prompt, request: ChatCompletionRequest) -> bytes:
        """Only the session set-up; the parser sends the prompt once the session is open."""
        return self.warm_prefix

    def new_parser(self, prompt: Prompt, request: ChatCompletionRequest) -> CopilotParser:
        return CopilotParser(prompt_blocks(prompt), request.model)

    @classmethod
    def cli_version(cls, stdout_lines: Sequence[str]) -> str | None:
        return agent_version(stdout_lines)
