"""``GET /status`` over real HTTP, the fake CLIs as real processes: what the page shows after
a known mix of calls, who may see it (the API key as a Bearer token or as Basic auth's
password, never in the URL; the Host/Origin guard), that everything in it is escaped and
no prompt or answer ever is, and that its memory of requests stays at 50."""

from __future__ import annotations

import base64
import json
import threading
import time
from html.parser import HTMLParser
from pathlib import Path

import aiohttp
import pytest

from cli_proxy.server import status as status_module
from cli_proxy.server.calls_log import CallRecord
from cli_proxy.server.status import presented_key
from tests.conftest import Served, ServeFactory, fake

CANARY_PROMPT = "CANARY-PROMPT-5e1d0c"
CANARY_ANSWER = "CANARY-ANSWER-a47f92"
HOSTILE = "<script>alert('x')</script><img src=x onerror=alert(1)>&\"'"


class Page(HTMLParser):
    """The page's tags: every start tag with its attributes, the text of each call row."""

    def __init__(self, text: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.rows: list[list[str]] = []
        self._row: list[str] | None = None
        self._cell: list[str] | None = None
        self.feed(text)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        self.tags.append((tag, a))
        if tag == "tr" and a.get("class") == "call":
            self._row = []
        elif tag == "td" and self._row is not None:
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag == "td" and self._row is not None and self._cell is not None:
            self._row.append("".join(self._cell).strip())
            self._cell = None
        elif tag == "tr" and self._row is not None:
            self.rows.append(self._row)
            self._row = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)

    def meters(self, **data: str) -> list[dict[str, str | None]]:
        return [
            a
            for t, a in self.tags
            if t == "meter" and all(a.get(f"data-{k}") == v for k, v in data.items())
        ]


def root(served: Served) -> str:
    return served.base_url.removesuffix("/v1")


async def get_status(
    served: Served, path: str = "/status", expect: int = 200, **headers: str
) -> tuple[str, aiohttp.ClientResponse]:
    async with aiohttp.ClientSession() as s, s.get(root(served) + path, headers=headers) as r:
        text = await r.text()
        assert r.status == expect, text
        return text, r


async def status_with_versions(served: Served, **headers: str) -> str:
    """The page once the binaries' probe (doctor's check, in worker threads) is in."""
    deadline = time.monotonic() + 30
    while True:
        text, _ = await get_status(served, **headers)
        if "checking…" not in text or time.monotonic() > deadline:
            return text


async def post(served: Served, body: dict[str, object], **headers: str) -> int:
    async with (
        aiohttp.ClientSession() as s,
        s.post(f"{served.base_url}/chat/completions", json=body, headers=headers) as r,
    ):
        await r.read()
        return r.status


