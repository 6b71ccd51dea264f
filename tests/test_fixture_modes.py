"""The pytest plugin's record modes, end to end in a user's project (pytester, a real pytest
subprocess), with the stand-in CLIs as the live ones: record once, replay with no CLI,
new_episodes leaves other tests' files alone, all keeps names and prunes, a miss explains
itself, unused fixtures are listed, no planted secret is written. The example project
(tests/test_example_project.py) runs the same sequence with the real CLIs."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import CODEX_FAKE_CLI, FAKE_CLI

AGENT = '''
import json

WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
TOKEN = "Bearer planted-bearer-token-0123456789"

def fake(**d):
    return " @@fake " + json.dumps(d)

def ask(client, question, tool_answer):
    """A one-tool agent: the model asks for the weather, gets it, answers."""
    messages = [{"role": "user", "content": question}]
    for _ in range(3):
        r = client.chat.completions.create(
            model="claude-sonnet-4-6", messages=messages, tools=[WEATHER])
        msg = r.choices[0].message
        if not msg.tool_calls:
            return msg.content
        messages.append(msg.model_dump(exclude_none=True))
        for call in msg.tool_calls:
            result = {"temp_c": 18, "auth": TOKEN, "customer": "ACME-424242"}
            messages.append({"role": "tool", "tool_call_id": call.id,
                             "content": json.dumps(result) + fake(answer=tool_answer)})
    raise AssertionError("no answer")

CALL = json.dumps({"tool_call": {"name": "get_weather", "arguments": {"city": "Paris"}}})
'''

TESTS = """
from agent import CALL, ask, fake

def test_paris(cli_proxy_client):
    answer = ask(cli_proxy_client, "Weather in Paris?" + fake(answer=CALL),
                 json.dumps({"tool_call": None, "response": "18 C in Paris"}))
    assert answer == "18 C in Paris"

def test_hello(cli_proxy_client):
    r = cli_proxy_client.chat.completions.create(
        model="claude-sonnet-4-6",
        messages=[{"role": "user", "content": "hi" + fake(answer="Hello!")}])
    assert r.choices[0].message.content == "Hello!"
"""

NEW_TEST = """

def test_rome(cli_proxy_client):
    r = cli_proxy_client.chat.completions.create(
        model="claude-sonnet-4-6",
        messages=[{"role": "user", "content": "Rome?" + fake(answer="Sunny")}])
    assert r.choices[0].message.content == "Sunny"
