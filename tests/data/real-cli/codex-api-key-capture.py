#!/usr/bin/env python3
"""How ``codex app-server`` (and ``codex exec``) take an API key: the headers each sends upstream.

    .venv/bin/python tests/data/real-cli/codex-api-key-capture.py --codex PATH/codex \\
        --out tests/data/real-cli [CASE ...]

Per case it starts ``tests/fakes/fake_model_api.py`` (accepting any credential, recording headers)
and ``tests/fakes/fake_token_api.py`` (``CODEX_REFRESH_TOKEN_URL_OVERRIDE``) on 127.0.0.1, builds
the codex backend's own argv, env and private CODEX_HOME (its ``config.toml`` edited as the
case says), links a ChatGPT-style ``auth.json`` from a user home when the case has one, and
lets the backend's own ``CodexParser`` drive one "say hi" call. ``exec`` runs ``codex exec
--json`` in the same home instead. Writes ``codex-0.169.0-api-key-CASE``: ``.headers.json``
(every upstream request: method, path, headers; the key and tokens cut to their last 4
characters), ``.stdout.jsonl``, ``.stderr.txt`` (app-server: merged into stdout, as the gateway
runs it), ``.rc`` and ``.home.txt`` (what the private home held when the call ended, which of
its files held the key, token-endpoint requests). Nothing leaves the machine: the key is a
dummy, every URL is loopback.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

from cli_proxy.backends.base import LaunchOptions  # noqa: E402
from cli_proxy.backends.codex.backend import CodexBackend  # noqa: E402
from cli_proxy.plan.images import ImageLimits, extract  # noqa: E402
from cli_proxy.plan.prompt import PromptOptions, render  # noqa: E402
from cli_proxy.protocol import ChatCompletionRequest  # noqa: E402
from tests.fakes.fake_model_api import start_fake_model_api  # noqa: E402
from tests.fakes.fake_token_api import FakeTokenAPI, codex_auth_json  # noqa: E402

KEY = "sk-proj-cli-proxy-dummy-key-7f3a"
LOGIN_START = {"type": "apiKey", "apiKey": KEY}


@dataclass(frozen=True)
class Case:
    what: str
    key: bool = True  # CODEX_API_KEY in the environment
    env_key: bool | None = None  # None: the backend's config as is; else without/with the line
    roa: bool | None = None  # None: as is; else requires_openai_auth = true/false
    login: str | None = None  # "chatgpt" / "chatgpt-expired": the user has this auth.json
    login_start: bool = False  # send account/login/start {type: apiKey} before the thread
    exec_: bool = False  # codex exec --json instead of app-server


CASES = {
    "no-env-key": Case("the gateway's config before the fix: requires_openai_auth only", env_key=False),
    "env-key": Case("the provider names the key's variable: env_key = CODEX_API_KEY", env_key=True),
    "login-start": Case("no env_key; account/login/start {type: apiKey} first", env_key=False, login_start=True),
    "login-start-and-chatgpt": Case(
        "no env_key; account/login/start {type: apiKey}, a ChatGPT login linked",
        env_key=False,
        login_start=True,
        login="chatgpt",
    ),
    "env-key-and-expired-chatgpt": Case(
        "key and env_key, an expired ChatGPT login linked", env_key=True, login="chatgpt-expired"
    ),
    "no-env-key-and-expired-chatgpt": Case(
        "the pre-fix config, key set, an expired ChatGPT login linked", env_key=False, login="chatgpt-expired"
    ),
    "env-key-no-openai-auth-and-expired-chatgpt": Case(
        "key, env_key, requires_openai_auth = false, an expired ChatGPT login linked",
        env_key=True,
        roa=False,
        login="chatgpt-expired",
    ),
    "gateway-key-and-expired-chatgpt": Case(
        "the backend's home and config as they are, key set, the user has an expired ChatGPT login",
        login="chatgpt-expired",
    ),
    "gateway-chatgpt": Case(
        "the backend's home and config as they are, no key, a ChatGPT login", key=False, login="chatgpt"
    ),
    "gateway-key": Case("the backend's home and config as they are, key set, no login"),
    "exec": Case("codex exec --json with the pre-fix config", env_key=False, exec_=True),
}


def edit_config(text: str, case: Case) -> str:
    """The backend's config.toml, or (an experiment) without/with env_key and with
    requires_openai_auth as the case says; an experiment links its login itself."""
    if case.env_key is None and case.roa is None:
        return text
    text = "".join(ln for ln in text.splitlines(keepends=True) if not ln.startswith("env_key"))
    if case.roa is not None:
        text = re.sub(r"requires_openai_auth = \w+", f"requires_openai_auth = {str(case.roa).lower()}", text)
    if case.env_key:
        text = text.replace('wire_api = "responses"\n', 'wire_api = "responses"\nenv_key = "CODEX_API_KEY"\n')
    return text


def key_files(home: Path) -> list[str]:
    """The private home's own files (not the linked login) holding the key, with the lines."""
    out = []
    for p in sorted(home.rglob("*")):
        if p.is_file() and not p.is_symlink() and KEY.encode() in p.read_bytes():
            lines = [ln.strip() for ln in p.read_text("utf-8", "replace").splitlines() if KEY in ln]
            out.append(f"{p.relative_to(home)}: {lines}")
    return out


