"""One call: a plan's CLI process -> answer events, the last of them ``Finished``.

``Call.events()`` admits the call (a slot), starts its CLI (or takes a spare), feeds it, reads
its output through the backend's parser and the answer rules, and yields answer events; the
last one carries the outcome (finish reason, usage, the ids handed out). ``server/delivery/``
turns the same events into JSON or SSE, so streaming and non-streaming answers are the same answer
by construction. The call owns its outcome: only its own code writes it.
"""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass, field

from cli_proxy.failures import CallError, CliFailed, FailureKind
from cli_proxy.plan.spec import Plan, ResponseIds, new_call_id
from cli_proxy.protocol import (
    CompletionTokensDetails,
    PromptTokensDetails,
    ResponseFormat,
    Usage,
)
from cli_proxy.read.answer_events import (
    AnswerEvent,
    ContentDelta,
    ReasoningDelta,
    ToolCallArgs,
    ToolCallStart,
)
from cli_proxy.read.events import (
    CliEvent,
    CliText,
    CliThinking,
    CliToolCall,
    Failure,
    RateLimit,
    Truncated,
    UsageReport,
)
from cli_proxy.read.json_output import JsonAnswerError, checked
from cli_proxy.read.reply import AnswerParser
from cli_proxy.run.containment import Launcher
from cli_proxy.run.limits import CallBudget
from cli_proxy.run.logins import LoginGate, login_free
from cli_proxy.run.pool import WarmPool
from cli_proxy.run.process import FAILED_GRACE_S, LINGER_GRACE_S, CliRun, RunStats, started
from cli_proxy.run.supervisor import Supervisor


class LineSink:
    """Receives every stdout line with its time offset (the recorder implements it)."""

    def spawned(self) -> None:
        """The prompt is being written: line times count from here, not from queueing."""

    def line(self, data: bytes) -> None: ...

    def done(self, call: Call) -> None:
        """The run is over (reaped); ``call.outcome`` is final."""


@dataclass(frozen=True, slots=True)
class Finished:
    """The last event of a call that answered: how it ended, with everything delivery needs."""

    finish_reason: str  # stop, length, tool_calls
    usage: Usage
    ids: ResponseIds  # the response's id and creation time
    call_ids: tuple[str, ...]  # tool-call ids handed out, in order
    stats: RunStats  # the process's figures (final once the events are closed)


@dataclass
class Outcome:
    usage: Usage = field(default_factory=Usage)
    finish_reason: str = "stop"  # "error" when the call failed after it started
    stats: RunStats | None = None
    call_ids: list[str] = field(default_factory=list)  # tool-call ids handed out, in order
    failure: FailureKind | None = None  # what the CLI said went wrong, if it did
    rate_limits: list[RateLimit] = field(default_factory=list)  # as the CLI reported them
    first_content_s: float | None = None  # from the call's start to its first answer event
    queue_wait_s: float | None = None  # time waited for a slot (also when refused)
    start_wait_s: float = 0.0  # then for room and a start slot (limits.py)


class CallRules:
    """What the request allows of the model's tool calls, applied to the answer events.

    A call reaches the client only if its function is in ``tools`` (a call to any other
    function is dropped; an answer left with nothing is a ``CliFailed`` invalid answer, which
    SDKs retry) and, with ``parallel_tool_calls: false``, only the first call. Indexes stay
    contiguous. A cut-off answer (the model's JSON ended unclosed) ends with finish reason
    ``length``; the call it cut was never emitted (``AnswerParser`` emits calls whole).
    """

    def __init__(self, tools: set[str], parallel: bool) -> None:
        self.tools = tools
        self.parallel = parallel
        self.index: dict[int, int] = {}  # parser index -> client index, for accepted calls
        self.dropped: list[str] = []
        self.content = False

    def apply(self, events: list[AnswerEvent]) -> list[AnswerEvent]:
        out: list[AnswerEvent] = []
        for ev in events:
            if isinstance(ev, ToolCallStart):
                if ev.name not in self.tools or (not self.parallel and self.index):
                    self.dropped.append(ev.name)
                    continue
                self.index[ev.index] = len(self.index)
                out.append(ToolCallStart(self.index[ev.index], ev.id, ev.name))
            elif isinstance(ev, ToolCallArgs):
                if ev.index in self.index:
                    out.append(ToolCallArgs(self.index[ev.index], ev.fragment))
            else:
                if isinstance(ev, ContentDelta):
                    self.content = self.content or bool(ev.text)
                out.append(ev)
        return out


