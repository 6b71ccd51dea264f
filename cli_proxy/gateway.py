"""The gateway: its long-lived parts, and ``plan``, the one place a request becomes a plan.

``plan`` runs every domain step between a validated request and a process: semantic checks,
routing, the prompt, the backend's argv/env/work-dir files, the stdin encoding and the ids.
Where the CLI command comes from (live backends or recorded fixtures) is a ``PlanSource``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import math
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from cli_proxy.backends.base import Backend, LaunchOptions, StreamParser
from cli_proxy.backends.registry import backend_class, names
from cli_proxy.config import Settings
from cli_proxy.failures import CallError, InvalidRequest, NotFound
from cli_proxy.plan.images import (
    FetchPolicy,
    ImageLimits,
    PromptImage,
    extract,
    fetch_all,
)
from cli_proxy.plan.prompt import Prompt, PromptOptions, render, tools_active
from cli_proxy.plan.routing import Route, route
from cli_proxy.plan.spec import CallInput, LaunchSpec, Plan, ResponseIds
from cli_proxy.protocol import ChatCompletionRequest, NamedToolChoice
from cli_proxy.run.call import Call, LineSink
from cli_proxy.run.containment import Launcher, make_launcher
from cli_proxy.run.governor import Governor, LoginFact, no_login_check
from cli_proxy.run.keys import KeyRing, KeysFileError, load_keys
from cli_proxy.run.limits import CallBudget
from cli_proxy.run.limits import from_settings as limits_from_settings
from cli_proxy.run.logins import Login, LoginGate, file_key
from cli_proxy.run.pool import PoolSettings, WarmPool
from cli_proxy.run.supervisor import Supervisor
from cli_proxy.run.usage import UsageStore, default_state_dir


@dataclass(frozen=True, slots=True)
class Target:
    """What a source contributes to a plan: the process to start and how to talk to it."""

    launch: LaunchSpec
    stdin: bytes  # what is first written to the CLI's stdin
    parser: Callable[[], StreamParser]
    ids: ResponseIds = field(default_factory=ResponseIds)


class PlanSource(Protocol):
    """Where a routed request's CLI command comes from: live backends, or recorded fixtures."""

    def models(self) -> list[tuple[str, str]]: ...

    def route(self, model: str) -> Route | None: ...

    def backend(self, route: Route) -> Backend:
        """The backend that reads the routed call (what it accepts, how it is prompted)."""
        ...

    def target(
        self, req: ChatCompletionRequest, route: Route, launch: LaunchOptions, prompt: Prompt
    ) -> Target:
        """The process for this request (or ``NotFound``: no fixture matches)."""
        ...


class LiveBackends:
    """The enabled backends, built from their validated options."""

    def __init__(self, backends: dict[str, Backend]) -> None:
        self.backends = backends
        self.classes = {name: type(b) for name, b in backends.items()}

    @classmethod
    def from_settings(cls, settings: Settings, enabled: list[str] | None = None) -> LiveBackends:
        drop, extra = frozenset(settings.drop_env), frozenset(settings.pass_env)
        return cls(
            {
                name: backend_class(name)(settings.options_for(name), drop, extra)
                for name in (settings.backends if enabled is None else enabled)
            }
        )

    def models(self) -> list[tuple[str, str]]:
        return [(m, name) for name, b in self.backends.items() for m in b.models()]

    def route(self, model: str) -> Route | None:
        return route(model, self.classes)

    def backend(self, route: Route) -> Backend:
        return self.backends[route.backend]

    def target(
        self, req: ChatCompletionRequest, route: Route, launch: LaunchOptions, prompt: Prompt
    ) -> Target:
        backend = self.backends[route.backend]
        spec = LaunchSpec.make(
            backend.name,
            backend.argv(launch),
            backend.env(os.environ),
            backend.workdir_files(launch),
            backend.private_home(user_home()),
            read_paths=backend.read_paths(),
            warm_prefix=backend.warm_prefix,
            merge_stderr=backend.merge_stderr,
            duplex=backend.duplex,
        )
        stdin = backend.encode_prompt(prompt, req)
        return Target(spec, stdin, functools.partial(backend.new_parser, prompt, req))

    def login(self, spec: LaunchSpec) -> Login | None:
        """The refreshing login the process of ``spec`` will use (the login gate's input)."""
        backend = self.backends.get(spec.backend)
        return backend.login(user_home(), spec.environ) if backend is not None else None

    def login_fact(self, name: str) -> LoginFact:
        """What doctor would say of the backend ``name``'s login, from the environment its
        CLI gets (an option's token included) and its login files; the version names the
        files' (inode, mtime, size) and the variables set, never a value."""
        backend = self.backends.get(name)
        if backend is None:
            return LoginFact(None)
        cls, home = type(backend), Path(user_home())
        env = backend.env(os.environ)
        state = cls.login_state(env, home, frozenset())
        files = tuple(file_key(p) for p in cls.login_paths(env, home))
        variables = tuple(v for v in cls.login_vars if env.get(v))
        return LoginFact(state.present, state.detail, (state.present, files, variables))