async def run_case(codex: str, name: str, out: Path, suffix: str = "") -> None:
    case = CASES[name]
    api = await start_fake_model_api()
    token = await FakeTokenAPI(live="rt-0").start()
    tmp = Path(tempfile.mkdtemp(prefix="codex-key-probe-"))
    secrets_: dict[str, str] = {KEY: "key"}
    try:
        backend = CodexBackend(CodexBackend.options_from({"bin": codex, "base_url": api.url + "/v1"}))
        req = ChatCompletionRequest.model_validate(
            {"model": "gpt-5.5", "messages": [{"role": "user", "content": 'say hi @@fake {"answer": "Hi!"}'}]}
        )
        prompt = render(req, PromptOptions(native_tools=True), extract(req, ImageLimits()))
        user = tmp / "user"
        home = tmp / "home"
        work = tmp / "work"
        for d in (user / ".codex", home, work):
            d.mkdir(parents=True)
        auth = user / ".codex" / "auth.json"
        if case.login:
            now = time.time()
            expires = now - 3600 if case.login == "chatgpt-expired" else now + 3600
            last = time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime(now - 86400))
            data = codex_auth_json("rt-0", expires, last)
            auth.write_text(json.dumps(data, indent=2))
            auth.chmod(0o600)
            secrets_[data["tokens"]["id_token"]] = "id_token"
            secrets_[data["tokens"]["access_token"]] = "access_token"  # (the same JWT here)
        before = auth.read_bytes() if auth.exists() else b""
        env_in = {"PATH": os.environ["PATH"], "LANG": "C.UTF-8"}
        if case.key:
            env_in["CODEX_API_KEY"] = KEY
        saved = os.environ.get("CODEX_API_KEY")  # the backend's _config reads the gateway's env
        os.environ.pop("CODEX_API_KEY", None)
        if case.key:
            os.environ["CODEX_API_KEY"] = KEY
        try:
            spec = backend.private_home(str(user))
        finally:
            os.environ.pop("CODEX_API_KEY", None)
            if saved is not None:
                os.environ["CODEX_API_KEY"] = saved
        for rel, data_ in spec.files:
            content = data_.decode() if rel == "config.toml" else None
            (home / rel).write_bytes(edit_config(content, case).encode() if content is not None else data_)
        as_is = case.env_key is None and case.roa is None  # the backend's home, links and all
        links = spec.login if as_is else (("auth.json", str(auth)),) if case.login else ()
        for rel, real in links:
            (home / rel).symlink_to(real)
        env = backend.env(env_in)
        env.update({n: str(home) for n in spec.env})
        env["CODEX_REFRESH_TOKEN_URL_OVERRIDE"] = token.url + "/oauth/token"
        if case.exec_:
            argv = [codex, "exec", "--json", "--skip-git-repo-check", "--strict-config", "-"]
            proc = await asyncio.create_subprocess_exec(
                *argv,
                cwd=work,
                env=env,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
            )
            stdout_b, stderr_b = await asyncio.wait_for(proc.communicate(b'say hi @@fake {"answer": "Hi!"}'), 60)
            rc = proc.returncode
            lines = stdout_b.decode().splitlines()
            stderr = stderr_b.decode()
        else:
            argv = backend.argv(LaunchOptions(model="gpt-5.5", effort=None))
            parser = backend.new_parser(prompt, req)
            proc = await asyncio.create_subprocess_exec(
                *argv,
                cwd=work,
                env=env,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
                limit=1 << 24,
            )
            assert proc.stdin and proc.stdout
            first = backend.encode_prompt(prompt, req)
            if case.login_start:  # after the handshake, as a client logging in would
                start = {"id": 90, "method": "account/login/start", "params": LOGIN_START}
                first += json.dumps(start).encode() + b"\n"
            proc.stdin.write(first)
            lines = []
            t0 = time.monotonic()
            while time.monotonic() - t0 < 30:
                try:
                    line = await asyncio.wait_for(proc.stdout.readline(), 20)
                except TimeoutError:
                    break
                if not line:
                    break
                lines.append(line.decode().rstrip("\n"))
                parser.feed(line)
                proc.stdin.write(parser.replies())
                if parser.done:
                    break
            running = key_files(home)  # what the private home holds while codex still runs
            proc.stdin.close()
            try:
                rc = await asyncio.wait_for(proc.wait(), 5)
            except TimeoutError:
                proc.kill()
                rc = await proc.wait()
            lines += (await proc.stdout.read()).decode().splitlines()
            stderr = ""  # merged into stdout (merge_stderr)
        files = sorted(
            str(p.relative_to(home)) + (" -> the user's auth.json" if p.is_symlink() else "") for p in home.rglob("*")
        )
        keyfiles = key_files(home)
        if case.exec_:
            running = keyfiles

        def scrub(s: str) -> str:
            s = s.replace(api.url, "http://127.0.0.1:PORT").replace(token.url, "http://127.0.0.1:TOKENPORT")
            s = s.replace(str(tmp), "/tmp/PROBE").replace(api.url[7:], "127.0.0.1:PORT")
            refreshed = {a: "refreshed access_token" for a in token.accesses}
            for secret, label in {**secrets_, **refreshed}.items():
                s = s.replace(secret, f"<{label} …{secret[-4:]}>")
            return s

        upstream = [{"method": r["method"], "path": r["path"], "headers": r["headers"]} for r in api.requests]
        stem = out / f"codex-0.169.0-api-key-{name}{suffix}"
        Path(f"{stem}.headers.json").write_text(scrub(json.dumps(upstream, indent=1)) + "\n")
        Path(f"{stem}.stdout.jsonl").write_text(scrub("".join(s + "\n" for s in lines)))
        Path(f"{stem}.stderr.txt").write_text(scrub(stderr))
        Path(f"{stem}.rc").write_text(f"{rc}\n")
        after = auth.read_bytes() if auth.exists() else b""
        report = [
            f"case: {case.what}",
            f"CODEX_API_KEY set: {case.key}",
            "config.toml:",
            *("    " + ln for ln in scrub((home / "config.toml").read_text()).splitlines()),
            "private home at the call's end:",
            *("    " + f for f in files),
            f"files of the private home holding the key at the turn's end: {running or 'none'}",
            f"files of the private home holding the key after codex exited: {keyfiles or 'none'}",
            f"user's auth.json: {'absent' if not before else 'unchanged' if after == before else 'CHANGED'}",
            f"token endpoint requests: {len(token.requests)}",
        ]
        Path(f"{stem}.home.txt").write_text(scrub("\n".join(report)) + "\n")
        auths = [scrub(u["headers"].get("Authorization", "(none)")) for u in upstream]
        print(scrub(f"{name}: rc={rc} upstream={len(upstream)} authorization={auths} key files={keyfiles}"), flush=True)
    finally:
        await api.close()
        await token.close()
        shutil.rmtree(tmp, ignore_errors=True)


async def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--codex", required=True)
    p.add_argument("--out", type=Path, default=Path("tests/data/real-cli"))
    p.add_argument("--suffix", default="", help="appended to the file names (e.g. -before)")
    p.add_argument("cases", nargs="*")
    args = p.parse_args()
    for name in args.cases or list(CASES):
        await run_case(args.codex, name, args.out, args.suffix)


if __name__ == "__main__":
    asyncio.run(main())
