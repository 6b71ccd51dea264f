"""The echo CLI's output (tests/fakes/echo_cli.py): one JSON object a line."""

from __future__ import annotations

from cli_proxy.backends.base import StreamParser, empty_answer, load_json_line
from cli_proxy.read.events import CliEvent, CliText, UsageReport


class EchoParser(StreamParser):
    def __init__(self, shout: bool = False) -> None:
        self.done = False
        self.seen = False
        self.shout = shout

    def feed(self, line: bytes) -> list[CliEvent]:
        obj = load_json_line(line)
        if obj is None:
            return []
        if isinstance(obj.get("say"), str):
            self.seen = True
            return [CliText(obj["say"])]
        done = obj.get("done")
        if isinstance(done, dict):
            self.done = True
            return [UsageReport(int(done["in"]), int(done["out"]))]
        return []

    def finish(self, exit_code: int, stderr: str) -> list[CliEvent]:
        return [] if self.seen else [empty_answer("echo")]