def user(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


async def test_the_page_after_a_known_mix_of_calls(serve: ServeFactory) -> None:
    served = await serve()
    resets = time.time() + 2 * 3600 + 12 * 60 + 30
    window = {"status": "allowed_warning", "rateLimitType": "five_hour", "utilization": 0.42}
    ok = fake(answer=CANARY_ANSWER, rate_limit={**window, "resetsAt": resets})
    limited = fake(
        rate_limit={"status": "rejected", "rateLimitType": "seven_day", "utilization": 1.0},
        is_error=True,
        api_error_status=429,
        error_message="API Error: 429 rate limited",
        exit=1,
        print_before_exit=True,
    )
    broken = fake(exit=3, no_result=True, stderr="boom")
    model = "claude-sonnet-4-6"
    assert await post(served, {"model": model, "messages": user(CANARY_PROMPT + ok)}) == 200
    assert await post(served, {"model": model, "messages": user(CANARY_PROMPT + limited)}) == 429
    assert await post(served, {"model": model, "messages": user(CANARY_PROMPT + broken)}) == 502
    assert await post(served, {"model": "nope-1", "messages": user(CANARY_PROMPT)}) == 404

    text = await status_with_versions(served)
    page = Page(text)
    assert CANARY_PROMPT not in text and CANARY_ANSWER not in text
    assert '<meta http-equiv="refresh" content="5">' in text
    # the last requests, newest first: time, API, backend, model, status, duration, first
    # content, tokens in, cached, out, start
    assert [r[4] for r in page.rows] == [
        "404 model_not_found",
        "502 cli_error",
        "429 rate_limit_exceeded",
        "200",
    ]
    assert [r[3] for r in page.rows] == ["\u2013", model, model, model]
    assert [r[10] for r in page.rows] == ["\u2013", "cold", "cold", "cold"]
    assert page.rows[3][7] != "\u2013" and int(page.rows[3][9]) > 0  # tokens in and out
    # each window as a bar with its reset time
    five = page.meters(backend="claude", window="five_hour")
    assert len(five) == 1 and five[0]["value"] == "0.42" and five[0]["max"] == "1.0"
    assert page.meters(backend="claude", window="seven_day")[0]["value"] == "1.0"
    assert "resets in 2 h 12 min (" in text
    assert "rejected" in text and "allowed_warning" in text
    # the gateway: bounds, served, errors of the last hour
    gauges = {a.get("data-gauge"): a for t, a in page.tags if t == "meter" and "data-gauge" in a}
    assert gauges["calls running"]["max"] == "8" and gauges["calls running"]["value"] == "0"
    assert gauges["calls queued"]["max"] == "32"
    assert "<dd>4 since start</dd>" in text
    assert "<dd>3: 0 warm, 3 cold</dd>" in text
    assert "off: every call starts its CLI cold" in text
    errors = text[text.index('id="errors"') :]
    for kind in ("rate_limit_exceeded", "cli_error", "model_not_found"):
        assert f'<td>{kind}</td><td class="n">1</td>' in errors
    # per backend: binary and version as doctor says it (the fakes' versions are untested)
    for name, version, pin in (
        ("claude", "2.1.197-fake", "2.1.197"),
        ("gemini", "0.61.0-fake", "0.61.0"),
        ("codex", "0.169.0-fake", "0.169.0"),
    ):
        assert f'id="backend-{name}"' in text
        assert f'{version} <span class="warn">untested: the tests pin {pin}</span>' in text
    assert "fake_cli.py claude</code>" in text


async def test_logins_show_kind_file_and_expiry_never_a_token(
    serve: ServeFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for var in ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.delenv("CLAUDE_CONFIG_DIR", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    creds = tmp_path / ".claude" / ".credentials.json"
    creds.parent.mkdir()
    expires_ms = (time.time() + 3 * 3600 + 600) * 1000
    creds.write_text(
        '{"claudeAiOauth": {"accessToken": "sk-ant-oat01-SECRET-ACCESS", '
        f'"refreshToken": "sk-ant-ort01-SECRET-REFRESH", "expiresAt": {expires_ms}}}}}'
    )
    served = await serve()
    text = await status_with_versions(served)
    login = text[text.index('data-login="claude"') :]
    login = login[: login.index("</dd>")]
    assert "claude.ai oauth <code>~/.claude/.credentials.json</code>" in login
    assert "access token expires in 3 h 10 min" in login or "in 3 h 9 min" in login
    assert "SECRET" not in text
    assert '<h3>claude<span class="ok badge">ready</span></h3>' in text
    # the file changes (a refresh landed, or the token expired): the next view says so
    expired_ms = (time.time() - 20 * 60) * 1000
    creds.write_text(
        '{"claudeAiOauth": {"accessToken": "x-SECRET", "refreshToken": "y-SECRET", '
        f'"expiresAt": {expired_ms}, "pad": 1}}}}'
    )
    text, _ = await get_status(served)
    assert "access token expired 20 min ago" in text
    assert "SECRET" not in text


KEYLESS_GEMINI = (
    "GEMINI_API_KEY",
    "GOOGLE_API_KEY",
    "GOOGLE_GENAI_USE_VERTEXAI",
    "GOOGLE_CLOUD_PROJECT",
    "GOOGLE_CLOUD_PROJECT_ID",
)


@pytest.mark.parametrize("key", [None, "GOOGLE_CLOUD_PROJECT"])
async def test_a_personal_google_login_alone_is_warned_of(
    serve: ServeFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, key: str | None
) -> None:
    """gemini with only a personal "Login with Google" (refused by Code Assist since
    2026-06-18): the card warns and names what still works; a Code Assist project
    (Standard/Enterprise) takes the warning away."""
    for var in KEYLESS_GEMINI:
        monkeypatch.delenv(var, raising=False)
    if key is not None:
        monkeypatch.setenv(key, "my-project")
    monkeypatch.setenv("HOME", str(tmp_path))
    gemini = tmp_path / ".gemini"
    gemini.mkdir()
    (gemini / "settings.json").write_text(
        '{"security": {"auth": {"selectedType": "oauth-personal"}}}'
    )
    expires_ms = (time.time() + 3600) * 1000
    creds = {"access_token": "ya29.SECRET", "refresh_token": "1//SECRET", "expiry_date": expires_ms}
    (gemini / "oauth_creds.json").write_text(json.dumps(creds))
    served = await serve()
    text = await status_with_versions(served)
    assert "SECRET" not in text
    if key is not None:
        assert 'data-warning="gemini"' not in text
        return
    warning = text[text.index('<dt>warning</dt><dd class="warn" data-warning="gemini">') :]
    warning = warning[: warning.index("</dd>")]
    assert "only a Google login and no key: since 2026-06-18" in warning
    for works in ("GEMINI_API_KEY", "Vertex AI", "Standard or Enterprise", "copilot/gemini-"):
        assert works in warning, warning
    assert 'data-warning="claude"' not in text


async def test_views_are_cheap_the_binaries_are_probed_once(
    serve: ServeFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    probed: list[str] = []
    check = status_module.check_backend

    def counting(name: str, *args: object) -> object:
        probed.append(name)
        return check(name, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(status_module, "check_backend", counting)
    served = await serve()
    await status_with_versions(served)
    for _ in range(5):
        await get_status(served)
    assert sorted(probed) == ["claude", "codex", "copilot", "gemini"]


async def test_a_slow_probe_never_holds_a_view_long(
    serve: ServeFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    check = status_module.check_backend
    release = threading.Event()

    def slow(name: str, *args: object) -> object:
        release.wait(30)  # a CLI slow to say its version (in a worker thread)
        return check(name, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(status_module, "check_backend", slow)
    monkeypatch.setattr(status_module, "PROBE_WAIT_S", 0.2)
    served = await serve()
    text, _ = await get_status(served)  # the probe is held: the view did not wait for it
    assert '<dd class="muted">checking…</dd>' in text
    assert "calls running" in text
    release.set()
    text = await status_with_versions(served)
    assert 'data-version="claude"' in text


# ---------------------------------------------------------------- who may see it


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


async def test_with_a_key_the_page_needs_it_as_bearer_or_basic_password(
    serve: ServeFactory,
) -> None:
    served = await serve(api_keys=["sekret", "other-key"])
    text, r = await get_status(served, expect=401)
    assert r.headers["WWW-Authenticate"] == 'Basic realm="cli-proxy"'
    assert "invalid_api_key" in text
    await get_status(served, Authorization="Bearer sekret")
    await get_status(served, Authorization="Bearer other-key")
    await get_status(served, Authorization=basic("anyone", "sekret"))
    await get_status(served, Authorization=basic("", "other-key"))
    for wrong in (
        "Bearer wrong",
        "Bearer ",
        basic("anyone", "wrong"),
        basic("sekret", ""),  # the key as the user name
        "Basic sekret",  # not base64 of user:password
        "Basic !!!",
        "Token sekret",
    ):
        _, r = await get_status(served, expect=401, Authorization=wrong)
        assert r.headers["WWW-Authenticate"] == 'Basic realm="cli-proxy"'
    # never in the URL
    for query in ("?key=sekret", "?api_key=sekret", "?token=sekret"):
        await get_status(served, path="/status" + query, expect=401)
    # the API itself still takes the key only as a Bearer token
    async with (
        aiohttp.ClientSession() as s,
        s.get(root(served) + "/metrics", headers={"Authorization": basic("u", "sekret")}) as r2,
    ):
        assert r2.status == 401
        assert "WWW-Authenticate" not in r2.headers


async def test_without_keys_the_page_is_open(served: Served) -> None:
    _, r = await get_status(served)
    assert r.content_type == "text/html" and r.charset == "utf-8"
    assert r.headers["Cache-Control"] == "no-store"
    assert "default-src 'none'" in r.headers["Content-Security-Policy"]


async def test_the_guard_refuses_foreign_hosts_and_origins(served: Served) -> None:
    text, _ = await get_status(served, expect=403, Host="evil.example")
    assert "host_not_allowed" in text
    text, _ = await get_status(served, expect=403, Origin="http://evil.example")
    assert "origin_not_allowed" in text
    await get_status(served, Host="localhost")


def test_presented_key() -> None:
    assert presented_key("Bearer k") == b"k"
    assert presented_key(basic("u", "p:q")) == b"p:q"  # a password may hold a colon
    assert presented_key("Basic " + base64.b64encode(b"no-colon").decode()) is None
    assert presented_key("Basic ünïcode") is None
    assert presented_key("") is None


# ---------------------------------------------------------------- what it never shows


async def test_everything_is_escaped(served: Served) -> None:
    # a client cannot get such a model name past validation...
    body = {"model": HOSTILE, "messages": user(CANARY_PROMPT)}
    assert await post(served, body) == 400
    # ...but the page must not depend on that: a record and a window with hostile names
    served.metrics.observe(CallRecord("chat", "claude", HOSTILE, 502, HOSTILE, 0.1, warm=False))
    hostile_window = {"status": HOSTILE, "rateLimitType": HOSTILE, "utilization": 0.5}
    directive = fake(answer="ok", rate_limit=hostile_window)
    assert await post(served, {"model": "claude-sonnet-4-6", "messages": user(directive)}) == 200

    text, _ = await get_status(served)
    page = Page(text)
    assert HOSTILE not in text
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in text
    tags = {t for t, _ in page.tags}
    assert not tags & {"script", "img", "iframe", "object", "embed", "link", "form"}
    assert not [a for _, a in page.tags for k in a if k.startswith("on")]
    assert any(r[3] == HOSTILE for r in page.rows)  # shown, as text
    assert page.meters(backend="claude", window=HOSTILE)
    assert CANARY_PROMPT not in text


async def test_the_memory_of_requests_stays_at_50(served: Served) -> None:
    for i in range(60):
        assert await post(served, {"model": f"nope-{i}", "messages": user("x")}) == 404
    text, _ = await get_status(served)
    page = Page(text)
    assert len(page.rows) == 50
    assert "<h2>Last 50 requests</h2>" in text
    assert "<dd>60 since start</dd>" in text
    assert len(served.metrics.calls.recent) == 50
    errors = text[text.index('id="errors"') :]
    assert '<td>model_not_found</td><td class="n">60</td>' in errors
