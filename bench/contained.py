"""A CLI spawned exactly as the gateway spawns it, with nothing of the gateway around it.

The baseline of bench/run.py (throughput) and bench/capacity.py (slow model): the plan's
launch spec through the gateway's own launcher (bwrap where it runs: private home, work dir,
new session), its stdin written, its stdout read to the end, then what a call's end does: its
process group swept and orphans reaped (killed first only if it is somehow still running); no
HTTP, admission, warm pool or delivery.
"""

from __future__ import annotations

from cli_proxy.gateway import Gateway
from cli_proxy.plan.spec import Plan
from cli_proxy.run.containment import reaped, spawn
from cli_proxy.run.process import kill_tree, sweep_group


async def contained_run(gw: Gateway, plan: Plan) -> bytes:
    """Run ``plan``'s CLI to its end; its whole stdout."""
    proc, prepared = await spawn(plan.launch, gw.launcher, gw.supervisor.limits.line_limit)
    try:
        out, _ = await proc.communicate(plan.call.stdin)
        return out
    finally:
        if proc.returncode is None:  # cancelled or failed mid-run
            await kill_tree(proc, 1.0)
        await sweep_group(proc.pid, 1.0)
        prepared.cleanup()
        await reaped(proc.pid)
