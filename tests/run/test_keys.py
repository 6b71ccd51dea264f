"""The keys file (cli_proxy/run/keys.py): what it accepts, what it refuses and where."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cli_proxy.run.keys import (
    API_KEY_NAME,
    EMPTY_SHA256,
    KeysFileError,
    TwoCredentials,
    load_keys,
    parse_keys,
)

CI_SHA = hashlib.sha256(b"sk-ci-2").hexdigest()
X1_SHA = hashlib.sha256(b"x1").hexdigest()
GOOD = f"""\
[keys.me]
secret = "sk-me-1"

[keys.ci]
secret_sha256 = "{CI_SHA}"
max_concurrent = 1
max_window_percent = 80
tokens_per_day = 200000
models = ["claude-*", "gemini-2.5-flash", "smart"]

[models.smart]
try = ["claude-sonnet-4-6", "gemini-2.5-flash"]
"""


def test_a_good_file_loads_with_its_limits_and_aliases() -> None:
    ring = parse_keys(GOOD, "k.toml")
    me, ci = ring.keys
    assert (me.name, me.limited, me.models) == ("me", False, None)
    assert ci.max_concurrent == 1 and ci.max_window_percent == 80 and ci.tokens_per_day == 200000
    assert ring.aliases == {"smart": ("claude-sonnet-4-6", "gemini-2.5-flash")}
    assert ring.match([b"sk-me-1"]) is me
    assert ring.match([b"sk-ci-2", b"sk-ci-2"]) is ci  # the same credential twice is one
    assert ring.match([b"sk-nope"]) is None
    assert ring.match([]) is None
    with pytest.raises(TwoCredentials):
        ring.match([b"sk-me-1", b"sk-ci-2"])
    with pytest.raises(TwoCredentials):
        ring.match([b"sk-me-1", b"wrong"])


def test_globs_allow_ids_and_aliases() -> None:
    ci = parse_keys(GOOD).keys[1]
    assert ci.allows("claude-opus-4-1") and ci.allows("smart") and ci.allows("gemini-2.5-flash")
    assert not ci.allows("gemini-2.5-pro") and not ci.allows("gpt-5")


def test_no_secret_in_repr() -> None:
    ring = parse_keys(GOOD)
    assert "sk-me-1" not in repr(ring) and hashlib.sha256(b"sk-me-1").hexdigest() not in repr(ring)


@pytest.mark.parametrize(
    ("text", "needle", "line"),
    [
        ('[keys.a]\nsecret = ""\n', "empty or blank secret", 2),
        ('[keys.a]\nsecret = "   "\n', "empty or blank secret", 2),
        ('[keys.a]\nsecret = " sk-x"\n', "leading or trailing spaces", 2),
        ('[keys.a]\nsecret = "sk-x\\t"\n', "leading or trailing spaces", 2),
        (f'[keys.a]\nsecret_sha256 = "{EMPTY_SHA256}"\n', "SHA-256 of an empty secret", 2),
        ('[keys.a]\nsecret_sha256 = "abc"\n', "not 64 hex digits", 2),
        ('[keys.a]\nsecret = "x1"\n[keys.b]\nsecret = "x1"\n', "same secret as key 'a'", 4),
        (
            f'[keys.a]\nsecret = "x1"\n[keys.b]\nsecret_sha256 = "{X1_SHA}"\n',
            "same secret as key 'a'",
            4,
        ),
        ("[keys.a]\nmax_concurrent = 1\n", "exactly one of secret, secret_sha256", 1),
        ('[keys.a]\nsecret = "x"\nmax_concurent = 1\n', "unknown field 'max_concurent'", 3),
        ('[keys.a]\nsecret = "x"\n[limits]\n', "unknown table 'limits'", None),
        ('[keys.a]\nsecret = "x"\nmax_concurrent = 0\n', "max_concurrent", 3),
        ('[keys.a]\nsecret = "x"\nmax_window_percent = 120\n', "max_window_percent", 3),
        (
            '[keys.a]\nsecret = "x"\n[models.s]\ntry = ["t"]\n[models.t]\ntry = ["m"]\n',
            "alias 's' names the alias 't'",
            4,
        ),
        ('[keys.a]\nsecret = "x"\n[models.s]\ntry = ["s"]\n', "alias 's' names itself", 4),
        ('[keys.a]\nsecret = "x"\n[models.s]\ntry = []\n', "models.s.try", 4),
        ('[keys.a]\nsecret = "x"\n[models.s]\ntry = ["m", "m"]\n', "a target twice", 4),
        ('[keys.a]\nsecret = "x"\n[models.s]\ntries = ["m"]\n', "unknown field 'tries'", 4),
        ('[keys.a\nsecret = "x"\n', "not valid TOML", None),
        ("", "no key defined", None),
        (f'[keys.{API_KEY_NAME}]\nsecret = "x"\n', "kept for --api-key", 1),
    ],
)
def test_refusals_name_the_problem_and_its_line(text: str, needle: str, line: int | None) -> None:
    with pytest.raises(KeysFileError) as err:
        parse_keys(text, "k.toml")
    message = str(err.value)
    assert needle in message, message
    if line is not None:
        assert f"k.toml, line {line}:" in message, message
    for secret in ("sk-x", "x1"):
        assert f'"{secret}"' not in message  # never quotes a secret


def test_a_loop_of_aliases_is_refused() -> None:
    text = '[keys.a]\nsecret = "x"\n[models.p]\ntry = ["q"]\n[models.q]\ntry = ["p"]\n'
    with pytest.raises(KeysFileError, match="names the alias"):
        parse_keys(text)


def test_load_keys_reads_a_file_and_names_it_when_missing(tmp_path: Path) -> None:
    path = tmp_path / "keys.toml"
    path.write_text(GOOD)
    assert [k.name for k in load_keys(path).keys] == ["me", "ci"]
    with pytest.raises(KeysFileError, match=str(tmp_path / "nope.toml")):
        load_keys(tmp_path / "nope.toml")


def test_api_keys_join_as_one_unnamed_unlimited_key() -> None:
    ring = parse_keys(GOOD).with_api_keys(["sk-op", "sk-op2"])
    op = ring.match([b"sk-op"])
    assert op is not None and op.name == API_KEY_NAME and not op.limited and op.models is None
    assert ring.match([b"sk-op2"]) is not None
    with pytest.raises(KeysFileError, match="same secret as key 'me'"):
        parse_keys(GOOD).with_api_keys(["sk-me-1"])


@given(st.text(min_size=1, max_size=40), st.text(min_size=1, max_size=40))
def test_matching_is_by_exact_secret(secret: str, other: str) -> None:
    if secret != secret.strip() or not secret.strip() or '"' in secret or "\\" in secret:
        return
    if any(ord(c) < 32 or ord(c) == 127 for c in secret):
        return
    ring = parse_keys(f'[keys.k]\nsecret = "{secret}"\n')
    assert ring.match([secret.encode()]) is ring.keys[0]
    if other != secret:
        assert ring.match([other.encode()]) is None
