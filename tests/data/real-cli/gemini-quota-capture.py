#!/usr/bin/env python3
"""What gemini 0.61.0 over ACP says about quota, driven as the gateway drives it.

    .venv/bin/python tests/data/real-cli/gemini-quota-capture.py PATH/TO/gemini [CASE...]

argv, env, work-dir files and the private GEMINI_CLI_HOME come from ``GeminiBackend``; stdin
gets its ``encode_prompt`` (initialize, session/new) and then whatever its parser replies.
``oauth-*``: "Login with Google" (an expired access token refreshed through the loopback
CONNECT proxy at tests/fakes/fake_token_api.py) against the fake Code Assist API
(tests/fakes/fake_quota_api.py: ``retrieveUserQuota`` answers ``QUOTA``, ``loadCodeAssist`` adds
``LOAD``). ``apikey-*``: ``GEMINI_API_KEY`` against the fake Gemini API. ``*-429-*``: every
model call answers that 429 body; ``apikey-400-key-invalid`` the 400 of a key the API does
not know. In ``oauth-slow-call`` the model answers after 31 s (the
CLI re-reads the quota after a call when its copy is older than 30 s). Writes
``gemini-0.61.0-quota-CASE.{stdout.jsonl,stderr.txt,rc,calls.json}`` (calls: every Code
Assist / Gemini API call in order, with seconds since spawn and the quota bodies; CONNECTs).
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
from typing import Any

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

from cli_proxy.backends.base import LaunchOptions  # noqa: E402
from cli_proxy.backends.gemini.backend import GeminiBackend, GeminiOptions  # noqa: E402
from cli_proxy.plan.prompt import render  # noqa: E402
from cli_proxy.protocol import ChatCompletionRequest  # noqa: E402
from tests.fakes.fake_connect_proxy import ConnectProxy  # noqa: E402
from tests.fakes.fake_quota_api import QuotaCodeAssist, QuotaModelAPI  # noqa: E402
from tests.fakes.fake_token_api import FakeTokenAPI  # noqa: E402

OUT = Path(__file__).resolve().parent
MODEL = "gemini-2.5-flash"
RESET = "2026-11-29T00:00:00Z"
QUOTA = {  # retrieveUserQuota: BucketInfo fields as gemini-cli's code_assist/types.ts has them
    "buckets": [
        {
            "modelId": "gemini-2.5-flash",
            "tokenType": "REQUESTS",
            "remainingFraction": 0.958,
            "remainingAmount": "1437",
            "resetTime": RESET,
        },
        {
            "modelId": "gemini-2.5-pro",
            "tokenType": "REQUESTS",
            "remainingFraction": 1.0,
            "resetTime": RESET,
        },
    ]
}
LOAD = {"paidTier": {"id": "standard-tier", "name": "Gemini Code Assist Standard"}}
HELP = {
    "@type": "type.googleapis.com/google.rpc.Help",
    "links": [
        {"description": "Learn more", "url": "https://ai.google.dev/gemini-api/docs/rate-limits"}
    ],
}


def quota_failure(quota_id: str) -> dict[str, Any]:
    violation = {
        "quotaMetric": "generativelanguage.googleapis.com/generate_content_requests",
        "quotaId": quota_id,
        "quotaDimensions": {"model": MODEL},
        "quotaValue": "10",
    }
    return {"@type": "type.googleapis.com/google.rpc.QuotaFailure", "violations": [violation]}


def error(message: str, *details: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    body = {"code": 429, "message": message, "status": "RESOURCE_EXHAUSTED"}
    return 429, {"error": {**body, "details": list(details)}}


def retry(seconds: str) -> dict[str, Any]:
    return {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": seconds}


def error_info(reason: str, **metadata: str) -> dict[str, Any]:
    return {
        "@type": "type.googleapis.com/google.rpc.ErrorInfo",
        "reason": reason,
        "domain": "cloudcode-pa.googleapis.com",
        "metadata": metadata,
    }


KEY_INVALID = "API key not valid. Please pass a valid API key."
KEY_REFUSED = (  # what the Gemini API answers a key it does not know
    400,
    {
        "error": {
            "code": 400,
            "message": KEY_INVALID,
            "status": "INVALID_ARGUMENT",
            "details": [
                {
                    "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                    "reason": "API_KEY_INVALID",
                    "domain": "googleapis.com",
                    "metadata": {"service": "generativelanguage.googleapis.com"},
                },
                {
                    "@type": "type.googleapis.com/google.rpc.LocalizedMessage",
                    "locale": "en-US",
                    "message": KEY_INVALID,
                },
            ],
        }
    },
)
API_QUOTA = "You exceeded your current quota, please check your plan and billing details."
CAPACITY = "You have exhausted your capacity on this model. Your quota will reset after 2h30m0s."
CASES: dict[str, tuple[str, Any]] = {  # case -> (login, error answered to every model call)
    "oauth-text": ("oauth", None),
    "oauth-slow-call": ("oauth", None),
    "oauth-429-quota-exhausted": (
        "oauth",
        error(
            CAPACITY,
            error_info(
                "QUOTA_EXHAUSTED",
                quotaResetDelay="2h30m0s",
                quotaResetTimeStamp="2026-11-28T05:30:00Z",
            ),
            retry("9000s"),
        ),
    ),
    "oauth-429-rate-limit": (
        "oauth",
        error("Rate limit exceeded.", error_info("RATE_LIMIT_EXCEEDED"), retry("20s")),
    ),
    "apikey-text": ("apikey", None),
    "apikey-429-per-minute": (
        "apikey",
        error(
            API_QUOTA + " Please retry in 37.2s.",
            quota_failure("GenerateRequestsPerMinutePerProjectPerModel-FreeTier"),
            HELP,
            retry("37s"),
        ),
    ),
    "apikey-429-per-day": (
        "apikey",
        error(
            API_QUOTA,
            quota_failure("GenerateRequestsPerDayPerProjectPerModel-FreeTier"),
            HELP,
            retry("20000s"),
        ),
    ),
    "apikey-400-key-invalid": ("apikey", KEY_REFUSED),
}


async def run(gemini: str, case: str) -> None:
    login, err = CASES[case]
    api = await QuotaModelAPI(error=err if login == "apikey" else None, log_unknown=False).start()
    token = await FakeTokenAPI(live="1//rt-0", rotate=False).start()
    assist = QuotaCodeAssist(api.url, token.issued, quota=QUOTA, load=LOAD)
    assist.error = err if login == "oauth" else None
    await assist.start()
    proxy = ConnectProxy(["oauth2.googleapis.com", "www.googleapis.com"], int(token.url[17:]))
    await proxy.start()
    backend = GeminiBackend(GeminiOptions(bin=gemini))
    text = "say hi" + (' @@fake {"initial_delay": 31}' if case == "oauth-slow-call" else "")
    req = ChatCompletionRequest.model_validate(
        {"model": MODEL, "messages": [{"role": "user", "content": text}]}
    )
    prompt = render(req)
    parser = backend.new_parser(prompt, req)
    timeline: list[str] = []
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        user, work, home = Path(tmp, "user"), Path(tmp, "work"), Path(tmp, "home")
        for d in (user / ".gemini", work, home):
            d.mkdir(parents=True)
        auth = "oauth-personal" if login == "oauth" else "gemini-api-key"
        settings = {"security": {"auth": {"selectedType": auth}}}
        (user / ".gemini" / "settings.json").write_text(json.dumps(settings))
        if login == "oauth":
            creds = {
                "access_token": "ya29.expired",
                "refresh_token": "1//rt-0",
                "scope": "https://www.googleapis.com/auth/cloud-platform",
                "token_type": "Bearer",
                "expiry_date": int((time.time() - 60) * 1000),
            }
            (user / ".gemini" / "oauth_creds.json").write_text(json.dumps(creds))
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
            "PATH": os.environ["PATH"],
            "HOME": str(user),
            "HTTPS_PROXY": proxy.url,
            "NO_PROXY": "127.0.0.1",
            "NODE_EXTRA_CA_CERTS": str(proxy.ca_pem),
        }
        if login == "apikey":
            base |= {"GEMINI_API_KEY": "test", "GOOGLE_GEMINI_BASE_URL": api.url}
        env = {**backend.env(base), "HOME": str(home), "GEMINI_CLI_HOME": str(home)}
        if login == "oauth":  # not in the backend's env allowlist (the tests pass it on)
            env["CODE_ASSIST_ENDPOINT"] = assist.url
        env["TMPDIR"] = str(work)
        proc = await asyncio.create_subprocess_exec(
            *backend.argv(launch),
            cwd=work,
            env=env,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,
            limit=1 << 24,
        )
        assert proc.stdin and proc.stdout and proc.stderr
        proc.stdin.write(backend.encode_prompt(prompt, req))
        out: list[bytes] = []

        def note(what: str) -> None:
            timeline.append(f"{time.monotonic() - t0:7.2f}s {what}")

        async def read_out() -> None:
            assert proc.stdout and proc.stdin
            while line := await proc.stdout.readline():
                out.append(line)
                note("stdout " + line.decode()[:160].rstrip())
                parser.feed(line)
                if reply := parser.replies():
                    proc.stdin.write(reply)
                if parser.done and not proc.stdin.is_closing():
                    proc.stdin.close()

        err_task = asyncio.create_task(proc.stderr.read())
        try:
            await asyncio.wait_for(read_out(), 120)
            rc = str(await proc.wait())
        except TimeoutError:
            os.killpg(proc.pid, signal.SIGKILL)
            rc = f"killed after 120 s (rc {await proc.wait()})"
        stderr = (await err_task).replace(tmp.encode(), b"$TMP")
        stem = OUT / f"gemini-0.61.0-quota-{case}"
        Path(f"{stem}.stdout.jsonl").write_bytes(b"".join(out))
        Path(f"{stem}.stderr.txt").write_bytes(stderr)
        Path(f"{stem}.rc").write_text(rc + "\n")
        keep = ("retrieveUserQuota", "loadCodeAssist")
        calls = [
            {"at_s": round(t - t0, 2), "method": m, "body": b if m in keep else "..."}
            for m, b, t in assist.calls
        ]
        model_calls = [r["path"] for r in api.requests]
        record = {
            "code_assist_calls": calls,
            "gemini_api_calls": model_calls,
            "answers": {
                "retrieveUserQuota": QUOTA,
                "loadCodeAssist_extra": LOAD,
                "model_call_error": err,
            },
            "connects": proxy.connects,
            "refused_connects": proxy.refused,
            "timeline": timeline,
        }
        text = json.dumps(record, indent=1).replace(tmp, "$TMP").replace(api.url, "API")
        Path(f"{stem}.calls.json").write_text(text.replace(assist.url, "CODE_ASSIST") + "\n")
        print(f"{case}: rc={rc} assist={[c[0] for c in assist.calls]} api={model_calls}")
    await proxy.close()
    await assist.close()
    await token.close()
    await api.close()


async def main() -> None:
    for case in sys.argv[2:] or list(CASES):
        await run(str(Path(sys.argv[1]).resolve()), case)


if __name__ == "__main__":
    asyncio.run(main())