"""

SECRETS = ("planted-bearer-token", "ACME-424242", "planted-env-secret-value")


def tree(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*.json"))
    }


@pytest.fixture
def project(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    pytester.makeini(
        "[pytest]\ncli_proxy_fixtures = cli-fixtures\ncli_proxy_record_redact =\n    ACME-\\d{6}\n"
    )
    pytester.makepyfile(agent=AGENT)
    pytester.makepyfile(test_agent="import json\n" + TESTS)
    monkeypatch.setenv("MY_SERVICE_TOKEN", "planted-env-secret-value")
    return pytester


def live(monkeypatch: pytest.MonkeyPatch, on: bool) -> None:
    """The stand-in CLIs as the configured live ones, or no CLI at all."""
    for name in ("claude", "gemini"):
        bin_ = f"{sys.executable} {FAKE_CLI} {name}" if on else "/nonexistent/cli"
        monkeypatch.setenv(f"CLI_PROXY_{name.upper()}_BIN", bin_)
    monkeypatch.setenv(
        "CLI_PROXY_CODEX_BIN", f"{sys.executable} {CODEX_FAKE_CLI}" if on else "/nonexistent/cli"
    )


def run(p: pytest.Pytester, *args: str) -> pytest.RunResult:
    # only our plugin: the other installed ones (schemathesis, hypothesis...) triple the
    # start-up time of each run; tests/test_fixtures.py checks the entry-point autoload
    return p.runpytest_subprocess("-p", "no:cacheprovider", "-p", "cli_proxy.testing", *args)


@pytest.mark.timeout(600)  # seven pytest runs, each starting a gateway
def test_record_modes_end_to_end(project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    root = project.path / "cli-fixtures"
    live(monkeypatch, True)
    # 1. once: both tests have no fixtures yet, so they are recorded, one folder each
    run(project, "--cli-proxy-record-mode=once").assert_outcomes(passed=2)
    first = tree(root)
    folders = {Path(name).parent.as_posix() for name in first}
    assert folders == {"test_agent/test_paris", "test_agent/test_hello"}
    assert sum(n.startswith("test_agent/test_paris/") for n in first) == 2  # two turns
    # no planted secret, HOME or user name anywhere in what was written
    text = "\n".join(p.read_text() for p in root.rglob("*.json"))
    for secret in SECRETS:
        assert secret not in text, secret
    assert "[REDACTED]" in text
    assert str(Path.home()) + "/" not in text

    # 2. replay with no CLI at all, nothing unused, nothing written
    live(monkeypatch, False)
    result = run(project)
    result.assert_outcomes(passed=2)
    assert "unused" not in result.stdout.str().split("cli-proxy fixtures")[-1]
    assert tree(root) == first

    # 3. a new test, recorded with new_episodes: the other tests' files stay byte-identical
    live(monkeypatch, True)
    project.makepyfile(test_agent="import json\n" + TESTS + NEW_TEST)
    run(project, "--cli-proxy-record-mode=new_episodes").assert_outcomes(passed=3)
    after_new = tree(root)
    assert {k: v for k, v in after_new.items() if k in first} == first
    assert [k for k in after_new if k not in first] == [
        k for k in after_new if k.startswith("test_agent/test_rome/")
    ]

    # 4. all: every request re-recorded (new tool-call ids, new timings), same file names;
    #    a stale file in a passed test's folder is removed
    stale = root / "test_agent" / "test_hello" / "claude-claude-sonnet-4-6-000000000000.json"
    stale.write_text((root / next(k for k in first if "test_hello" in k)).read_text())
    result = run(project, "--cli-proxy-record-mode=all")
    result.assert_outcomes(passed=3)
    assert "removed cli-fixtures/test_agent/test_hello/" in result.stdout.str()
    assert set(tree(root)) == set(after_new)
    assert tree(root) != after_new  # really re-recorded

    # 5. a miss: which test, which message, a diff, the command that re-records it
    live(monkeypatch, False)
    project.makepyfile(
        test_agent="import json\n" + TESTS.replace('"hi" + fake', '"hello" + fake') + NEW_TEST
    )
    result = run(project)
    result.assert_outcomes(passed=2, failed=1)
    out = result.stdout.str()
    assert "cli-proxy fixture misses" in out
    assert "in test test_agent.py::test_hello" in out
    assert "first difference: messages[0].content" in out
    assert '-   "content": "hi @@fake' in out and '+   "content": "hello @@fake' in out
    assert "pytest test_agent.py::test_hello --cli-proxy-record-mode=new_episodes" in out

    # 6. unused: a whole-suite none run lists a removed test's files and a test's unused one
    project.makepyfile(test_agent="import json\n" + TESTS + NEW_TEST)
    gone = root / "test_agent" / "test_gone"
    gone.mkdir()
    (gone / "claude-claude-sonnet-4-6-111111111111.json").write_text(
        stale.parent.joinpath(next(p.name for p in stale.parent.glob("*.json"))).read_text()
    )
    result = run(project)
    result.assert_outcomes(passed=3)
    out = result.stdout.str()
    assert "1 unused fixture(s):" in out
    assert "cli-fixtures/test_agent/test_gone/claude-claude-sonnet-4-6-111111111111.json: " in out
    assert "no test of this suite owns this folder" in out
    # a run of one test cannot vouch for the others: no orphan report
    result = run(project, "test_agent.py::test_hello")
    assert "test_gone" not in result.stdout.str()


def test_serve_replay_and_record_on_one_directory_goes_live_on_a_miss(tmp_path: Path) -> None:
    """``serve --replay D --record D``: a hit replays and is never written back (no replayer
    argv, no 0.03 s timings), a miss goes to the live CLI and is recorded."""
    import os
    import signal
    import time

    import openai

    env = {
        **os.environ,
        "CLI_PROXY_CLAUDE_BIN": f"{sys.executable} {FAKE_CLI} claude",
        "CLI_PROXY_GEMINI_BIN": f"{sys.executable} {FAKE_CLI} gemini",
        "CLI_PROXY_CODEX_BIN": f"{sys.executable} {CODEX_FAKE_CLI}",
        "CLI_PROXY_WARM_POOL": "false",
    }
    argv = [sys.executable, "-m", "cli_proxy", "serve", "--port", "0", "--log-json"]
    argv += ["--replay", str(tmp_path), "--record", str(tmp_path)]
    proc = subprocess.Popen(
        argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        url = ""
        assert proc.stdout is not None
        deadline = time.monotonic() + 30
        while not url and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if '"listening"' in line:
                url = json.loads(line)["url"]
        client = openai.OpenAI(base_url=url, api_key="x", max_retries=0)
        ask = {"model": "claude-sonnet-4-6", "messages": [{"role": "user", "content": "hi"}]}
        live_answer = client.chat.completions.create(**ask)  # a miss: live, recorded
        (path,) = tmp_path.glob("*.json")
        recorded = path.read_bytes()
        assert "fake_cli.py" in json.loads(recorded)["argv"][1]
        replayed = client.chat.completions.create(**ask)  # a hit: replayed, not rewritten
        assert replayed.model_dump() == live_answer.model_dump()
        time.sleep(0.5)
        assert path.read_bytes() == recorded and len(list(tmp_path.glob("*.json"))) == 1
        client.close()
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
        if proc.stdout is not None:
            proc.stdout.close()
