#!/usr/bin/env python3
"""Record the REAL gemini binary over ACP with a working "Login with Google" login of a personal
account, which Code Assist refuses as ineligible (``UNSUPPORTED_CLIENT``, as it has since
2026-06-18: tests/fakes/fake_code_assist.py ``personal=True``), driven exactly as the gateway
drives it.

    .venv/bin/python tests/data/real-cli/gemini-ineligible-capture.py PATH/TO/gemini [WAIT_S [TAG]]

Everything is on loopback, as in tests/realcli/test_real_cli_logins.py: the fake token
endpoint (tests/fakes/fake_token_api.py) reached through the CONNECT proxy
(tests/fakes/fake_connect_proxy.py, test CA in ``NODE_EXTRA_CA_CERTS``), the fake Code Assist
API (``CODE_ASSIST_ENDPOINT``, passed on as the gateway's ``pass_env`` does).
argv, env, work-dir files and the private GEMINI_CLI_HOME (login files linked from the user's
~/.gemini) come from ``GeminiBackend``; stdin gets its ``encode_prompt`` (initialize,
session/new), then whatever its parser replies. stdin stays open for WAIT_S seconds (default
90) after spawn, to see whether the CLI ever ends the prompt by itself; then it is closed and
the exit awaited for 10 s more. Writes ``gemini-0.61.0-code-assist-ineligible[-TAG].*``:
``stdout.jsonl`` (the lines as written), ``timeline.txt`` (every stdout and stderr line
with seconds since spawn, the token endpoint's requests, whether the process was alive),
``stderr.txt`` and ``rc``.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

from cli_proxy.backends.base import LaunchOptions  # noqa: E402
from cli_proxy.backends.gemini.backend import GeminiBackend, GeminiOptions  # noqa: E402
from cli_proxy.plan.prompt import render  # noqa: E402
from cli_proxy.protocol import ChatCompletionRequest  # noqa: E402
from tests.fakes.fake_code_assist import FakeCodeAssist  # noqa: E402
from tests.fakes.fake_connect_proxy import ConnectProxy  # noqa: E402
from tests.fakes.fake_model_api import start_fake_model_api  # noqa: E402
from tests.fakes.fake_token_api import FakeTokenAPI  # noqa: E402

OUT = ROOT / "tests" / "data" / "real-cli"
STEM = "gemini-0.61.0-code-assist-ineligible"
MODEL = "gemini-2.5-flash"
GOOGLE_HOSTS = ["oauth2.googleapis.com", "www.googleapis.com"]


async def main() -> None:
    gemini = str(Path(sys.argv[1]).resolve())
    wait_s = float(sys.argv[2]) if len(sys.argv) > 2 else 90.0
    stem = STEM + (f"-{sys.argv[3]}" if len(sys.argv) > 3 else "")
    api = await start_fake_model_api()
    # the login works (its expired access token is refreshed, as in test_real_cli_logins.py);
    # Code Assist then refuses the account as ineligible
    token = await FakeTokenAPI(live="1//rt-0", rotate=False).start()
    assist = await FakeCodeAssist(api.url, token.issued, personal=True).start()
    proxy = await ConnectProxy(GOOGLE_HOSTS, int(token.url.rsplit(":", 1)[1])).start()
    timeline: list[str] = []
    start = time.monotonic()

    def note(what: str) -> None:
        timeline.append(f"{time.monotonic() - start:7.2f}s {what}")

    try:
        backend = GeminiBackend(GeminiOptions(bin=gemini))
        req = ChatCompletionRequest.model_validate(
            {"model": MODEL, "messages": [{"role": "user", "content": "say hi"}]}
        )
        prompt = render(req)
        parser = backend.new_parser(prompt, req)
        with tempfile.TemporaryDirectory() as tmp:
            user, work, home = Path(tmp, "user"), Path(tmp, "work"), Path(tmp, "home")
            for d in (user / ".gemini", work, home):
                d.mkdir(parents=True)
            auth = {"security": {"auth": {"selectedType": "oauth-personal"}}}
            (user / ".gemini" / "settings.json").write_text(json.dumps(auth))
            creds = {
                "access_token": "ya29.expired",
                "refresh_token": "1//rt-0",
                "scope": "https://www.googleapis.com/auth/cloud-platform",
                "token_type": "Bearer",
                "expiry_date": int((time.time() - 60) * 1000),
            }
            creds_bytes = json.dumps(creds, indent=2).encode()
            (user / ".gemini" / "oauth_creds.json").write_bytes(creds_bytes)
            (user / ".gemini" / "google_accounts.json").write_text('{"active": "u@example.com"}')
            launch = LaunchOptions(model=MODEL)
            for rel, content in backend.workdir_files(launch):
                (work / rel).parent.mkdir(parents=True, exist_ok=True)
                (work / rel).write_bytes(content)
            spec = backend.private_home(str(user))
            for rel, content in spec.files:
                (home / rel).parent.mkdir(parents=True, exist_ok=True)
                (home / rel).write_bytes(content)
            for rel, target in spec.login:
                (home / rel).symlink_to(target)
            base = {
                "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
                "HOME": str(user),
                "CODE_ASSIST_ENDPOINT": assist.url,
                "HTTPS_PROXY": proxy.url,
                "NO_PROXY": "127.0.0.1,localhost",
                "NODE_EXTRA_CA_CERTS": str(proxy.ca_pem),
            }
            env = {**backend.env(base), "HOME": str(home), "GEMINI_CLI_HOME": str(home)}
            env["CODE_ASSIST_ENDPOINT"] = assist.url  # the gateway's pass_env, as in the tests
            env["TMPDIR"] = str(work)
            start = time.monotonic()
            note("spawn: " + " ".join(backend.argv(launch)[1:]))
            proc = await asyncio.create_subprocess_exec(
                *backend.argv(launch),
                cwd=work,
                env=env,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                start_new_session=True,
                limit=2**24,
            )
            assert proc.stdin and proc.stdout and proc.stderr
            first = backend.encode_prompt(prompt, req)
            proc.stdin.write(first)
            for line in first.splitlines():
                note("stdin  " + line.decode())
            out: list[bytes] = []
            err: list[bytes] = []

            async def read_out() -> None:
                assert proc.stdout and proc.stdin
                while line := await proc.stdout.readline():
                    out.append(line)
                    note("stdout " + line.decode().rstrip("\n"))
                    for event in parser.feed(line):
                        note(f"parser {event!r}")
                    if reply := parser.replies():
                        proc.stdin.write(reply)
                        for r in reply.splitlines():
                            note("stdin  " + r.decode()[:300])
                note("stdout closed")

            async def read_err() -> None:
                assert proc.stderr
                while line := await proc.stderr.readline():
                    err.append(line)
                    note("stderr " + line.decode().rstrip("\n")[:300])

            tasks = [asyncio.create_task(read_out()), asyncio.create_task(read_err())]
            exited = asyncio.create_task(proc.wait())
            done, _ = await asyncio.wait({exited}, timeout=wait_s)
            seen = len(token.requests)
            note(f"after {wait_s:.0f}s: alive {not done}, token requests {seen}")
            if not done:
                note("stdin closed by the client")
                proc.stdin.close()
                done, _ = await asyncio.wait({exited}, timeout=10)
            if not done:
                note("still alive 10 s after stdin closed: SIGKILL")
                os.killpg(proc.pid, signal.SIGKILL)
            rc = await exited
            await asyncio.gather(*tasks)
            note(f"exit rc={rc}")
            for r in token.requests:
                note(f"token endpoint (wall clock) {r.path} {r.outcome} at {r.at:.2f}")
            note(f"authorization codes presented: {token.codes}")
            note(f"code assist paths: {assist.paths}")
            left = (user / ".gemini" / "oauth_creds.json").read_bytes() == creds_bytes
            note(f"user's oauth_creds.json unchanged: {left}")
            scrub = tmp.encode()
            (OUT / f"{stem}.stdout.jsonl").write_bytes(b"".join(out))
            (OUT / f"{stem}.stderr.txt").write_bytes(b"".join(err).replace(scrub, b"$TMP"))
            (OUT / f"{stem}.rc").write_text(f"{rc}\n")
            text = "\n".join(timeline).replace(tmp, "$TMP") + "\n"
            (OUT / f"{stem}.timeline.txt").write_text(text)
            print(text)
    finally:
        await proxy.close()
        await assist.close()
        await token.close()
        await api.close()


if __name__ == "__main__":
    asyncio.run(main())
