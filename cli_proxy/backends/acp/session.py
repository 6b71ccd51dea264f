"""The client side of one ACP session, shared by the ACP backends: it answers the CLI's
requests (nothing is ever granted), sends the prompt once ``session/new`` has answered, and
passes updates, the prompt's result and JSON-RPC errors to the backend's subclass."""

from __future__ import annotations

from typing import Any

from cli_proxy.backends.acp.rpc import INITIALIZE, METHOD_NOT_FOUND, NEW_SESSION, PROMPT, rpc_line
from cli_proxy.backends.base import StreamParser, empty_answer, exit_failure, load_json_line
from cli_proxy.failures import FailureKind
from cli_proxy.read.events import CliEvent, Failure


class AcpSession(StreamParser):
    """One session, one prompt. Subclasses implement ``_update`` (a ``session/update``),
    ``_prompt_result`` and ``_rpc_failure``; ``_non_json`` sees lines that are not JSON."""

    cli = "the CLI"  # named in messages
    relogin = ""  # the backend's re-login advice, for an exit with an error

    def __init__(self, blocks: list[dict[str, Any]]) -> None:
        self.done = False
        self._blocks = blocks
        self._out: list[bytes] = []
        self._failed = False
        self._prompted = False
        self._text_seen = False  # the model's text was read

    def replies(self) -> bytes:
        out, self._out = b"".join(self._out), []
        return out

    def feed(self, line: bytes) -> list[CliEvent]:
        obj = load_json_line(line)
        if self.done:
            return []
        if obj is None:
            return self._non_json(line)
        method = obj.get("method")
        if isinstance(method, str):
            if "id" in obj:
                self._answer_request(obj["id"], method)
                return []
            if method != "session/update":
                return []
            params = obj.get("params")
            update = params.get("update") if isinstance(params, dict) else None
            return self._update(update) if isinstance(update, dict) else []
        if obj.get("id") == PROMPT:
            if "error" in obj:
                return self._rpc_failure(obj["error"])
            result = obj.get("result")
            return self._prompt_result(result if isinstance(result, dict) else {})
        if obj.get("id") in (INITIALIZE, NEW_SESSION):
            return self._setup_result(obj)
        return []

    def _non_json(self, line: bytes) -> list[CliEvent]:
        return []

    def _update(self, update: dict[str, Any]) -> list[CliEvent]:
        raise NotImplementedError

    def _prompt_result(self, result: dict[str, Any]) -> list[CliEvent]:
        raise NotImplementedError

    def _rpc_failure(self, error: Any) -> list[CliEvent]:
        raise NotImplementedError

    def _answer_request(self, rid: Any, method: str) -> None:
        """The CLI asks something of the client: nothing is ever granted."""
        if method == "session/request_permission":
            result: dict[str, Any] = {"outcome": {"outcome": "cancelled"}}
            self._out.append(rpc_line({"id": rid, "result": result}))
        else:
            error = {"code": METHOD_NOT_FOUND, "message": f"{method} is not offered by this client"}
            self._out.append(rpc_line({"id": rid, "error": error}))

    def _setup_result(self, obj: dict[str, Any]) -> list[CliEvent]:
        if "error" in obj:
            return self._rpc_failure(obj["error"])
        result = obj.get("result")
        session = result.get("sessionId") if isinstance(result, dict) else None
        if obj.get("id") == NEW_SESSION and not self._prompted:
            if not isinstance(session, str) or not session:
                message = f"{self.cli} opened no ACP session"
                return self._fail(Failure(FailureKind.CLI_ERROR, message))
            self._prompted = True
            params = {"sessionId": session, "prompt": self._blocks}
            self._out.append(rpc_line({"id": PROMPT, "method": "session/prompt", "params": params}))
        return []

    def _answered(self) -> bool:
        """The prompt's answer holds something (an empty one is a failure of its own)."""
        return self._text_seen

    def finish(self, exit_code: int, stderr: str) -> list[CliEvent]:
        if self._failed:
            return []
        if not self.done:
            if exit_code != 0:
                return [exit_failure(exit_code, stderr, self.cli, self.relogin)]
            message = f"{self.cli} exited without an answer (no result for the prompt)"
            return [Failure(FailureKind.CLI_ERROR, message)]
        if not self._answered():
            return [empty_answer(self.cli)]
        return []

    def _fail(self, failure: Failure) -> list[CliEvent]:
        self.done = True
        if self._failed:
            return []
        self._failed = True
        return [failure]


def chunk_text(update: dict[str, Any]) -> str | None:
    """The text of an ``agent_message_chunk`` / ``agent_thought_chunk`` (None: no text)."""
    content = update.get("content")
    text = content.get("text") if isinstance(content, dict) else None
    return text if isinstance(text, str) and text else None
