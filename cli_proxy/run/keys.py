"""Named client keys and model aliases: the keys file (``--keys FILE``, docs/keys.md).

One TOML file says who may call the gateway and within which limits::

    [keys.ci]
    secret_sha256 = "<hex sha256 of the secret>"   # or: secret = "sk-..."
    max_concurrent = 1
    max_window_percent = 80
    tokens_per_day = 200000
    models = ["claude-*", "smart"]
    [models.smart]
    try = ["claude-sonnet-4-6", "gemini-2.5-flash"]

Everything is checked at load (start and SIGHUP); a refusal is a ``KeysFileError`` whose
message names the problem and, where the file says it, its line. Only the SHA-256 of each
secret is kept in memory; a presented credential is hashed and compared in constant time
(``hmac.compare_digest``), so neither the secret nor its length leaks through timing.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import tomllib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from fnmatch import translate
from functools import lru_cache
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()
API_KEY_NAME = "api-key"
"""The name of the unnamed key(s) given with ``--api-key``: no limits, every model."""
_HEX64 = re.compile(r"[0-9a-f]{64}")


class KeysFileError(ValueError):
    """The keys file cannot be used as it stands; the message says why and where."""


class TwoCredentials(Exception):
    """A request presented two different credentials (say Bearer and x-api-key)."""


class _KeyEntry(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    secret: str | None = None
    secret_sha256: str | None = None
    max_concurrent: int | None = Field(default=None, ge=1)
    max_window_percent: float | None = Field(default=None, gt=0, le=100)
    tokens_per_day: int | None = Field(default=None, ge=1)
    models: list[str] | None = None


class _AliasEntry(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    try_: list[str] = Field(alias="try", min_length=1)


class _KeysFile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    keys: dict[str, _KeyEntry] = Field(default_factory=dict)
    models: dict[str, _AliasEntry] = Field(default_factory=dict)


@lru_cache(maxsize=256)
def globs(patterns: tuple[str, ...]) -> re.Pattern[str]:
    """A key's ``models`` globs as one pattern, compiled once per list: ``fnmatchcase``
    per glob and call cost a keyed call 34 µs in a gateway, this 18 (docs/performance.md)."""
    return re.compile("|".join(f"(?:{translate(p)})" for p in patterns) or "(?!)")  # (): none


def digest(secret: bytes) -> bytes:
    """The SHA-256 of a credential: what is kept and compared."""
    return hashlib.sha256(secret).digest()


@dataclass(frozen=True, slots=True)
class ClientKey:
    """One client key: its name (logs, metrics, usage; never the secret), the SHA-256 of its
    secret, and its limits (None: no limit)."""

    name: str
    sha256: bytes = field(repr=False)
    max_concurrent: int | None = None
    max_window_percent: float | None = None
    tokens_per_day: int | None = None
    models: tuple[str, ...] | None = None
    """Allowed model ids or aliases (``fnmatch`` globs); None: every model."""

    def allows(self, model: str) -> bool:
        """May this key ask for ``model`` (an id or an alias)?"""
        return self.models is None or globs(self.models).match(model) is not None

    @property
    def limited(self) -> bool:
        return any(
            v is not None
            for v in (self.max_concurrent, self.max_window_percent, self.tokens_per_day)
        )

    def limits(self) -> dict[str, Any]:
        """The limits as ``/status`` shows them."""
        return {
            "max_concurrent": self.max_concurrent,
            "max_window_percent": self.max_window_percent,
            "tokens_per_day": self.tokens_per_day,
            "models": list(self.models) if self.models is not None else None,
        }


@dataclass(frozen=True)
class KeyRing:
    """Every key the gateway accepts, and the aliases: one immutable value, swapped whole on
    reload (a call holds the ``ClientKey`` it was admitted with)."""

    keys: tuple[ClientKey, ...] = ()
    aliases: dict[str, tuple[str, ...]] = field(default_factory=dict)
    source: str = ""

    @property
    def enabled(self) -> bool:
        """Does the gateway ask for a key at all?"""
        return bool(self.keys)

    def by_name(self, name: str) -> ClientKey | None:
        return next((k for k in self.keys if k.name == name), None)

    def match(self, presented: Sequence[bytes]) -> ClientKey | None:
        """The key the request's credentials name, or None (none given, or not one of
        ours). Every credential is hashed and compared with every key in constant time.
        Two different credentials in one request raise ``TwoCredentials``."""
        if not presented:
            return None
        digests = {digest(p) for p in presented}
        if len(digests) > 1:
            raise TwoCredentials
        (given,) = digests
        found: ClientKey | None = None
        for key in self.keys:  # no early exit: the time does not say which key matched
            if hmac.compare_digest(given, key.sha256) and found is None:
                found = key
        return found

    def targets(self, model: str) -> tuple[str, ...] | None:
        """An alias's targets in order, or None when ``model`` is no alias."""
        return self.aliases.get(model)

    def with_api_keys(self, secrets: Iterable[str]) -> KeyRing:
        """This ring plus the ``--api-key`` secrets, as one unnamed key without limits."""
        extra: list[ClientKey] = []
        for secret in secrets:
            d = digest(secret.encode())
            for key in (*self.keys, *extra):
                if hmac.compare_digest(key.sha256, d):
                    if key.name == API_KEY_NAME:
                        break
                    raise KeysFileError(
                        f"--api-key has the same secret as key '{key.name}' of {self.source}"
                    )
            else:
                extra.append(ClientKey(API_KEY_NAME, d))
        return KeyRing((*self.keys, *extra), self.aliases, self.source)


