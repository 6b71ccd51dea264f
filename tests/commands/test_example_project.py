"""examples/weather-agent, as its users would run it (issue 31's "Done when").

``test_the_committed_fixtures_replay_offline`` runs everywhere: the example's own committed
recordings, replayed with no CLI on PATH, a fresh HOME and another API key.

``test_the_recording_workflow_with_the_real_clis`` needs the real claude CLI (``make
real-clis``; skipped with a note otherwise) and drives the whole workflow against the fake
model API on loopback: record with ``once``, replay offline with no CLI on PATH, add a test
and record it with ``new_episodes`` (the other test's files byte-identical), re-record with
``all`` (same file names), a miss with its diff, the unused report, and no planted secret
in any fixture. Each step is a real ``pytest`` run in a copy of the example.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.realcli.test_real_cli import real_cli_dir

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "weather-agent"
FAKE_API = ROOT / "tests" / "fakes" / "fake_model_api.py"
VENV_BIN = Path(sys.executable).parent

PLANTED = {
    "ANTHROPIC_API_KEY": "sk-ant-api03-PLANTED" + "x" * 24,  # the CLI's own key
    "WEATHER_API_KEY": "planted-weather-key-0123456789",  # rides in the tool's result
}
NEW_TEST = """

def test_rome(cli_proxy_client: Any) -> None:
    question = scripted("And in Rome?", tool_call("get_weather", city="Rome"))
    tool = service_then(reply("18 °C and clear in Rome too."))
    assert weather_agent.run(cli_proxy_client, question, tool) == "18 °C and clear in Rome too."
