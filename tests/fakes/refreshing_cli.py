#!/usr/bin/env python3
"""A stand-in claude that refreshes its login like the real one, then is tests/fakes/fake_cli.py.

When ``$HOME/.claude/.credentials.json`` expires within five minutes it "refreshes": waits
``REFRESH_DELAY_S`` (the token endpoint's round trip), appends the refresh token it spent
to ``~/.claude/refreshes.log`` and writes new credentials by temp file and rename, as claude
does. Without the gateway's login gate, concurrent runs each refresh (each spends the same
token). Only the standard library.
"""

from __future__ import annotations

import json
import os
import secrets
import sys
import time
from pathlib import Path

FAKE_CLI = Path(__file__).resolve().parent / "fake_cli.py"
REFRESH_DELAY_S = float(os.environ.get("REFRESH_DELAY_S", "0.3"))


def main() -> None:
    home = Path(os.environ["HOME"])
    creds = home / ".claude" / ".credentials.json"
    oauth = json.loads(creds.read_text())["claudeAiOauth"]
    if oauth["expiresAt"] < (time.time() + 300) * 1000:
        time.sleep(REFRESH_DELAY_S)
        with open(home / ".claude" / "refreshes.log", "a") as log:
            log.write(oauth["refreshToken"] + "\n")
        oauth = {
            **oauth,
            "accessToken": "at-" + secrets.token_hex(4),
            "refreshToken": "rt-" + secrets.token_hex(4),
            "expiresAt": int((time.time() + 3600) * 1000),
        }
        tmp = creds.with_name(f".credentials.json.tmp.{secrets.token_hex(4)}")
        tmp.write_text(json.dumps({"claudeAiOauth": oauth}))
        os.replace(tmp, creds)
    with open(home / ".claude" / "uses.log", "a") as log:
        log.write(oauth["accessToken"] + "\n")
    os.execv(sys.executable, [sys.executable, "-S", str(FAKE_CLI), *sys.argv[1:]])


if __name__ == "__main__":
    main()