def _line(text: str, table: str, key: str | None = None) -> int | None:
    """The line (1-based) of ``[table]`` or of ``key = ...`` inside it, if written plainly."""
    header = re.compile(r"^\s*\[\s*([^\[\]]+?)\s*\]\s*(#.*)?$")
    current, header_line = None, None
    wanted = re.sub(r"\s+", "", table)
    for n, raw in enumerate(text.splitlines(), 1):
        m = header.match(raw)
        if m:
            current = re.sub(r"[\s\"']", "", m.group(1))
            if current == wanted:
                header_line = n
                if key is None:
                    return n
            continue
        if (
            current == wanted
            and key is not None
            and re.match(rf"^\s*[\"']?{re.escape(key)}[\"']?\s*=", raw)
        ):
            return n
    return header_line


def _at(source: str, line: int | None) -> str:
    return f"{source}, line {line}" if line else source


def parse_keys(text: str, source: str = "keys file") -> KeyRing:
    """The ``KeyRing`` a keys file's text says, or ``KeysFileError`` naming what is wrong."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise KeysFileError(f"{source}: not valid TOML: {exc}") from None
    try:
        parsed = _KeysFile.model_validate(data)
    except ValidationError as exc:
        errors = exc.errors()  # an unknown field first: it often explains a missing one
        err = next((e for e in errors if e["type"] == "extra_forbidden"), errors[0])
        loc = [str(p) for p in err["loc"]]
        table = ".".join(loc[:2]) if len(loc) >= 2 else ""
        fld = loc[2] if len(loc) >= 3 else (loc[0] if len(loc) == 1 else None)
        line = _line(text, table, fld) if table else None
        what = ".".join(loc)
        msg = err["msg"]
        if err["type"] == "extra_forbidden":
            msg = f"unknown field '{loc[-1]}'"
            what = ".".join(loc[:-1]) or "the file"
            line = _line(text, ".".join(loc[:-1]), loc[-1]) if len(loc) > 1 else None
            if len(loc) == 1:
                msg = f"unknown table '{loc[0]}' (expected [keys.<name>] and [models.<alias>])"
        raise KeysFileError(f"{_at(source, line)}: {what}: {msg}") from None
    if not parsed.keys:
        raise KeysFileError(f"{source}: no key defined (add a [keys.<name>] table)")

    keys: list[ClientKey] = []
    seen: dict[bytes, str] = {}
    for name, entry in parsed.keys.items():
        table = f"keys.{name}"
        where = _at(source, _line(text, table))
        if name == API_KEY_NAME:
            raise KeysFileError(f"{where}: the key name '{name}' is kept for --api-key")
        if (entry.secret is None) == (entry.secret_sha256 is None):
            raise KeysFileError(f"{where}: key '{name}' needs exactly one of secret, secret_sha256")
        if entry.secret is not None:
            where = _at(source, _line(text, table, "secret"))
            if not entry.secret.strip():
                raise KeysFileError(f"{where}: key '{name}' has an empty or blank secret")
            if entry.secret != entry.secret.strip():
                raise KeysFileError(
                    f"{where}: key '{name}': the secret has leading or trailing spaces"
                )
            sha = digest(entry.secret.encode())
        else:
            assert entry.secret_sha256 is not None
            where = _at(source, _line(text, table, "secret_sha256"))
            hexed = entry.secret_sha256.strip().lower()
            if not _HEX64.fullmatch(hexed):
                raise KeysFileError(f"{where}: key '{name}': secret_sha256 is not 64 hex digits")
            if hexed == EMPTY_SHA256:
                raise KeysFileError(
                    f"{where}: key '{name}': secret_sha256 is the SHA-256 of an empty secret"
                )
            sha = bytes.fromhex(hexed)
        if sha in seen:
            raise KeysFileError(f"{where}: key '{name}' has the same secret as key '{seen[sha]}'")
        seen[sha] = name
        models = tuple(entry.models) if entry.models is not None else None
        if models is not None and any(not m.strip() for m in models):
            where = _at(source, _line(text, table, "models"))
            raise KeysFileError(f"{where}: key '{name}': an empty name in models")
        keys.append(
            ClientKey(
                name,
                sha,
                entry.max_concurrent,
                entry.max_window_percent,
                entry.tokens_per_day,
                models,
            )
        )

    aliases: dict[str, tuple[str, ...]] = {}
    for alias, a in parsed.models.items():
        where = _at(source, _line(text, f"models.{alias}", "try"))
        for target in a.try_:
            if target in parsed.models:
                what = "itself" if target == alias else f"the alias '{target}'"
                raise KeysFileError(
                    f"{where}: alias '{alias}' names {what}; an alias may name models only"
                )
            if not target.strip():
                raise KeysFileError(f"{where}: alias '{alias}': an empty target")
        if len(set(a.try_)) != len(a.try_):
            raise KeysFileError(f"{where}: alias '{alias}' names a target twice")
        aliases[alias] = tuple(a.try_)
    return KeyRing(tuple(keys), aliases, source)


def load_keys(path: Path) -> KeyRing:
    """Read and check the keys file at ``path`` (``KeysFileError`` if unreadable or wrong)."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise KeysFileError(f"{path}: cannot read the keys file: {reason}") from None
    return parse_keys(text, str(path))