class Call:
    """Runs one plan: ``async with contextlib.aclosing(call.events()) as events``.

    The first step of ``events()`` queues for a slot and starts the CLI, so its errors
    (``CallError``) come before any answer event; later steps may raise ``CallError`` too.
    Closing the iterator early (a client gone) kills and reaps the CLI tree.
    """

    def __init__(
        self,
        plan: Plan,
        supervisor: Supervisor,
        launcher: Launcher,
        sink: LineSink | None = None,
        pool: WarmPool | None = None,
        logins: LoginGate | None = None,
        budget: CallBudget | None = None,
    ) -> None:
        self.plan = plan
        self.supervisor = supervisor
        self.launcher = launcher
        self.sink = sink
        self.pool = pool
        self.logins = logins
        self.budget = budget or supervisor.limits.budget(stream=bool(plan.request.stream))
        """Its time limits from the request's arrival (``limits.CallBudget``)."""
        self.deadline: float | None = None  # once admitted
        self.outcome = Outcome()

    @property
    def stats(self) -> RunStats | None:
        """The process's figures (for the request log); final once the events are closed."""
        return self.outcome.stats

    def _next_call_id(self) -> str:
        recorded = self.plan.call.ids.call_ids
        n = len(self.outcome.call_ids)
        call_id = recorded[n] if n < len(recorded) else new_call_id()
        self.outcome.call_ids.append(call_id)
        return call_id

    async def events(self) -> AsyncGenerator[AnswerEvent | Finished, None]:
        run: CliRun | None = None
        launch, stdin = self.plan.launch, self.plan.call.stdin
        begun = time.monotonic()
        gate = self.logins.turn(launch) if self.logins is not None else login_free()
        try:
            # the login gate first: a call waiting for its login's refresh holds no slot
            async with gate as turn, self.supervisor.admit(launch.backend, self.budget) as slot:
                self.outcome.queue_wait_s = slot.queue_wait_s
                self.deadline = slot.deadline
                pool = self.pool
                spare = pool.take(launch, turn.born_after) if pool is not None else None
                if spare is None:
                    await slot.cold_start()  # room among the processes, a start slot
                    self.outcome.start_wait_s = slot.start_wait_s
                else:
                    slot.took_spare()
                async with started(launch, self.launcher, slot.limits, slot.deadline, spare) as run:
                    self.outcome.stats = run.stats
                    slot.track(run)
                    if self.pool is not None:
                        self.pool.want(launch)  # a spare for the next call like this one
                    if self.sink is not None:
                        self.sink.spawned()  # recorded times count from the prompt
                    if spare is not None:  # it already has the prefix that kept it waiting
                        stdin = stdin[len(launch.warm_prefix) :]
                    run.feed(stdin, keep_open=launch.duplex)
                    async for ev in self._answer(run):
                        if self.outcome.first_content_s is None:
                            self.outcome.first_content_s = time.monotonic() - begun
                        yield ev
                    o = self.outcome
                    yield Finished(
                        o.finish_reason,
                        o.usage,
                        self.plan.call.ids,
                        tuple(o.call_ids),
                        run.stats,
                    )
        except CallError:
            self.outcome.finish_reason = "error"
            raise
        finally:
            if self.outcome.queue_wait_s is None:  # refused or gone while queued
                self.outcome.queue_wait_s = time.monotonic() - begun
            if self.sink is not None and run is not None:
                self.sink.done(self)
            if self.pool is not None:
                self.pool.refill()  # a slot is free again: spares may start now

    async def _answer(self, run: CliRun) -> AsyncIterator[AnswerEvent]:
        """The CLI's output, line by line, through the backend's parser and ``AnswerReader``.

        After a failure the CLI is left to exit by itself (it is about to), so its exit code
        and stderr are known and the run can be recorded faithfully."""
        parser = self.plan.call.parser()
        reader = AnswerReader(self, run)
        async for line in run.lines(lambda: parser.wake_s):
            if self.sink is not None and line:  # b"": the parser's timer, not a line
                self.sink.line(line)
            events = reader.consume(parser.feed(line))
            run.send(parser.replies())  # a duplex protocol's next messages, in order
            for out in events:
                yield out
            if parser.done:  # the result is in: a CLI that lingers does not hold the answer
                break
        # done: the CLI gets a short grace to exit; done with a failure, almost none (codex
        # asks the model again and again after a refused tool call until it is killed)
        failed = reader.failure is not None
        grace = (FAILED_GRACE_S if failed else LINGER_GRACE_S) if parser.done else None
        code = await run.wait(grace)
        if run.stats.killed == "lingered":
            code = 0  # killed by us after a complete result: not the CLI's failure
        for out in reader.consume(parser.finish(code, run.stderr)):
            yield out
        for out in reader.finish():
            yield out


