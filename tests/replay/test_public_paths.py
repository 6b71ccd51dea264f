"""The import paths and commands the docs gave users keep working after a move
(docs/changelog.md): ``cli_proxy.testing``, ``python -m cli_proxy.replayer`` (deprecated) and
the ``pytest11`` entry point."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib import import_module, metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_cli_proxy_testing_gives_the_plugins_gateway() -> None:
    from cli_proxy import testing
    from cli_proxy.replay import plugin
    from cli_proxy.replay.replay import RecordMode

    assert testing.start_gateway is plugin.start_gateway
    assert testing.fixture_gateway is plugin.fixture_gateway
    assert testing.RunningGateway is plugin.RunningGateway
    assert testing.RecordMode is RecordMode


def test_the_old_replayer_command_still_replays_and_says_it_moved(tmp_path: Path) -> None:
    data = {
        "format": "cli-proxy-fixture",
        "version": 1,
        "backend": "claude",
        "request": {"model": "claude-sonnet-4-6", "messages": []},
        "stdout": [{"t": 0, "line": '{"type":"result"}'}],
        "stderr": "recorded stderr\n",
        "exit_code": 3,
    }
    path = tmp_path / "run.json"
    path.write_text(json.dumps(data))
    runs = {
        module: subprocess.run(
            [sys.executable, "-m", module, str(path)],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=60,
        )
        for module in ("cli_proxy.replayer", "cli_proxy.replay.replayer")
    }
    old, new = runs["cli_proxy.replayer"], runs["cli_proxy.replay.replayer"]
    replayed = (3, '{"type":"result"}\n')
    assert (old.returncode, old.stdout) == (new.returncode, new.stdout) == replayed
    assert new.stderr == "recorded stderr\n"
    assert "DeprecationWarning" in old.stderr and "cli_proxy.replay.replayer" in old.stderr
    assert old.stderr.endswith("recorded stderr\n")


def test_the_pytest11_entry_point_names_the_plugin() -> None:
    (entry,) = [e for e in metadata.entry_points(group="pytest11") if e.name == "cli_proxy"]
    assert entry.value == "cli_proxy.replay.plugin"
    plugin = import_module(entry.value)
    assert callable(plugin.pytest_addoption) and callable(plugin.start_gateway)
