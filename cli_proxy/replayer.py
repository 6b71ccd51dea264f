"""Deprecated: ``python -m cli_proxy.replayer`` is now ``python -m cli_proxy.replay.replayer``
(docs/changelog.md). Kept so a command line written from the old docs still replays."""

import sys
import warnings

from cli_proxy.replay.replayer import main

if __name__ == "__main__":
    warnings.warn(
        "python -m cli_proxy.replayer is deprecated: use python -m cli_proxy.replay.replayer",
        DeprecationWarning,
        stacklevel=1,
    )
    sys.exit(main())
