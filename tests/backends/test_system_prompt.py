"""The ``system_prompt`` backend option: ``cli`` (the CLI's own agent prompt) or ``minimal``
(the gateway's one short neutral text), per backend, part of the launch spec.

What the real binaries send upstream in each mode is tested in
tests/realcli/test_real_cli_system_prompt.py; here: the settings, argv, env and files each mode
gives, and that the modes start different processes.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from cli_proxy.backends.codex.backend import CodexBackend, CodexOptions
from cli_proxy.backends.codex.catalog import FALLBACK_CATALOG, seal_catalog
from cli_proxy.backends.gemini.backend import SYSTEM_MD
from cli_proxy.backends.registry import backend_class
from cli_proxy.backends.system_prompt import MINIMAL_SYSTEM_PROMPT
from cli_proxy.gateway import Gateway, live_backends
from cli_proxy.plan.spec import Plan
from cli_proxy.protocol import ChatCompletionRequest
from tests.conftest import CODEX_FAKE_CLI, fake_settings

MODELS = {"claude": "claude-sonnet-4-6", "gemini": "gemini-2.5-flash", "codex": "gpt-5.5"}


def plan(backend: str, mode: str | None = None) -> Plan:
    options = {backend: {"system_prompt": mode}} if mode is not None else {}
    settings = fake_settings(**options)
    gw = Gateway(settings, live_backends(settings))
    body = {"model": MODELS[backend], "messages": [{"role": "user", "content": "hi"}]}
    return gw.plan(ChatCompletionRequest.model_validate(body))


def test_the_minimal_text_is_short_neutral_and_literal() -> None:
    assert len(MINIMAL_SYSTEM_PROMPT.encode()) < 400
    names = r"claude|anthropic|gemini|google|codex|openai|gpt|cli\b|agent|shell|\bsdk"
    assert not re.search(names, MINIMAL_SYSTEM_PROMPT, re.I)
    assert "${" not in MINIMAL_SYSTEM_PROMPT  # gemini substitutes ${...} in its file
    assert "<" not in MINIMAL_SYSTEM_PROMPT  # nothing that reads as one of our XML blocks


def test_defaults_and_the_environment_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    defaults = {b: fake_settings().options_for(b).system_prompt for b in MODELS}  # type: ignore[attr-defined]
    assert defaults == {"claude": "cli", "gemini": "minimal", "codex": "minimal"}
    monkeypatch.setenv("CLI_PROXY_CLAUDE__SYSTEM_PROMPT", "minimal")
    monkeypatch.setenv("CLI_PROXY_GEMINI__SYSTEM_PROMPT", "cli")
    monkeypatch.setenv("CLI_PROXY_CODEX__SYSTEM_PROMPT", "cli")
    switched = {b: fake_settings().options_for(b).system_prompt for b in MODELS}  # type: ignore[attr-defined]
    assert switched == {"claude": "minimal", "gemini": "cli", "codex": "cli"}


@pytest.mark.parametrize("backend", sorted(MODELS))
def test_an_unknown_mode_is_refused(backend: str) -> None:
    with pytest.raises(ValueError, match="system_prompt"):
        fake_settings(**{backend: {"system_prompt": "none"}})


def test_claude_cli_mode_keeps_its_own_prompt() -> None:
    argv = plan("claude").launch.argv
    assert not [
        a for a in argv if "system-prompt" in a and a != "--exclude-dynamic-system-prompt-sections"
    ]


def test_claude_minimal_mode_replaces_it_in_one_argument() -> None:
    argv = plan("claude", "minimal").launch.argv
    assert [a for a in argv if a.startswith("--system-prompt")] == [
        f"--system-prompt={MINIMAL_SYSTEM_PROMPT}"
    ]
    assert argv[argv.index("--tools") + 1] == ""  # the seal is the same in both modes


def test_gemini_minimal_mode_reads_its_system_instruction_from_the_work_dir() -> None:
    spec = plan("gemini").launch
    assert spec.environ["GEMINI_SYSTEM_MD"] == SYSTEM_MD
    assert spec.environ["GEMINI_WRITE_SYSTEM_MD"] == "false"
    assert dict(spec.workdir_files)[SYSTEM_MD] == MINIMAL_SYSTEM_PROMPT.encode()
    assert not Path(SYSTEM_MD).is_absolute()  # read relative to the CLI's cwd: the work dir


def test_gemini_cli_mode_turns_the_override_off() -> None:
    spec = plan("gemini", "cli").launch
    assert spec.environ["GEMINI_SYSTEM_MD"] == "false"  # a .env file cannot set it either
    assert SYSTEM_MD not in dict(spec.workdir_files)


@pytest.mark.parametrize("mode", ["cli", "minimal"])
def test_gemini_never_takes_a_system_prompt_file_from_the_gateway_env(
    mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GEMINI_SYSTEM_MD", "/etc/passwd")
    monkeypatch.setenv("GEMINI_WRITE_SYSTEM_MD", "/tmp/prompt.md")
    env = plan("gemini", mode).launch.environ
    assert env["GEMINI_SYSTEM_MD"] in (SYSTEM_MD, "false")
    assert env["GEMINI_WRITE_SYSTEM_MD"] == "false"


def _codex_home(mode: str) -> dict[str, bytes]:
    options = CodexOptions(bin=f"python {CODEX_FAKE_CLI}", system_prompt=mode)  # type: ignore[arg-type]
    home = CodexBackend(options).private_home("/nonexistent")
    return dict(home.files)


def test_codex_minimal_mode_gives_our_instructions() -> None:
    files = _codex_home("minimal")
    assert files["instructions.md"] == MINIMAL_SYSTEM_PROMPT.encode()
    assert b'model_instructions_file = "instructions.md"' in files["config.toml"]
    for model in json.loads(files["catalog.json"])["models"]:
        assert model["base_instructions"] == MINIMAL_SYSTEM_PROMPT


def test_codex_cli_mode_keeps_its_own_per_model_instructions() -> None:
    files = _codex_home("cli")
    assert "instructions.md" not in files
    assert b"model_instructions_file" not in files["config.toml"]
    catalog: dict[str, Any] = {
        "models": [
            {
                "slug": "gpt-6.1-sol",
                "shell_type": "unified_exec",
                "tool_mode": "code_mode_only",
                "base_instructions": "You are Codex, a coding agent.",
                "model_messages": {"instructions_template": "You are Codex {{ personality }}"},
            }
        ]
    }
    (model,) = seal_catalog(catalog, "cli")["models"]
    assert model["base_instructions"] == "You are Codex, a coding agent."
    assert model["model_messages"] is None  # kept, codex sent the instructions twice
    assert model["shell_type"] == "disabled" and "tool_mode" not in model  # still sealed
    (entry,) = FALLBACK_CATALOG["models"]  # codex refuses an entry without instructions
    assert entry["base_instructions"] == MINIMAL_SYSTEM_PROMPT


@pytest.mark.parametrize("backend", sorted(MODELS))
def test_each_mode_is_its_own_launch_spec(backend: str) -> None:
    """Warm spares key on the launch spec: a spare of one mode never serves the other, and
    calls of one mode share spares."""
    cli, minimal = plan(backend, "cli").launch, plan(backend, "minimal").launch
    assert cli != minimal
    assert plan(backend, "minimal").launch == minimal
    default = backend_class(backend).options_model.model_fields["system_prompt"].default
    assert plan(backend).launch == (cli if default == "cli" else minimal)
