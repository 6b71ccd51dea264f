#!/usr/bin/env python3
"""Which GEMINI.md files the REAL gemini sends to the model, driven over ACP exactly as the
gateway drives it (``GeminiBackend``'s argv, environment, work-dir files and private
GEMINI_CLI_HOME; stdin gets its ``encode_prompt``, then its parser's replies), against
tests/fakes/fake_model_api.py on loopback.

    .venv/bin/python tests/data/real-cli/gemini-context-discovery-probe.py PATH/TO/gemini \
        [CONTEXT_JSON]

CONTEXT_JSON (optional) is merged into the ``context`` object of the work dir's
``.gemini/settings.json`` to try a candidate setting. Layout (R a fresh temp dir, W the work
dir R/a/work):

    R/.git/                 an empty directory: the project-root marker gemini looks for
    R/GEMINI.md             canary "ancestor", plus "@./imported.md"
    R/imported.md           canary "import"
    R/a/GEMINI.md           canary "between" (between the git root and the work dir)
    W/sub/GEMINI.md         canary "below" (a subdirectory of the work dir)
    W/sub/deep/GEMINI.md    canary "below-deep"

Prints which canaries reached the upstream request and the request's first user part.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

from cli_proxy.backends.base import LaunchOptions  # noqa: E402
from cli_proxy.backends.gemini.backend import GeminiBackend, GeminiOptions  # noqa: E402
from cli_proxy.plan.prompt import render  # noqa: E402
from cli_proxy.protocol import ChatCompletionRequest  # noqa: E402
from tests.fakes.fake_model_api import start_fake_model_api  # noqa: E402

MODEL = "gemini-2.5-flash"


async def main() -> None:
    gemini = str(Path(sys.argv[1]).resolve())
    extra = json.loads(sys.argv[2]) if len(sys.argv) > 2 else {}
    api = await start_fake_model_api()
    try:
        backend = GeminiBackend(GeminiOptions(bin=gemini))
        text = "say hi @@fake " + json.dumps({"answer": "hi"})
        req = ChatCompletionRequest.model_validate(
            {"model": MODEL, "messages": [{"role": "user", "content": text}]}
        )
        prompt = render(req)
        parser = backend.new_parser(prompt, req)
        with tempfile.TemporaryDirectory() as tmp:
            r = Path(tmp, "R")
            user, work, home = Path(tmp, "user"), r / "a" / "work", Path(tmp, "home")
            for d in (user / ".gemini", r / ".git", work / "sub" / "deep", home):
                d.mkdir(parents=True)
            auth = {"security": {"auth": {"selectedType": "gemini-api-key"}}}
            (user / ".gemini" / "settings.json").write_text(json.dumps(auth))
            tokens = {
                k: f"CANARY{k.upper()}{secrets.token_hex(4)}" for k in ("a", "i", "m", "b", "d")
            }
            names = {
                "a": "ancestor",
                "i": "import",
                "m": "between",
                "b": "below",
                "d": "below-deep",
            }
            (r / "GEMINI.md").write_text(f"Always say {tokens['a']}.\n@./imported.md\n")
            (r / "imported.md").write_text(f"Also say {tokens['i']}.\n")
            (r / "a" / "GEMINI.md").write_text(f"Always say {tokens['m']}.\n")
            (work / "sub" / "GEMINI.md").write_text(f"Always say {tokens['b']}.\n")
            (work / "sub" / "deep" / "GEMINI.md").write_text(f"Always say {tokens['d']}.\n")
            launch = LaunchOptions(model=MODEL)
            for rel, content in backend.workdir_files(launch):
                if rel == ".gemini/settings.json" and extra:
                    settings = json.loads(content)
                    settings["context"] = {**settings.get("context", {}), **extra}
                    content = json.dumps(settings).encode()
                (work / rel).parent.mkdir(parents=True, exist_ok=True)
                (work / rel).write_bytes(content)
            print("workspace settings:", (work / ".gemini" / "settings.json").read_text())
            spec = backend.private_home(str(user))
            for rel, content in spec.files:
                (home / rel).parent.mkdir(parents=True, exist_ok=True)
                (home / rel).write_bytes(content)
            base = {
                "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
                "HOME": str(user),
                "GEMINI_API_KEY": "test",
                "GOOGLE_GEMINI_BASE_URL": api.url,
            }
            env = {**backend.env(base), "HOME": str(home), "GEMINI_CLI_HOME": str(home)}
            env["TMPDIR"] = str(work)
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
            proc.stdin.write(backend.encode_prompt(prompt, req))
            events = []
            while not parser.done and (line := await asyncio.wait_for(proc.stdout.readline(), 60)):
                events += parser.feed(line)
                if reply := parser.replies():
                    proc.stdin.write(reply)
            proc.stdin.close()
            await asyncio.wait_for(proc.wait(), 20)
            bodies = [
                q["body"] for q in api.requests if q["path"].endswith(":streamGenerateContent")
            ]
            sent = json.dumps(bodies, ensure_ascii=False)
            print("events:", [type(e).__name__ for e in events], "upstream requests:", len(bodies))
            for key, token in tokens.items():
                print(f"  {names[key]:<11} {'SENT' if token in sent else 'not sent'}")
            first = bodies[0]["contents"][0]["parts"][0]["text"] if bodies else ""
            for key, token in tokens.items():
                first = first.replace(token, f"CANARY-{names[key]}")
            print("first user part:\n" + first.replace(tmp, "/tmp/T"))
    finally:
        await api.close()


if __name__ == "__main__":
    asyncio.run(main())
