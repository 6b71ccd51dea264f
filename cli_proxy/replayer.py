"""``python -m cli_proxy.replayer FIXTURE [--speed S]``: act out a recorded CLI run.

Prints the recorded stdout lines (at the recorded pace times S; 0 = at once),
writes the recorded stderr, exits with the recorded code. Reads and ignores
stdin in the background, like the real CLI would consume the prompt: a duplex backend
(codex app-server) keeps stdin open and writes to it as the output is read, so the
output must not wait for stdin's end.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from pathlib import Path


def _drain() -> None:
    try:
        while os.read(0, 65536):
            pass
    except OSError:
        pass


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="cli_proxy.replayer")
    p.add_argument("fixture", type=Path)
    p.add_argument("--speed", type=float, default=0.0)
    args = p.parse_args(argv)
    # Stdlib only and no package imports: this runs once per replayed call.
    # The gateway validated the file when it loaded the fixture set.
    try:
        data = json.loads(args.fixture.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        print(f"{args.fixture}: cannot replay fixture: {exc}", file=sys.stderr)
        return 3
    threading.Thread(target=_drain, daemon=True).start()
    start = time.monotonic()
    out = sys.stdout
    for entry in data["stdout"]:
        if args.speed > 0:
            delay = start + float(entry["t"]) * args.speed - time.monotonic()
            if delay > 0:
                time.sleep(delay)
        out.write(entry["line"] + "\n")
        out.flush()
    stderr = data.get("stderr") or ""
    if stderr:
        sys.stderr.write(stderr)
        sys.stderr.flush()
    return int(data["exit_code"])


if __name__ == "__main__":
    sys.exit(main())
