#!/usr/bin/env python3
"""A tiny CLI of a made-up format, for the extra-backend test: it prints the last line of
its stdin back as ``{"say": ...}`` pieces, then ``{"done": {"in": N, "out": M}}``."""

import json
import sys

prompt = sys.stdin.read()
last = [ln for ln in prompt.splitlines() if ln.strip()][-1]
for i in range(0, len(last), 4):
    print(json.dumps({"say": last[i : i + 4]}), flush=True)
print(json.dumps({"done": {"in": len(prompt), "out": len(last)}}), flush=True)
