"""proctree reads a process's descendants from /proc/PID/task/*/children: the same set
psutil's whole-machine scan finds, for a tree with grandchildren and a thread's child."""

from __future__ import annotations

import subprocess
import sys
import time

import psutil
import pytest

from cli_proxy.run import proctree
from cli_proxy.run.proctree import child_pids, descendant_pids, tree

# a child that starts a grandchild from its main thread and another from a second thread
CODE = """
import subprocess, sys, threading, time
spawn = lambda: subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
kids = [spawn()]
t = threading.Thread(target=lambda: kids.append(spawn()))
t.start(); t.join()
print("ready", flush=True)
time.sleep(30)
"""


@pytest.mark.parametrize("children_file", [True, False], ids=["proc-children", "psutil-scan"])
def test_descendants_match_psutils_scan(
    monkeypatch: pytest.MonkeyPatch, children_file: bool
) -> None:
    """Both ways (the /proc children files, and psutil's scan where a kernel lacks them)."""
    monkeypatch.setattr(proctree, "_HAS_CHILDREN_FILE", children_file)
    proc = subprocess.Popen([sys.executable, "-c", CODE], stdout=subprocess.PIPE)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == b"ready"
        expected = {p.pid for p in psutil.Process(proc.pid).children(recursive=True)}
        assert len(expected) == 2
        assert set(descendant_pids(proc.pid)) == expected
        assert set(child_pids(proc.pid)) == expected  # both are the child's own children
        assert [p.pid for p in tree(proc.pid)] == [proc.pid, *descendant_pids(proc.pid)]
    finally:
        for p in psutil.Process(proc.pid).children(recursive=True):
            p.kill()
        proc.kill()
        proc.wait()
    deadline = time.monotonic() + 5
    while descendant_pids(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert child_pids(proc.pid) == []  # reaped: gone, not an error
