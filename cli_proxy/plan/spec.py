"""What ``Gateway.plan`` decides for a call before any process exists.

A ``Plan`` has two parts. ``LaunchSpec`` is everything that starts the process (backend,
argv, env, work-dir files, containment): frozen and hashable, so that a pool of pre-started
processes can key on it, and independent of the prompt. ``CallInput`` is what the call then
feeds that process and how its answer is read (stdin bytes, tools mode, the ids the answer
carries).
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from cli_proxy.protocol import ChatCompletionRequest
from cli_proxy.read.events import StreamParser


def new_call_id() -> str:
    return "call_" + secrets.token_hex(12)


def new_completion_id() -> str:
    return "chatcmpl-" + secrets.token_hex(12)


@dataclass(frozen=True, slots=True)
class PrivateHome:
    """A throw-away HOME for one call: the gateway's own files plus the user's login files,
    linked in place (never copied, never bind-mounted alone: the CLIs write a refreshed
    login by temp file and rename, which must land in the user's real directory;
    ``containment._login_binds``)."""

    env: tuple[str, ...]  # variables pointed at it (HOME, GEMINI_CLI_HOME, ...)
    files: tuple[tuple[str, bytes], ...]  # (path relative to it, content)
    login: tuple[tuple[str, str], ...]  # (path relative to it, the user's real file)


@dataclass(frozen=True, slots=True)
class LaunchSpec:
    """How to start one CLI process. Two equal specs start interchangeable processes."""

    backend: str
    argv: tuple[str, ...]
    env: tuple[tuple[str, str], ...]  # sorted (name, value) pairs
    workdir_files: tuple[tuple[str, bytes], ...] = ()
    home: PrivateHome | None = None  # None: the CLI uses the real HOME (its state paths only)
    read_paths: tuple[str, ...] = ()  # host files the process must read (a sandbox shows them)
    warm_prefix: bytes = b""  # written at spawn; every call's stdin starts with it
    merge_stderr: bool = False  # stderr joins stdout: the parser reads both, in order
    duplex: bool = False  # stdin stays open while the CLI runs (a request/response protocol)

    @classmethod
    def make(
        cls,
        backend: str,
        argv: list[str],
        env: Mapping[str, str],
        workdir_files: tuple[tuple[str, bytes], ...] = (),
        home: PrivateHome | None = None,
        read_paths: tuple[str, ...] = (),
        warm_prefix: bytes = b"",
        merge_stderr: bool = False,
        duplex: bool = False,
    ) -> LaunchSpec:
        env_pairs = tuple(sorted(env.items()))
        return cls(
            backend,
            tuple(argv),
            env_pairs,
            workdir_files,
            home,
            read_paths,
            warm_prefix,
            merge_stderr,
            duplex,
        )

    @property
    def environ(self) -> dict[str, str]:
        return dict(self.env)


@dataclass(frozen=True, slots=True)
class ResponseIds:
    """The ids a response carries; replay reuses recorded ones so answers are byte-identical."""

    completion_id: str = field(default_factory=new_completion_id)
    created: int = field(default_factory=lambda: int(time.time()))
    call_ids: tuple[str, ...] = ()  # recorded tool-call ids, handed out first, in order


@dataclass(frozen=True, slots=True)
class CallInput:
    """What the call feeds the process and how its answer is read."""

    prompt: str  # as rendered (recorded in fixtures, logged only with log_prompts)
    stdin: bytes  # the prompt as the backend encodes it
    tools_active: bool  # the answer is the JSON tool-call format
    ids: ResponseIds
    parser: Callable[[], StreamParser]  # a fresh parser for the backend's stdout


@dataclass(frozen=True, slots=True)
class Plan:
    request: ChatCompletionRequest
    launch: LaunchSpec
    call: CallInput
