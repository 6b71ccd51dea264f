"""A fourth CLI backend, whole in one folder, as docs/architecture.md's "add a backend" says:
the backend (argv, options, models, size, login facts) here and its output parser in
``parser.py``. Registering it is the one other line (the tests do it in a fixture)."""

from __future__ import annotations

from cli_proxy.backends.base import Backend, BackendOptions, LaunchOptions, StreamParser
from cli_proxy.plan.prompt import Prompt
from cli_proxy.protocol import ChatCompletionRequest
from tests.backends.echo.parser import EchoParser


class EchoOptions(BackendOptions):
    bin: str = "echo-cli"
    shout: bool = False


class EchoBackend(Backend):
    name = "echo"
    options_model = EchoOptions
    model_prefixes = ("echo-",)
    known_models = ("echo-1",)
    resident_mib = 64  # what the bounds divide the memory budget by
    at_rest_mib = 32
    login_files = (".echo/login.json",)
    login_vars = ("ECHO_API_KEY",)
    login_how = "run `echo-cli login`, or set ECHO_API_KEY"

    def argv(self, launch: LaunchOptions) -> list[str]:
        return [*self.command, "--model", launch.model]

    def new_parser(self, prompt: Prompt, request: ChatCompletionRequest) -> StreamParser:
        return EchoParser()
