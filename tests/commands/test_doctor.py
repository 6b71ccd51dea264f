"""``cli-proxy doctor`` in each state a newcomer meets: no CLI, a CLI without login, ready,
no bubblewrap. Each runs the real command in a child process with its own PATH and HOME
(the fake CLIs of tests/fakes/fake_cli.py stand in for the binaries)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cli_proxy.backends.checks import login_state, npm_version, pinned_clis
from cli_proxy.run.containment import BwrapLauncher
from tests.conftest import CODEX_FAKE_CLI, FAKE_CLI, FAKE_PY

ROOT = Path(__file__).resolve().parents[2]
FAKES = [
    "--claude-bin",
    f"{FAKE_PY} {FAKE_CLI} claude",
    "--gemini-bin",
    f"{FAKE_PY} {FAKE_CLI} gemini",
    "--codex-bin",
    f"{FAKE_PY} {CODEX_FAKE_CLI}",
]
SECRET = "sk-ant-doctor-must-never-print-this"


def tool_dir(tmp_path: Path, *, bwrap: bool) -> Path:
    """A PATH with no CLI on it: only what containment needs (``true`` for bwrap's probe)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for tool in ("true", "setpriv", *(("bwrap",) if bwrap else ())):
        found = shutil.which(tool)
        if found and not (bin_dir / tool).exists():
            (bin_dir / tool).symlink_to(found)
    return bin_dir


def doctor(
    tmp_path: Path, *args: str, bwrap: bool = True, **env: str
) -> tuple[int, str, dict[str, str]]:
    """Run ``cli-proxy doctor``; its exit status, its output and its lines by first word."""
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    base = {"PATH": str(tool_dir(tmp_path, bwrap=bwrap)), "HOME": str(home), "LANG": "C.UTF-8"}
    done = subprocess.run(
        [sys.executable, "-m", "cli_proxy", "doctor", *args],
        env={**base, **env},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.stderr == ""
    lines = {ln.split(" ", 1)[0]: ln for ln in done.stdout.splitlines()[1:]}
    return done.returncode, done.stdout, lines


def test_no_cli_on_path(tmp_path: Path) -> None:
    status, _, lines = doctor(tmp_path)
    assert status == 1
    for name in ("claude", "gemini", "codex"):
        pin = pinned_clis()[name]
        assert re.match(rf"{name} +missing +`{name}` not found on PATH", lines[name])
        assert f"npm install -g {pin.npm}@{pin.version}" in lines[name]
    assert "SERVED, no CLI is found (replay mode)" in lines["fixtures"]
    assert str(ROOT / "fixtures") in lines["fixtures"]
    assert lines["result"].endswith("no backend can serve (of claude, gemini, codex, copilot)")


def test_cli_without_login(tmp_path: Path) -> None:
    status, _, lines = doctor(tmp_path, *FAKES)
    assert status == 1
    assert re.match(r"claude +no login ", lines["claude"])
    assert "2.1.197-fake (untested: the tests pin 2.1.197)" in lines["claude"]
    assert "login: none: run `claude` and /login, or set ANTHROPIC_API_KEY" in lines["claude"]
    assert "login: none: run `codex login`, or set CODEX_API_KEY" in lines["codex"]
    assert "not served (a CLI is found" in lines["fixtures"]
    assert "no backend can serve" in lines["result"]


def test_ready(tmp_path: Path) -> None:
    creds = tmp_path / "home" / ".claude" / ".credentials.json"
    creds.parent.mkdir(parents=True)
    creds.write_text(json.dumps({"claudeAiOauth": {"accessToken": SECRET}}))
    status, out, lines = doctor(tmp_path, *FAKES, GEMINI_API_KEY=SECRET)
    assert status == 0
    assert re.match(r"claude +ready ", lines["claude"])
    assert "login: ~/.claude/.credentials.json" in lines["claude"]
    assert re.match(r"gemini +ready .*login: \$GEMINI_API_KEY set$", lines["gemini"])
    assert re.match(r"codex +no login ", lines["codex"])
    assert lines["result"].endswith("2 of 4 backends can serve: claude, gemini")
    # the warm pool's worst case: 4 spares of the biggest ready CLI (gemini, ~210 MiB)
    assert "at most ~840 MiB RSS" in lines["warm"]
    assert SECRET not in out


def google_login(home: Path, auth: str | None = "oauth-personal") -> None:
    """A "Login with Google" in ``home`` (``auth``: the settings' ``selectedType``)."""
    gemini = home / ".gemini"
    gemini.mkdir(parents=True, exist_ok=True)
    (gemini / "oauth_creds.json").write_text(json.dumps({"refresh_token": SECRET}))
    if auth is not None:
        settings = {"security": {"auth": {"selectedType": auth}}}
        (gemini / "settings.json").write_text(json.dumps(settings))


def test_a_personal_google_login_alone_is_warned_of(tmp_path: Path) -> None:
    """Since 2026-06-18 Code Assist refuses the Gemini CLI for personal Google accounts: with
    only such a login, doctor says so under gemini's line and names what still works."""
    google_login(tmp_path / "home")
    status, out, lines = doctor(tmp_path, *FAKES)
    assert status == 0 and re.match(
        r"gemini +ready .*login: ~/.gemini/oauth_creds.json$", lines["gemini"]
    )
    rows = out.splitlines()
    warning = rows[rows.index(lines["gemini"]) + 1]
    assert re.match(r" +warning +only a Google login and no key: since 2026-06-18", warning)
    for works in ("GEMINI_API_KEY", "Vertex AI", "Standard or Enterprise", "copilot/gemini-"):
        assert works in warning, warning
    assert SECRET not in out


@pytest.mark.parametrize(
    ("auth", "env"),
    [
        ("gemini-api-key", {"GEMINI_API_KEY": SECRET}),
        (None, {"GEMINI_API_KEY": SECRET}),  # no auth type selected: gemini takes the key
        ("vertex-ai", {"GOOGLE_GENAI_USE_VERTEXAI": "true", "GOOGLE_API_KEY": SECRET}),
        ("oauth-personal", {"GOOGLE_CLOUD_PROJECT": "my-project"}),  # Code Assist Standard
    ],
)
def test_a_key_or_a_code_assist_project_is_not_warned_of(
    tmp_path: Path, auth: str | None, env: dict[str, str]
) -> None:
    google_login(tmp_path / "home", auth)
    _, out, _ = doctor(tmp_path, *FAKES, **env)
    assert "warning" not in out and SECRET not in out


def test_a_key_that_a_selected_google_login_ignores_is_warned_of(tmp_path: Path) -> None:
    """Over ACP gemini authenticates as the settings select: with Login with Google selected,
    GEMINI_API_KEY is ignored and the personal login refused all the same (measured on
    0.61.0), so the key alone does not take the warning away."""
    google_login(tmp_path / "home")
    _, out, _ = doctor(tmp_path, *FAKES, GEMINI_API_KEY=SECRET)
    (warning,) = [ln for ln in out.splitlines() if re.match(r" +warning ", ln)]
    assert "GEMINI_API_KEY set, but ~/.gemini/settings.json selects Login with Google" in warning
    assert "selectedType" in warning and "gemini-api-key" in warning
    assert SECRET not in out


@pytest.mark.parametrize(
    ("auth", "env", "warned"),
    [
        ("oauth-personal", {}, True),
        (None, {}, True),  # no auth type and no key: nothing gemini can serve with
        ("gemini-api-key", {}, False),
        ("vertex-ai", {}, False),
        ("oauth-personal", {"GOOGLE_CLOUD_PROJECT_ID": "p"}, False),
        ("oauth-personal", {"GEMINI_API_KEY": "k"}, True),  # ignored: Google login selected
        (None, {"GOOGLE_API_KEY": "k"}, False),
        (None, {"GOOGLE_GENAI_USE_VERTEXAI": "false"}, True),
    ],
)
def test_gemini_login_state_warning(
    tmp_path: Path, auth: str | None, env: dict[str, str], warned: bool
) -> None:
    google_login(tmp_path, auth)
    state = login_state("gemini", env, tmp_path, frozenset())
    assert state.present and state.detail == "~/.gemini/oauth_creds.json"
    assert (state.warning is not None) is warned, state
    # a variable the gateway drops is not given to gemini: it takes no warning away
    dropped = login_state(
        "gemini", {"GOOGLE_CLOUD_PROJECT": "p"}, tmp_path, frozenset({"GOOGLE_CLOUD_PROJECT"})
    )
    assert (dropped.warning is not None) is (auth in (None, "oauth-personal"))
    assert login_state("gemini", {}, tmp_path / "nobody", frozenset()).warning is None


def test_a_key_the_gateway_drops_is_no_login(tmp_path: Path) -> None:
    status, _, lines = doctor(
        tmp_path, *FAKES, ANTHROPIC_API_KEY=SECRET, CLI_PROXY_DROP_ENV="ANTHROPIC_API_KEY"
    )
    assert status == 1 and re.match(r"claude +no login ", lines["claude"])


def test_no_bubblewrap(tmp_path: Path) -> None:
    _, _, lines = doctor(tmp_path, bwrap=False)
    line = lines["containment"]
    assert line.startswith("containment pdeathsig fallback (no usable bubblewrap")
    assert "prompt caching" in line and "kill -9" in line and "apt-get install bubblewrap" in line


def test_pdeathsig_asked_for(tmp_path: Path) -> None:
    _, _, lines = doctor(tmp_path, CLI_PROXY_LAUNCHER="pdeathsig")
    assert lines["containment"].startswith("containment pdeathsig fallback (launcher=pdeathsig")


@pytest.mark.skipif(not BwrapLauncher.available(), reason="bubblewrap cannot run here")
def test_bubblewrap_in_force(tmp_path: Path) -> None:
    _, _, lines = doctor(tmp_path)
    assert lines["containment"].startswith("containment bwrap: PID namespace")


def test_version_of_an_npm_install_is_read_from_its_package(tmp_path: Path) -> None:
    """The npm layout (node_modules/.bin/gemini -> ../@google/gemini-cli/bundle/gemini.js):
    the version comes from package.json, without starting Node."""
    pin = pinned_clis()["gemini"]
    package = tmp_path / "node_modules" / "@google" / "gemini-cli"
    (package / "bundle").mkdir(parents=True)
    script = package / "bundle" / "gemini.js"
    script.write_text("#!/bin/sh\nexit 3\n")
    script.chmod(0o755)
    (package / "package.json").write_text(
        json.dumps({"name": pin.npm, "version": pin.version, "bin": {"gemini": "bundle/gemini.js"}})
    )
    bin_dir = tmp_path / "node_modules" / ".bin"
    bin_dir.mkdir()
    (bin_dir / "gemini").symlink_to(Path("..") / "@google" / "gemini-cli" / "bundle" / "gemini.js")
    assert npm_version(str(bin_dir / "gemini")) == pin.version
    _, _, lines = doctor(
        tmp_path,
        "--backends",
        "gemini",
        PATH=f"{bin_dir}{os.pathsep}{tool_dir(tmp_path, bwrap=False)}",
    )
    assert f"{pin.version} (tested)" in lines["gemini"]
    assert npm_version(sys.executable) is None


def test_pins_are_the_makefiles() -> None:
    """One list of tested releases: the Makefile includes the file doctor reads."""
    assert "include cli_proxy/pinned-clis.mk" in (ROOT / "Makefile").read_text()
    pins = pinned_clis()
    assert set(pins) == {"claude", "gemini", "codex", "copilot"}
    assert all(re.fullmatch(r"\d+\.\d+\.\d+", p.version) and p.npm for p in pins.values())


def test_login_state_names_the_place_never_the_secret(tmp_path: Path) -> None:
    (tmp_path / ".codex").mkdir()
    (tmp_path / ".codex" / "auth.json").write_text(SECRET)
    state = login_state("codex", {}, tmp_path, frozenset())
    assert state.present and state.detail == "~/.codex/auth.json"
    config = tmp_path / "claude-config"
    config.mkdir()
    (config / ".credentials.json").write_text(SECRET)
    state = login_state("claude", {"CLAUDE_CONFIG_DIR": str(config)}, tmp_path, frozenset())
    assert state.present and state.detail == "~/claude-config/.credentials.json"
    assert login_state("nobody", {}, tmp_path, frozenset()).present is None


def test_a_hanging_version_is_killed_with_its_children(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A CLI whose ``--version`` hangs (a launcher that started its real binary) costs doctor
    its bounded wait; nothing it started is left running."""
    import psutil

    from cli_proxy.backends import checks as doctor_module

    pid_file = tmp_path / "child.pid"
    script = tmp_path / "hangs"
    script.write_text(f"#!/bin/sh\nsleep 60 &\necho $! > {pid_file}\nsleep 60\n")
    script.chmod(0o755)
    monkeypatch.setattr(doctor_module, "VERSION_TIMEOUT_S", 0.5)
    assert doctor_module.run_version([str(script)], {"PATH": os.defpath}) is None
    try:
        child = psutil.Process(int(pid_file.read_text()))
    except psutil.NoSuchProcess:
        return
    psutil.wait_procs([child], timeout=5)
    with contextlib.suppress(psutil.NoSuchProcess):
        assert not child.is_running() or child.status() == psutil.STATUS_ZOMBIE


def test_capacity_line_says_the_bounds_in_force(tmp_path: Path) -> None:
    """The bounds the gateway would apply here: derived from the memory by default, the
    setting when one is given, and an upstream account's cap."""
    _, _, lines = doctor(tmp_path, CLI_PROXY_CLI_MEMORY_BUDGET_MIB="2000")
    # 2000 MiB over the largest enabled CLI (copilot, 380 MiB): 5
    assert re.match(
        r"capacity +5 CLI processes at once, calls and spares \(from 2000 MiB", lines["capacity"]
    )
    _, _, lines = doctor(
        tmp_path, CLI_PROXY_MAX_CONCURRENCY="3", CLI_PROXY_CLAUDE__MAX_CONCURRENCY="2"
    )
    assert "3 CLI processes at once, calls and spares (max_concurrency)" in lines["capacity"]
    assert "claude at most 2" in lines["capacity"]
