#!/usr/bin/env python3
"""Re-record examples/weather-agent's fixtures with the REAL claude CLI, offline.

    python scripts/record_example.py --cli-dir .cli/<versions>/node_modules/.bin [--mode all]

(``make example-fixtures`` runs this.) It starts ``tests/fakes/fake_model_api.py`` on 127.0.0.1,
then runs the example's own ``pytest --cli-proxy-record-mode=MODE`` with an environment of
only PATH, a temporary HOME and the settings that send the CLI to that fake API: exactly
what a user of the example does against a real model, minus the subscription. The
recordings are scrubbed by the gateway itself (the defaults plus the example's pytest.ini).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "weather-agent"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--cli-dir", type=Path, required=True, help="folder with the claude CLI")
    ap.add_argument("--mode", default="all", choices=["once", "new_episodes", "all"])
    args = ap.parse_args(argv)
    cli_dir: Path = args.cli_dir.resolve()
    if not (cli_dir / "claude").exists():
        print(f"record_example: {cli_dir / 'claude'} not found (make real-clis)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="cli-proxy-example-") as tmp:
        out = Path(tmp) / "fake_api.stdout"
        with out.open("wb") as fh:
            api = subprocess.Popen(
                [
                    sys.executable,
                    str(ROOT / "tests" / "fakes" / "fake_model_api.py"),
                    "--port",
                    "0",
                ],
                stdout=fh,
                stderr=subprocess.DEVNULL,
                stdin=subprocess.DEVNULL,
            )
        try:
            deadline = time.monotonic() + 30
            while not out.read_text().startswith("http") and time.monotonic() < deadline:
                time.sleep(0.05)
            home = Path(tmp) / "home"
            home.mkdir()
            env = {
                "PATH": f"{cli_dir}:{Path(sys.executable).parent}:/usr/bin:/bin",
                "HOME": str(home),
                "LANG": "C.UTF-8",
                "ANTHROPIC_BASE_URL": out.read_text().splitlines()[0].strip(),
                "ANTHROPIC_API_KEY": "sk-ant-api03-fake-key-for-the-fake-model-api",
                "WEATHER_API_KEY": "example-weather-key-123",
                "DISABLE_TELEMETRY": "1",
                "CLAUDE_CODE_MAX_RETRIES": "0",
                "CLI_PROXY_CLAUDE_BIN": str(cli_dir / "claude"),
            }
            argv_ = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider"]
            argv_.append(f"--cli-proxy-record-mode={args.mode}")
            return subprocess.run(argv_, cwd=EXAMPLE, env=env, check=False).returncode
        finally:
            api.terminate()
            api.wait(10)


if __name__ == "__main__":
    sys.exit(main())
