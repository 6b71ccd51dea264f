"""A process's children and descendants, read from the process itself.

psutil's ``Process.children()`` builds a parent map of every process on the machine (one
``/proc/PID/stat`` read each) on every call; the gateway asks after every call (orphan sweep),
during every start (start-slot release) and on every kill, so on a busy host that scan was
the largest part of the gateway's own CPU per call (docs/performance.md). Linux lists each
thread's children in ``/proc/PID/task/TID/children`` (CONFIG_PROC_CHILDREN, on in the stock
kernels of Debian, Ubuntu, Fedora); where that file is missing, psutil's scan is used.
Either way the answer is a snapshot: a child forked or reaped meanwhile may be missed, as
with psutil.
"""

from __future__ import annotations

import contextlib
import os

import psutil

_HAS_CHILDREN_FILE = os.path.exists(f"/proc/{os.getpid()}/task/{os.getpid()}/children")


def child_pids(pid: int) -> list[int]:
    """The live children of ``pid`` (any of its threads'), [] when it is gone."""
    if not _HAS_CHILDREN_FILE:
        with contextlib.suppress(psutil.Error):
            return [c.pid for c in psutil.Process(pid).children()]
        return []
    out: list[int] = []
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    for tid in tids:
        with contextlib.suppress(OSError), open(f"/proc/{pid}/task/{tid}/children", "rb") as f:
            out += [int(x) for x in f.read().split()]
    return out


def descendant_pids(pid: int) -> list[int]:
    """Every live descendant of ``pid``, parents before their children."""
    out: list[int] = []
    todo = [pid]
    seen = {pid}
    while todo:
        for child in child_pids(todo.pop()):
            if child not in seen:
                seen.add(child)
                out.append(child)
                todo.append(child)
    return out


def tree(pid: int) -> list[psutil.Process]:
    """``pid`` and its live descendants as psutil processes; raises ``psutil.NoSuchProcess``
    when ``pid`` itself is gone (as ``psutil.Process(pid)`` does)."""
    procs = [psutil.Process(pid)]
    for child in descendant_pids(pid):
        with contextlib.suppress(psutil.Error):
            procs.append(psutil.Process(child))
    return procs
