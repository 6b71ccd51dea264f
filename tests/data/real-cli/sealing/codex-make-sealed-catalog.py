#!/usr/bin/env python3
"""Build a sealed model catalog for `codex -c model_catalog_json=PATH` (tested with @openai/codex 0.169.0).

    CODEX_HOME=$(mktemp -d) codex debug models > models.json
    python3 codex-make-sealed-catalog.py models.json catalog_sealed.json

Per model: shell_type="disabled"; drop tool_mode (code_mode_only -> no JS `exec` tool),
multi_agent_version, apply_patch_tool_type, web_search_tool_type; no experimental tools.
"""

import json
import sys

src, dst = sys.argv[1], sys.argv[2]
cat = json.load(open(src))
for m in cat["models"]:
    m["shell_type"] = "disabled"
    for k in ("apply_patch_tool_type", "tool_mode", "multi_agent_version", "web_search_tool_type"):
        m.pop(k, None)  # null is rejected by the parser for some of these; omit instead
    m["experimental_supported_tools"] = []
    m["supports_search_tool"] = False
json.dump(cat, open(dst, "w"))