"""


def copy_example(dest: Path, with_fixtures: bool) -> Path:
    ignore = shutil.ignore_patterns(
        "__pycache__", ".pytest_cache", *(() if with_fixtures else ("cli-fixtures",))
    )
    shutil.copytree(EXAMPLE, dest, ignore=ignore)
    return dest


def offline_env(home: Path) -> dict[str, str]:
    """No CLI on PATH (only the venv's python and the system's basics), a fresh HOME, a
    rotated weather key: what a CI job without any subscription has."""
    home.mkdir(parents=True, exist_ok=True)
    return {
        "PATH": f"{VENV_BIN}:/usr/bin:/bin",
        "HOME": str(home),
        "LANG": "C.UTF-8",
        "WEATHER_API_KEY": "rotated-weather-key-9876543210",
        "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",  # start-up time; the plugin is named below
    }


def pytest_in(project: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    argv = [
        sys.executable,
        "-m",
        "pytest",
        "-p",
        "cli_proxy.replay.plugin",
        "-p",
        "no:cacheprovider",
    ]
    return subprocess.run(
        [*argv, *args], cwd=project, env=env, capture_output=True, text=True, timeout=400
    )


def tree(root: Path) -> dict[str, str]:
    return {
        p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*.json"))
    }


def test_the_committed_fixtures_replay_offline(tmp_path: Path) -> None:
    project = copy_example(tmp_path / "weather-agent", with_fixtures=True)
    before = tree(project / "tests" / "cli-fixtures")
    assert before, "examples/weather-agent/tests/cli-fixtures has no recordings"
    env = offline_env(tmp_path / "elsewhere")
    assert shutil.which("claude", path=env["PATH"]) is None
    run = pytest_in(project, env)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "1 passed" in run.stdout and "unused" not in run.stdout
    assert tree(project / "tests" / "cli-fixtures") == before  # replay writes nothing


CLI_DIR = real_cli_dir(("claude",))


@pytest.fixture
def fake_model_api(tmp_path: Path) -> Iterator[str]:
    out = tmp_path / "fake_api.stdout"
    with out.open("wb") as fh:
        proc = subprocess.Popen(
            [sys.executable, str(FAKE_API), "--host", "127.0.0.1", "--port", "0"],
            stdout=fh,
            stderr=subprocess.DEVNULL,
            stdin=subprocess.DEVNULL,
        )
    try:
        deadline = time.monotonic() + 30
        while not out.read_text().startswith("http") and time.monotonic() < deadline:
            time.sleep(0.05)
        yield out.read_text().splitlines()[0].strip()
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.mark.realcli
@pytest.mark.timeout(900)
@pytest.mark.skipif(
    CLI_DIR is None,
    reason="the real claude CLI is not installed ($CLI_PROXY_REAL_CLI_DIR or .cli/; `make "
    "real-clis` installs it): the recording half of the example is skipped, the offline "
    "replay half still runs",
)
def test_the_recording_workflow_with_the_real_clis(tmp_path: Path, fake_model_api: str) -> None:
    assert CLI_DIR is not None
    project = copy_example(tmp_path / "weather-agent", with_fixtures=False)
    fixtures = project / "tests" / "cli-fixtures"
    home = tmp_path / "home"
    home.mkdir()
    record_env = {
        "PATH": f"{CLI_DIR}:{VENV_BIN}:/usr/bin:/bin",
        "HOME": str(home),
        "LANG": "C.UTF-8",
        "ANTHROPIC_BASE_URL": fake_model_api,
        "DISABLE_TELEMETRY": "1",
        "CLAUDE_CODE_MAX_RETRIES": "0",
        "CLI_PROXY_CLAUDE_BIN": str(CLI_DIR / "claude"),
        "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
        **PLANTED,
    }
    steps: list[str] = []

    def step(name: str, run: subprocess.CompletedProcess[str], ok: bool = True) -> str:
        out = run.stdout + run.stderr
        assert (run.returncode == 0) == ok, f"{name}:\n{out}"
        summary = out.split("cli-proxy fixtures")[-1].strip().splitlines()
        steps.append(f"{name}: exit {run.returncode}; {' | '.join(summary[1:4])}")
        return out

    # 1. record with once: the test has no fixtures yet
    step("once", pytest_in(project, record_env, "--cli-proxy-record-mode=once"))
    first = tree(fixtures)
    assert {Path(n).parent.as_posix() for n in first} == {"test_weather/test_paris"}
    assert len(first) == 2  # the tool call, then the answer

    # 2. replay offline: no CLI on PATH, another HOME, a rotated key
    env = offline_env(tmp_path / "ci-home")
    assert shutil.which("claude", path=env["PATH"]) is None
    out = step("replay offline", pytest_in(project, env))
    assert "1 passed" in out and tree(fixtures) == first

    # 3. a new test, recorded with new_episodes: the other test's files byte-identical
    test_file = project / "tests" / "test_weather.py"
    test_file.write_text(test_file.read_text() + NEW_TEST)
    step("new_episodes", pytest_in(project, record_env, "--cli-proxy-record-mode=new_episodes"))
    second = tree(fixtures)
    assert {k: v for k, v in second.items() if k in first} == first
    assert {Path(n).parent.as_posix() for n in second if n not in first} == {
        "test_weather/test_rome"
    }

    # 4. re-record all: new runs (new tool-call ids, timings), the same file names
    step("all", pytest_in(project, record_env, "--cli-proxy-record-mode=all"))
    third = tree(fixtures)
    assert set(third) == set(second) and third != second

    # 5. a miss: the test, the message, a diff, the command
    test_file.write_text(test_file.read_text().replace("And in Rome?", "And in Milan?"))
    out = step("miss", pytest_in(project, env), ok=False)
    assert "in test tests/test_weather.py::test_rome" in out
    assert "first difference: messages[1].content" in out
    assert '-   "content": "And in Rome?' in out and '+   "content": "And in Milan?' in out
    assert "pytest tests/test_weather.py::test_rome --cli-proxy-record-mode=new_episodes" in out

    # 6. the unused report: test_rome renamed to test_milan; a whole-suite run lists the
    #    recordings no test owns any more (and the new test's miss points at them)
    test_file.write_text(test_file.read_text().replace("def test_rome", "def test_milan"))
    out = step("unused", pytest_in(project, env), ok=False)
    assert "2 unused fixture(s):" in out
    assert "tests/cli-fixtures/test_weather/test_rome/" in out
    assert "no test of this suite owns this folder" in out
    assert "nearest fixture: tests/cli-fixtures/test_weather/test_rome/" in out

    # 7. no planted secret, HOME, user name or redact-pattern match in any fixture
    text = "\n".join(p.read_text() for p in fixtures.rglob("*.json"))
    for value in (*PLANTED.values(), str(home), "ACME-000005"):
        assert value not in text, value
    assert "[REDACTED:WEATHER_API_KEY]" in text and "$HOME/.cache/weather-agent" in text
    print("\n".join(steps))