class AnswerReader:
    """One call's CLI events -> answer events: the bookkeeping events (failure, usage, rate
    limits, truncation) go to the call's outcome; content is sized against
    ``max_answer_bytes`` and read as the request asks (tool-mode JSON through
    ``AnswerParser``, native tool calls, a ``response_format`` answer held whole, or plain
    text), then passed through the request's ``CallRules``."""

    def __init__(self, call: Call, run: CliRun) -> None:
        self.call, self.run = call, run
        req = call.plan.request
        self.parser = AnswerParser(call._next_call_id) if call.plan.call.tools_active else None
        self.rules = CallRules(
            {t.function.name for t in req.tools or []}, req.parallel_tool_calls is not False
        )
        self.format = req.response_format
        self.json_mode = (
            self.parser is None and self.format is not None and self.format.type != "text"
        )
        self.held: list[str] = []  # a response_format answer is checked whole before it is sent
        self.size, self.limit = 0, call.supervisor.limits.max_answer_bytes
        self.native_calls = 0  # calls made through the CLI's channel (native_tools backends)
        self.failure: Failure | None = None
        self.truncated = False

    def consume(self, cli_events: list[CliEvent]) -> list[AnswerEvent]:
        out: list[AnswerEvent] = []
        for ev in cli_events:
            if isinstance(ev, Failure | RateLimit | Truncated | UsageReport):
                self._note(ev)
            elif self.failure is None:
                out.extend(self._content(ev))
        return out

    def _note(self, ev: Failure | RateLimit | Truncated | UsageReport) -> None:
        """A bookkeeping event: into the call's outcome."""
        outcome = self.call.outcome
        if isinstance(ev, Failure):
            self.failure = self.failure or ev
            outcome.failure = self.failure.kind
        elif isinstance(ev, RateLimit):
            outcome.rate_limits.append(ev)
        elif isinstance(ev, Truncated):
            self.truncated = True
        else:
            outcome.usage = Usage(
                prompt_tokens=ev.prompt_tokens,
                completion_tokens=ev.completion_tokens,
                total_tokens=ev.prompt_tokens + ev.completion_tokens,
                prompt_tokens_details=PromptTokensDetails(cached_tokens=ev.cached_tokens),
                completion_tokens_details=CompletionTokensDetails(
                    reasoning_tokens=ev.reasoning_tokens
                ),
            )

    def _content(self, ev: CliText | CliThinking | CliToolCall) -> list[AnswerEvent]:
        """Text, thinking or a native tool call, once it is known to fit the limit."""
        self._count(ev.arguments if isinstance(ev, CliToolCall) else ev.text)
        if isinstance(ev, CliThinking):
            return [ReasoningDelta(ev.text)]
        if isinstance(ev, CliToolCall):
            start = ToolCallStart(self.native_calls, self.call._next_call_id(), ev.name)
            args = ToolCallArgs(self.native_calls, ev.arguments)
            self.native_calls += 1
            return self.rules.apply([start, args])
        if self.parser is not None:
            return self.rules.apply(self.parser.feed(ev.text))
        if self.json_mode:
            self.held.append(ev.text)
            return []
        return [ContentDelta(ev.text)]

    def _count(self, text: str) -> None:
        self.size += len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))
        if self.size > self.limit:
            self.run.stats.killed = "answer_too_large"  # the caller's exit kills it
            raise CliFailed(
                FailureKind.ANSWER_TOO_LARGE,
                f"the answer exceeded the gateway's limit of {self.limit} bytes (max_answer_bytes)",
            )

    def finish(self) -> list[AnswerEvent]:
        """After the CLI exited: the reported failure, the held JSON answer, the reply's
        last events, and the finish reason."""
        if self.failure is not None:
            f = self.failure
            raise CliFailed(f.kind, f.message, f.retry_after_s)
        out: list[AnswerEvent] = []
        if self.json_mode and self.format is not None:
            out.append(self._json_answer(self.format))
        if self.parser is not None:
            out.extend(self.rules.apply(self.parser.finish()))
        if self.parser is not None or self.native_calls:
            self._check_calls()
        if self.truncated:
            self.call.outcome.finish_reason = "length"
        return out

    def _json_answer(self, fmt: ResponseFormat) -> ContentDelta:
        if self.truncated:  # cut off by the output limit: what came, with finish "length"
            return ContentDelta("".join(self.held))
        try:
            return ContentDelta(checked("".join(self.held), fmt))
        except JsonAnswerError as exc:
            raise CliFailed(FailureKind.INVALID_JSON, str(exc)) from None

    def _check_calls(self) -> None:
        rules, outcome = self.rules, self.call.outcome
        if rules.dropped and not rules.index and not rules.content:
            names = ", ".join(sorted(set(rules.dropped)))
            raise CliFailed(
                FailureKind.INVALID_ANSWER,
                f"the model called {names}, which the request does not allow "
                "(not in tools, or a second call with parallel_tool_calls false)",
            )
        outcome.finish_reason = "tool_calls" if rules.index else "stop"
        if self.parser is not None and self.parser.cut_off:
            outcome.finish_reason = "length"
