"""The public import path for driving a replaying gateway from your own code and tests
(docs/fixtures.md): ``from cli_proxy.testing import start_gateway``.

The pytest plugin itself is ``cli_proxy.replay.plugin`` (entry point ``pytest11``, loaded
on its own); this module names what a user's code calls, so the plugin's home can move
without breaking them (it has moved twice: ``cli_proxy.testing``, then
``cli_proxy.fixtures.plugin``, now ``cli_proxy.replay.plugin``: docs/changelog.md).
"""

from cli_proxy.replay.plugin import RunningGateway, fixture_gateway, start_gateway
from cli_proxy.replay.replay import RecordMode

__all__ = ["RecordMode", "RunningGateway", "fixture_gateway", "start_gateway"]
