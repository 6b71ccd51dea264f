"""The models copilot reports: with a GitHub login, ``session/new`` answers
``models.availableModels`` (what ``GET <endpoints.api>/models`` of the Copilot API gave it,
measured on 1.0.102 through a fake Copilot API: tests/data/real-cli/copilot-1.0.102-models.json).
The gateway asks once per binary and login (``CopilotBackend.warm_up``) with a sealed process
that opens a session and is killed; ``/v1/models`` then lists them as ``copilot/<id>``.
Under BYOK copilot lists none (and refuses a session without ``--model``), so the backend's
``known_models`` stand in."""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import selectors
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from cli_proxy.backends.acp.rpc import ACP_PREFIX, NEW_SESSION
from cli_proxy.backends.base import load_json_line
from cli_proxy.run.containment import die_with_gateway

log = logging.getLogger(__name__)

PROBE_TIMEOUT_S = 60.0
"""A session opens in 4-10 s on a busy 2-core machine; a login copilot keeps asking about
(a refused token: a dozen tries) ends within this, and the list stays the fallback."""

_reported: dict[tuple[Any, ...], tuple[str, ...]] = {}
_lock = threading.Lock()


def reported_ids(result: Any) -> tuple[str, ...]:
    """The model ids of a ``session/new`` result (``models.availableModels[].modelId``), in
    copilot's order; a model the Copilot API marks disabled for the user is left out."""
    models = result.get("models") if isinstance(result, dict) else None
    available = models.get("availableModels") if isinstance(models, dict) else None
    ids: list[str] = []
    for entry in available if isinstance(available, list) else []:
        if not isinstance(entry, dict):
            continue
        model_id, meta = entry.get("modelId"), entry.get("_meta")
        if not isinstance(model_id, str) or not model_id or model_id.startswith("-"):
            continue
        if isinstance(meta, dict) and meta.get("copilotEnablement") == "disabled":
            continue
        if model_id not in ids:
            ids.append(model_id)
    return tuple(ids)


def login_key(env: Mapping[str, str], names: Sequence[str], stored: Path) -> tuple[Any, ...]:
    """Which login the CLI would use: a digest of the token variables' values (never the
    token itself) and the stored login file's identity."""
    digest = hashlib.sha256()
    for name in names:
        digest.update(f"{name}={env.get(name, '')}\0".encode())
    try:
        st = stored.stat()
        file_id: tuple[Any, ...] = (st.st_ino, st.st_size, st.st_mtime_ns)
    except OSError:
        file_id = ()
    return (digest.hexdigest(), *file_id)


def binary_key(command: Sequence[str], path_env: str) -> tuple[Any, ...]:
    found = shutil.which(command[0], path=path_env) if os.sep not in command[0] else command[0]
    try:
        st = os.stat(found) if found else None
    except OSError:
        st = None
    return (*command, found, st.st_size if st else None, st.st_mtime_ns if st else None)


def cached(key: tuple[Any, ...]) -> tuple[str, ...] | None:
    with _lock:
        return _reported.get(key)


def claim(key: tuple[Any, ...]) -> bool:
    """True once per key: the caller probes it (an empty list stands until it reports)."""
    with _lock:
        if key in _reported:
            return False
        _reported[key] = ()
        return True


def remember(key: tuple[Any, ...], ids: tuple[str, ...]) -> None:
    with _lock:
        _reported[key] = ids


def probe(
    argv: Sequence[str],
    env: Mapping[str, str],
    login: Sequence[tuple[str, str]],
    running: set[subprocess.Popen[bytes]],
) -> tuple[str, ...]:
    """Start ``argv`` (copilot's ACP server, sealed as a call's) in a throw-away private home
    and work dir, open a session, read its ``models``, and kill the whole process group.
    ``login``: (name, path) of the stored login to link into the home; ``running`` holds the
    process while it runs (``stop`` kills it at shutdown). Empty on any failure."""
    with tempfile.TemporaryDirectory(prefix="cli-proxy-copilot-models-") as home:
        for name, path in login:
            os.symlink(path, os.path.join(home, name))
        work = os.path.join(home, "work")
        os.mkdir(work)
        Path(work, ".git").write_bytes(b"gitdir: /nonexistent\n")
        full = {**env, "HOME": home, "COPILOT_HOME": home, "TMPDIR": work}
        shared = env.get("COPILOT_CACHE_HOME")
        if shared and os.path.isdir(os.path.join(shared, "pkg")):
            # the extracted package from the shared cache, but copilot's own cache files
            # (copilot-user-cache.json, managed-settings/) in this throw-away one: its user
            # cache is not keyed by token (seen: a second token in the same cache got the
            # first one's copilot_internal/user answer without asking GitHub), and a
            # refused token leaves a null answer there
            cache = os.path.join(home, "cache")
            os.mkdir(cache)
            os.symlink(os.path.join(shared, "pkg"), os.path.join(cache, "pkg"))
            full["COPILOT_CACHE_HOME"] = cache
        try:
            proc = subprocess.Popen(
                list(argv),
                env=full,
                cwd=work,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
                preexec_fn=die_with_gateway(),  # gone with the gateway, even on kill -9
            )
        except OSError:
            return ()
        running.add(proc)
        try:
            return _read_models(proc)
        except (OSError, ValueError):
            return ()
        finally:
            _kill_group(proc)
            running.discard(proc)


def stop(running: set[subprocess.Popen[bytes]]) -> None:
    """Kill every probe still running (the gateway is closing): none outlives it."""
    for proc in list(running):
        with contextlib.suppress(OSError):
            os.killpg(proc.pid, signal.SIGKILL)


def _read_models(proc: subprocess.Popen[bytes]) -> tuple[str, ...]:
    assert proc.stdin is not None and proc.stdout is not None
    try:
        proc.stdin.write(ACP_PREFIX)
        proc.stdin.flush()
    except OSError:
        return ()
    deadline = time.monotonic() + PROBE_TIMEOUT_S
    buf = b""
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        while (left := deadline - time.monotonic()) > 0:
            if not sel.select(left):
                break
            chunk = os.read(proc.stdout.fileno(), 65536)
            if not chunk:
                break
            buf += chunk
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                obj = load_json_line(line)
                if obj is not None and obj.get("id") == NEW_SESSION:
                    return reported_ids(obj.get("result"))
    return ()


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(OSError):
        os.killpg(proc.pid, signal.SIGKILL)
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        log.warning("copilot model probe %d did not exit", proc.pid)
    for stream in (proc.stdin, proc.stdout):
        if stream is not None:
            with contextlib.suppress(OSError):
                stream.close()