def key_ring(settings: Settings) -> KeyRing:
    """The keys the gateway accepts: the keys file's (if any) and ``api_keys`` as one unnamed
    key without limits. ``KeysFileError`` names what is wrong."""
    ring = load_keys(settings.keys_file) if settings.keys_file is not None else KeyRing()
    return ring.with_api_keys(k.get_secret_value() for k in settings.api_keys)


def reload_keys(gateway: Gateway) -> str | None:
    """SIGHUP: re-read the keys file; new keys at once, calls in flight go on. A broken
    file keeps the old keys: the message (problem and line) is returned for the log."""
    try:
        gateway.governor.reload(key_ring(gateway.settings))
    except KeysFileError as exc:
        return str(exc)
    return None


def user_home() -> str:
    return os.environ.get("HOME") or os.path.expanduser("~")


def live_backends(settings: Settings) -> LiveBackends:
    return LiveBackends.from_settings(settings)


@dataclass
class Gateway:
    settings: Settings
    source: PlanSource
    sink_for: Callable[[Plan], LineSink | None] | None = None
    supervisor: Supervisor = field(init=False)
    launcher: Launcher = field(init=False)
    pool: WarmPool | None = field(init=False)
    logins: LoginGate = field(init=False)
    prompt_options: PromptOptions = field(init=False)
    image_limits: ImageLimits = field(init=False)
    fetch_policy: FetchPolicy = field(init=False)
    governor: Governor = field(init=False)
    _warmed: set[Backend] = field(init=False, default_factory=set)

    def __post_init__(self) -> None:
        s = self.settings
        # the keys file and the usage store first: a broken one stops the start (KeysFileError,
        # StateError, each naming the path), before anything is started
        store = None
        if s.keys_file is not None:
            store = UsageStore(s.state_dir or default_state_dir())
        live_source = self.source if isinstance(self.source, LiveBackends) else None
        self.governor = Governor(
            key_ring(s),
            store,
            login_check=live_source.login_fact if live_source else no_login_check,
        )
        bounds, limits = limits_from_settings(s)
        self.supervisor = Supervisor(bounds, s.max_queue, limits)
        live = self.source if isinstance(self.source, LiveBackends) else None
        # a call waiting for its login's refresh is a queued call: the queue's time limit
        self.logins = LoginGate(
            live.login if live else lambda _: None, self.supervisor, s.queue_timeout_s
        )
        home_paths = {n: backend_class(n).home_paths for n in names()}
        self.launcher = make_launcher(s.launcher, home_paths, s.work_root)
        self.prompt_options = PromptOptions(s.function_list_threshold, s.sanitize_system)
        self.image_limits = ImageLimits(s.max_images, s.max_image_bytes, s.max_image_total_bytes)
        self.fetch_policy = FetchPolicy(
            s.image_fetch, s.image_fetch_private, s.image_fetch_timeout_s, s.max_image_bytes
        )
        pooled = s.warm_pool and s.warm_max_total > 0 and s.warm_max_per_key > 0
        self.pool = (
            WarmPool(
                self.launcher,
                self.supervisor,
                PoolSettings(True, s.warm_max_per_key, s.warm_max_total, s.warm_max_age_s),
            )
            if pooled
            else None
        )

    async def prewarm(self) -> list[str]:
        """At start-up: every live backend's per-binary work, then spares for the configured
        models; returns the models that could be planned."""
        for model, _owner in self.source.models():
            r = self.source.route(model)
            if r is not None:
                await self.warm_up(self.source.backend(r))
        warmed = []
        for model in self.settings.warm_models:
            body = {"model": model, "messages": [{"role": "user", "content": "warm"}]}
            try:
                r = self.source.route(model)
                if r is not None:
                    await self.warm_up(self.source.backend(r))
                plan = self.plan(ChatCompletionRequest.model_validate(body))
            except CallError:
                continue
            if self.pool is not None:
                self.pool.want(plan.launch)
                warmed.append(model)
        return warmed

    async def close(self) -> None:
        """Shutdown: spares first (nothing new starts), then every running tree."""
        if self.pool is not None:
            await self.pool.close()
        for backend in self._warmed:
            backend.close()
        await self.supervisor.shutdown()

    async def open_call(self, req: ChatCompletionRequest, budget: CallBudget | None = None) -> Call:
        """The one step from a validated request to a call ready to run: its remote images
        fetched (the only I/O, and only when ``image_fetch`` allows), then ``plan``.
        ``budget``: its time limits, counted from the request's arrival."""
        req = await fetch_all(req, self.fetch_policy)  # ImageError: an InvalidRequest
        r = self.source.route(req.model)
        if r is not None:
            await self.warm_up(self.source.backend(r))
        return self.call(self.plan(req), budget)

    async def warm_up(self, backend: Backend) -> None:
        """A backend's per-binary work, once, in a worker thread (``Backend.warm_up``)."""
        if backend not in self._warmed:
            await asyncio.to_thread(backend.warm_up)
            self._warmed.add(backend)

    def plan(self, req: ChatCompletionRequest) -> Plan:
        """Everything decided before a process exists; ``InvalidRequest`` (or ``NotFound``)
        for a request that cannot run."""
        r = self._check(req)
        backend = self.source.backend(r)
        prompt = self._prompt(req, self._images(req, r, backend), backend.native_tools)
        effort = req.reasoning_effort or self.settings.reasoning_effort
        launch = LaunchOptions(model=r.cli_model, effort=effort)
        target = self.source.target(req, r, launch, prompt)
        call = CallInput(
            prompt=prompt.text,
            stdin=target.stdin,
            tools_active=tools_active(req) and not backend.native_tools,
            ids=target.ids,
            parser=target.parser,
        )
        return Plan(req, target.launch, call)

    def count_tokens(self, req: ChatCompletionRequest) -> int:
        """An estimate of ``req``'s input tokens, for the APIs that ask (Anthropic's
        count_tokens): the characters of the prompt the gateway would render, over 4 (images
        and the CLI's own system prompt not counted). Nothing runs; the request is checked
        as a call's plan checks it (``NotFound`` for a model no backend serves)."""
        self._check(req)
        prompt = render(req, self.prompt_options, extract(req, self.image_limits))
        return math.ceil(sum(map(len, prompt.blocks)) / 4)

    def call(self, plan: Plan, budget: CallBudget | None = None) -> Call:
        """The call of ``plan``; ``budget``: its time limits (``Limits.budget``)."""
        sink = self.sink_for(plan) if self.sink_for is not None else None
        return Call(plan, self.supervisor, self.launcher, sink, self.pool, self.logins, budget)

    def _check(self, req: ChatCompletionRequest) -> Route:
        """Semantic checks pydantic cannot express; returns the route."""
        s = self.settings
        if len(req.messages) > s.max_messages:
            raise InvalidRequest(
                f"too many messages: {len(req.messages)} (limit {s.max_messages})",
                param="messages",
                code="too_many_messages",
            )
        r = self.source.route(req.model)
        if r is None:
            raise NotFound(
                f"The model '{req.model}' does not exist or is not served here; "
                "GET /v1/models lists the models this gateway serves",
                param="model",
                code="model_not_found",
            )
        names = [t.function.name for t in req.tools or []]
        if len(set(names)) != len(names):
            raise InvalidRequest("tool function names must be unique", param="tools")
        choice = req.tool_choice
        if isinstance(choice, NamedToolChoice) and choice.function.name not in names:
            raise InvalidRequest(
                f"tool_choice names function '{choice.function.name}', which is not in tools",
                param="tool_choice",
                code="invalid_value",
            )
        if (choice == "required" or isinstance(choice, NamedToolChoice)) and not names:
            raise InvalidRequest(
                "tool_choice is only allowed when tools are specified", param="tool_choice"
            )
        return r

    def _images(
        self, req: ChatCompletionRequest, r: Route, backend: Backend
    ) -> dict[str, PromptImage]:
        """The request's images, decoded and checked; 400 when the backend cannot take any."""
        images = extract(req, self.image_limits)  # ImageError: an InvalidRequest
        if images and not backend.accepts_images:
            raise InvalidRequest(
                f"the {r.backend} backend cannot pass images to its model without opening its "
                "sealed box; send this request to a model whose backend takes images, or "
                "without images",
                param="messages",
                code="images_not_supported",
            )
        return images

    def _prompt(
        self, req: ChatCompletionRequest, images: dict[str, PromptImage], native_tools: bool
    ) -> Prompt:
        options = self.prompt_options
        if native_tools:
            options = dataclasses.replace(options, native_tools=True)
        prompt = render(req, options, images)
        size = sum(map(len, prompt.blocks))
        if size > self.settings.max_prompt_chars:
            raise InvalidRequest(
                f"the rendered prompt has {size} characters "
                f"(limit {self.settings.max_prompt_chars})",
                param="messages",
                code="context_length_exceeded",
            )
        return prompt
