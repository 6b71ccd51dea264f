"""The gateway's long-lived parts and the checks that turn a request into a plan."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field

from .backends import ClaudeBackend, GeminiBackend
from .backends.base import Backend, CallOptions
from .completion import LineSink, Plan, ResponseIds
from .config import Settings
from .errors import APIError
from .process import Limits, Supervisor
from .prompt import PromptOptions, build_prompt, tools_active
from .protocol import ChatCompletionRequest, NamedToolChoice
from .routing import Route, listed_models, route


class PlanSource:
    """Where a routed request's CLI command comes from: live backends, or recorded fixtures."""

    def backend_for(self, req: ChatCompletionRequest, route: Route, prompt: str) -> Backend:
        raise NotImplementedError

    def models(self) -> list[tuple[str, str]]:
        raise NotImplementedError

    def ids_for(self, backend: Backend) -> ResponseIds:
        return ResponseIds()

    def route(self, model: str) -> Route | None:
        raise NotImplementedError


class LiveBackends(PlanSource):
    def __init__(self, backends: dict[str, Backend]) -> None:
        self.backends = backends
        self.enabled = frozenset(backends)

    def backend_for(self, req: ChatCompletionRequest, route: Route, prompt: str) -> Backend:
        return self.backends[route.backend]

    def models(self) -> list[tuple[str, str]]:
        return listed_models(self.enabled)

    def route(self, model: str) -> Route | None:
        return route(model, self.enabled)


def live_backends(settings: Settings) -> LiveBackends:
    drop = frozenset(settings.drop_env)
    available: dict[str, Backend] = {
        "claude": ClaudeBackend(settings.claude_bin, drop),
        "gemini": GeminiBackend(settings.gemini_bin, drop),
    }
    return LiveBackends({k: v for k, v in available.items() if k in settings.backends})


@dataclass
class Gateway:
    settings: Settings
    source: PlanSource
    sink_for: Callable[[Plan], LineSink | None] | None = None
    supervisor: Supervisor = field(init=False)
    prompt_options: PromptOptions = field(init=False)

    def __post_init__(self) -> None:
        s = self.settings
        self.supervisor = Supervisor(
            max_concurrency=s.max_concurrency,
            max_queue=s.max_queue,
            limits=Limits(s.timeout_s, s.idle_timeout_s, s.kill_grace_s),
        )
        self.prompt_options = PromptOptions(s.function_list_threshold, s.sanitize_system)

    def check(self, req: ChatCompletionRequest) -> Route:
        """Semantic checks pydantic cannot express; returns the route."""
        s = self.settings
        if len(req.messages) > s.max_messages:
            raise APIError(
                400,
                f"too many messages: {len(req.messages)} (limit {s.max_messages})",
                param="messages",
                code="too_many_messages",
            )
        r = self.source.route(req.model)
        if r is None:
            raise APIError(
                404,
                f"The model '{req.model}' does not exist or is not served here; "
                "GET /v1/models lists the models this gateway serves",
                param="model",
                code="model_not_found",
            )
        names = [t.function.name for t in req.tools or []]
        if len(set(names)) != len(names):
            raise APIError(400, "tool function names must be unique", param="tools")
        choice = req.tool_choice
        if isinstance(choice, NamedToolChoice) and choice.function.name not in names:
            raise APIError(
                400,
                f"tool_choice names function '{choice.function.name}', which is not in tools",
                param="tool_choice",
                code="invalid_value",
            )
        if (choice == "required" or isinstance(choice, NamedToolChoice)) and not names:
            raise APIError(
                400,
                "tool_choice is only allowed when tools are specified",
                param="tool_choice",
            )
        return r

    def prompt(self, req: ChatCompletionRequest) -> str:
        text = build_prompt(req, self.prompt_options)
        if len(text) > self.settings.max_prompt_chars:
            raise APIError(
                400,
                f"the rendered prompt has {len(text)} characters "
                f"(limit {self.settings.max_prompt_chars})",
                param="messages",
                code="context_length_exceeded",
            )
        return text

    def options(self, req: ChatCompletionRequest, route: Route) -> CallOptions:
        return CallOptions(model=route.cli_model, stream_partial=bool(req.stream))

    def tools_active(self, req: ChatCompletionRequest) -> bool:
        return tools_active(req)

    def child_env(self, backend: Backend) -> dict[str, str]:
        return backend.env(os.environ)
