"""One chat completion: request -> prompt -> CLI process -> answer events.

The HTTP layer decides how to deliver the events (one JSON body or SSE chunks);
everything up to that point is shared, so streaming and non-streaming answers
are the same answer by construction.
"""

from __future__ import annotations

import contextlib
import secrets
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from .answer import AnswerEvent, AnswerParser, ContentDelta, ToolCallArgs, ToolCallStart
from .backends.base import Backend, CallOptions
from .errors import APIError
from .events import CliEvent, Failure, Truncated, UsageReport
from .process import CliRun, RunStats, Supervisor
from .protocol import (
    ChatCompletion,
    ChatCompletionRequest,
    Choice,
    ResponseFunction,
    ResponseMessage,
    ResponseToolCall,
    Usage,
)


def new_call_id() -> str:
    return "call_" + secrets.token_hex(12)


def new_completion_id() -> str:
    return "chatcmpl-" + secrets.token_hex(12)


@dataclass
class ResponseIds:
    """The ids a response carries; replay reuses recorded ones so answers are byte-identical."""

    completion_id: str = field(default_factory=new_completion_id)
    created: int = field(default_factory=lambda: int(time.time()))
    call_ids: list[str] = field(default_factory=list)
    _next: int = 0

    def next_call_id(self) -> str:
        if self._next < len(self.call_ids):
            call_id = self.call_ids[self._next]
        else:
            call_id = new_call_id()
            self.call_ids.append(call_id)
        self._next += 1
        return call_id


class LineSink:
    """Receives every stdout line with its time offset (the recorder implements it)."""

    def spawned(self) -> None:
        """The process has started: line times count from here, not from queueing."""

    def line(self, data: bytes) -> None: ...

    def done(self, exit_code: int | None, stderr: str, stats: RunStats) -> None: ...


@dataclass
class Plan:
    """Everything decided before a process starts."""

    request: ChatCompletionRequest
    backend: Backend
    options: CallOptions
    prompt: str
    tools_active: bool
    env: dict[str, str]
    argv: list[str] = field(default_factory=list)
    ids: ResponseIds = field(default_factory=ResponseIds)

    def __post_init__(self) -> None:
        if not self.argv:
            self.argv = self.backend.argv(self.options)


@dataclass
class Outcome:
    usage: Usage = field(default_factory=Usage)
    finish_reason: str = "stop"
    stats: RunStats | None = None


class Completion:
    """Runs one plan; ``events`` yields answer events, raising APIError on failure."""

    def __init__(
        self,
        plan: Plan,
        supervisor: Supervisor,
        sink: LineSink | None = None,
    ) -> None:
        self.plan = plan
        self.supervisor = supervisor
        self.sink = sink
        self.outcome = Outcome()

    @contextlib.asynccontextmanager
    async def start(self) -> AsyncIterator[CliRun]:
        """Queue for a slot and spawn; errors here happen before any response byte."""
        stdin = self.plan.prompt.encode("utf-8")
        started: CliRun | None = None
        try:
            async with self.supervisor.run(
                self.plan.argv,
                env=self.plan.env,
                stdin=stdin,
                prepare=self.plan.backend.prepare_workdir,
            ) as run:
                started = run
                self.outcome.stats = run.stats
                if self.sink is not None:
                    self.sink.spawned()
                yield run
        finally:
            if self.sink is not None and started is not None:
                self.sink.done(started.stats.exit_code, started.stats.stderr, started.stats)

    async def events(self, run: CliRun) -> AsyncIterator[AnswerEvent]:
        parser = self.plan.backend.new_parser()
        answer = AnswerParser(self.plan.ids.next_call_id) if self.plan.tools_active else None
        failure: Failure | None = None
        truncated = False

        def consume(cli_events: list[CliEvent]) -> list[AnswerEvent]:
            nonlocal failure, truncated
            out: list[AnswerEvent] = []
            for ev in cli_events:
                if isinstance(ev, Failure):
                    failure = failure or ev
                elif isinstance(ev, Truncated):
                    truncated = True
                elif isinstance(ev, UsageReport):
                    self.outcome.usage = Usage(
                        prompt_tokens=ev.prompt_tokens,
                        completion_tokens=ev.completion_tokens,
                        total_tokens=ev.prompt_tokens + ev.completion_tokens,
                    )
                elif failure is None:
                    out.extend(answer.feed(ev.text) if answer else [ContentDelta(ev.text)])
            return out

        # After a failure the CLI is left to exit by itself (it is about to), so its
        # exit code and stderr are known and the run can be recorded faithfully.
        async for line in run.lines():
            if self.sink is not None:
                self.sink.line(line)
            for out in consume(parser.feed(line)):
                yield out
        code = await run.wait()
        for out in consume(parser.finish(code, run.stderr)):
            yield out
        if failure is not None:
            raise APIError(failure.status, failure.message, code=failure.code)
        if answer is not None:
            for out in answer.finish():
                yield out
            self.outcome.finish_reason = answer.finish_reason
        if truncated:
            self.outcome.finish_reason = "length"


async def collect(completion: Completion, run: CliRun) -> ChatCompletion:
    """The non-streaming answer: the same events, accumulated."""
    content: list[str] = []
    calls: list[ResponseToolCall] = []
    async for ev in completion.events(run):
        if isinstance(ev, ContentDelta):
            content.append(ev.text)
        elif isinstance(ev, ToolCallStart):
            calls.append(
                ResponseToolCall(id=ev.id, function=ResponseFunction(name=ev.name, arguments=""))
            )
        elif isinstance(ev, ToolCallArgs):
            calls[ev.index].function.arguments += ev.fragment
    text = "".join(content)
    message = ResponseMessage(content=text or None, tool_calls=calls or None)
    if not calls and not text:
        message.content = ""
    ids = completion.plan.ids
    return ChatCompletion(
        id=ids.completion_id,
        created=ids.created,
        model=completion.plan.request.model,
        choices=[Choice(message=message, finish_reason=completion.outcome.finish_reason)],  # type: ignore[arg-type]
        usage=completion.outcome.usage,
    )
