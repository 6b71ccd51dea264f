"""The wheel carries everything ``cli-proxy serve`` needs: built from a copy of the sources,
installed into a fresh venv with the runtime dependencies only, started from an empty
directory with no CLI on PATH, it replays its own fixtures and answers the README example.

Needs the package index (or pip's cache) for setuptools and the runtime dependencies: where
neither is reachable it skips with a note."""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from openai import OpenAI

from cli_proxy import __version__

ROOT = Path(__file__).resolve().parents[2]
README_ANSWER = "Hi! How can I help you today?"  # fixtures/claude-claude-sonnet-4-6-a511bc35e470


def run(
    cmd: list[str], cwd: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, check=False)


def skip_offline(step: str, done: subprocess.CompletedProcess[str]) -> None:
    tail = " | ".join((done.stderr or done.stdout).strip().splitlines()[-3:])
    pytest.skip(f"{step} failed (offline, no package index or pip cache?): {tail[-400:]}")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel, built the way a user or a release job builds it (isolated build)."""
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"  # a copy: the build writes build/ and *.egg-info beside the sources
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, src / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "_fixtures")
    for name in ("cli_proxy", "fixtures"):
        shutil.copytree(ROOT / name, src / name, ignore=ignore)
    out = tmp / "dist"
    done = run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(src)])
    if done.returncode != 0:
        skip_offline("building the wheel", done)
    (built,) = out.glob("cli_proxy-*.whl")
    return built


def test_the_wheel_holds_every_module_and_fixture(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    modules = {str(p.relative_to(ROOT)) for p in (ROOT / "cli_proxy").rglob("*.py")}
    assert modules <= names, f"left out of the wheel: {sorted(modules - names)}"
    fixtures = {f"cli_proxy/_fixtures/{p.name}" for p in (ROOT / "fixtures").glob("*.json")}
    assert fixtures and fixtures <= names
    assert {"cli_proxy/py.typed", "cli_proxy/pinned-clis.mk"} <= names


@contextlib.contextmanager
def serving(cli: Path, cwd: Path, env: dict[str, str]) -> Iterator[str]:
    """``cli-proxy serve --port 0`` from ``cwd``; yields its /v1 URL, stops it afterwards."""
    proc = subprocess.Popen(
        [str(cli), "serve", "--port", "0", "--log-json"],
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stderr is not None
    try:
        events = []
        for line in proc.stderr:
            with contextlib.suppress(ValueError):
                events.append(json.loads(line))
            if events and events[-1].get("event") == "listening":
                break
        else:
            pytest.fail(f"cli-proxy serve exited ({proc.wait()}) before listening: {events}")
        starting = next(e for e in events if e.get("event") == "starting")
        assert (
            "REPLAY MODE" in starting["mode"]
            and "/site-packages/cli_proxy/_fixtures" in (starting["mode"])
        )
        yield str(events[-1]["url"])
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        proc.stderr.close()


@pytest.mark.timeout(900)
def test_installed_wheel_serves_fixtures_with_no_cli(wheel: Path, tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    done = run([sys.executable, "-m", "venv", str(venv)])
    assert done.returncode == 0, done.stderr
    # --no-compile: what a user's pip byte-compiles is not the wheel's to check (the
    # gateway's imports compile on first use)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-compile"]
    done = run([*pip, str(wheel)])
    if done.returncode != 0:
        skip_offline("installing the wheel's runtime dependencies", done)
    # runtime dependencies only: nothing of the dev extra came along
    listed = run([str(venv / "bin" / "python"), "-m", "pip", "list", "--format=json"])
    installed = {p["name"].lower() for p in json.loads(listed.stdout)}
    assert "cli-proxy" in installed and not installed & {"pytest", "openai", "hypothesis"}

    cli = venv / "bin" / "cli-proxy"
    assert run([str(cli), "--version"]).stdout.strip() == f"cli-proxy {__version__}"
    empty = tmp_path / "anywhere"
    empty.mkdir()
    bin_dir = tmp_path / "bin"  # a PATH without any CLI (containment tools only)
    bin_dir.mkdir()
    for tool in ("true", "setpriv", "bwrap"):
        if found := shutil.which(tool):
            (bin_dir / tool).symlink_to(found)
    home = tmp_path / "home"
    home.mkdir()
    env = {"PATH": str(bin_dir), "HOME": str(home), "LANG": "C.UTF-8"}

    doctor = run([str(cli), "doctor"], cwd=empty, env=env)
    assert doctor.returncode == 1, doctor.stdout + doctor.stderr
    assert "no backend can serve" in doctor.stdout
    assert "/site-packages/cli_proxy/_fixtures: SERVED" in doctor.stdout

    with serving(cli, empty, env) as url:
        client = OpenAI(base_url=url, api_key="unused", max_retries=0, timeout=60)
        r = client.chat.completions.create(
            model="claude-sonnet-4-6", messages=[{"role": "user", "content": "say hi"}]
        )
        assert r.choices[0].message.content == README_ANSWER
    assert list(empty.iterdir()) == []  # nothing written where it ran
