"""Codex's sealed model catalog: ``codex debug models`` with every per-model tool mode
removed, made once per binary (``Backend.warm_up``), and the base instructions that replace
codex's own."""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import tempfile
import threading
from typing import Any

from cli_proxy.backends.system_prompt import MINIMAL_SYSTEM_PROMPT, SystemPrompt

log = logging.getLogger(__name__)

BASE_INSTRUCTIONS = MINIMAL_SYSTEM_PROMPT
"""With ``system_prompt = "minimal"`` (the default) this replaces codex's 17-22 kB "You are
Codex" base instructions, which describe its shell and patch tools: a model told about them
tries to call them (and the call only loops)."""


# Per catalog model: what declares a tool or describes one. The built-in catalog gives
# most models a JS ``exec`` tool (tool_mode "code_mode_only") and collaboration tools
# (multi_agent_version "v2") that no feature flag removes.
_CATALOG_DROP = (
    "apply_patch_tool_type",
    "tool_mode",
    "multi_agent_version",
    "multi_agent_reasoning_effort",
    "web_search_tool_type",
)
_CATALOG_SET: dict[str, Any] = {
    "shell_type": "disabled",
    "experimental_supported_tools": [],
    "supports_search_tool": False,
    "include_skills_usage_instructions": False,
    "include_plugin_usage_instructions": False,
    "include_apps_usage_instructions": False,
    # per-personality instruction templates: with personality off, codex 0.169.0 sent the
    # same request with or without them (cli mode), and they are most of the catalog's size
    "model_messages": None,
}
# ``minimal`` only: codex's own base instructions (which name its tools) give way to ours.
_CATALOG_MINIMAL: dict[str, Any] = {
    "base_instructions": BASE_INSTRUCTIONS,  # (shrinks the catalog from ~750 kB to ~20 kB)
}
FALLBACK_CATALOG: dict[str, Any] = {
    "models": [
        {
            "slug": "gpt-5.5",
            "display_name": "GPT-5.5",
            "description": "gpt-5.5 as codex 0.169.0 describes it",
            "default_reasoning_level": "medium",
            "supported_reasoning_levels": [
                {"effort": e, "description": e} for e in ("low", "medium", "high", "xhigh")
            ],
            "shell_type": "disabled",
            "visibility": "list",
            "supported_in_api": True,
            "priority": 13,
            "additional_speed_tiers": [],
            "service_tiers": [],
            "availability_nux": None,
            "upgrade": None,
            "default_reasoning_summary": "none",
            "support_verbosity": True,
            "default_verbosity": "low",
            "truncation_policy": {"mode": "tokens", "limit": 10000},
            "supports_image_detail_original": True,
            "context_window": 272000,
            "max_context_window": 272000,
            "comp_hash": "2911",
            "effective_context_window_percent": 95,
            "input_modalities": ["text", "image"],
            "supports_experimental_context": False,
            "use_responses_lite": False,
            "supports_reasoning_effort_updates": False,
            "node_repl_auto_review_required": False,
            "node_repl_disabled": False,
            **_CATALOG_SET,
            **_CATALOG_MINIMAL,
        }
    ]
}
"""Used when the binary gives no catalog: codex refuses an empty one ("must contain at least
one model"), and without one its built-in catalog models keep their tools. This one entry
(gpt-5.5 as 0.169.0 lists it, sealed) is accepted; every other model then runs on fallback
metadata, which the feature disables alone seal (tested). A codex version that rejects it
fails the call: closed, never unsealed. Its entry carries our instructions in both modes:
codex refuses an entry with none ("missing both base_instructions and model_messages"), and
without the binary's catalog codex's own text for it is unknown."""


def seal_catalog(
    catalog: dict[str, Any], system_prompt: SystemPrompt = "minimal"
) -> dict[str, Any]:
    """``codex debug models`` output with every per-model tool mode removed (and, for
    ``minimal``, codex's own instructions replaced by ours)."""
    models = catalog.get("models")
    out = []
    for model in models if isinstance(models, list) else []:
        if isinstance(model, dict) and isinstance(model.get("slug"), str):
            sealed = {k: v for k, v in model.items() if k not in _CATALOG_DROP}
            sealed.update(_CATALOG_SET)
            if system_prompt == "minimal":
                sealed.update(_CATALOG_MINIMAL)
            out.append(sealed)
    return {**catalog, "models": out}


_catalogs: dict[tuple[Any, ...], bytes] = {}
_catalog_lock = threading.Lock()


def sealed_catalog(
    command: list[str], path_env: str, system_prompt: SystemPrompt = "minimal"
) -> bytes:
    """The sealed catalog of this codex binary, made once per binary (path, size, mtime).

    Made from the binary itself, so a new version's models and catalog fields come along;
    a catalog shipped with the gateway would go stale with every codex release. ``codex
    debug models`` takes ~0.1 s, too slow for every call, so the result is kept in memory
    and written into each call's private home (the first plan per binary waits for it).
    If it fails (not codex, or a new output format) ``FALLBACK_CATALOG`` stands in.
    """
    key = (system_prompt, *_binary_key(command, path_env))
    with _catalog_lock:
        cached = _catalogs.get(key)
        if cached is None:
            cached = json.dumps(_make_catalog(command, path_env, system_prompt)).encode()
            _catalogs[key] = cached
        return cached


def _binary_key(command: list[str], path_env: str) -> tuple[Any, ...]:
    found = shutil.which(command[0], path=path_env) if os.sep not in command[0] else command[0]
    try:
        real = os.path.realpath(found) if found else command[0]
        st = os.stat(real)
        return (*command, real, st.st_size, st.st_mtime_ns)
    except OSError:
        return (*command, None)


def _make_catalog(command: list[str], path_env: str, system_prompt: SystemPrompt) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="cli-proxy-codex-catalog-") as home:
        env = {"PATH": path_env, "HOME": home, "CODEX_HOME": home, "LANG": "C.UTF-8"}
        try:
            done = subprocess.run(
                [*command, "debug", "models"],
                env=env,
                cwd=home,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=30,
                check=False,
            )
            out = done.stdout.decode("utf-8", "replace")
            # a command line that merges stderr puts codex's warnings before the JSON
            catalog, _ = json.JSONDecoder().raw_decode(out[out.find("{") :])
        except (OSError, subprocess.SubprocessError, ValueError) as exc:
            log.warning("codex model catalog unavailable (%s): the fallback catalog", exc)
            return FALLBACK_CATALOG
    sealed = seal_catalog(catalog, system_prompt) if isinstance(catalog, dict) else {"models": []}
    if not sealed["models"]:
        log.warning("codex debug models printed no catalog: the fallback catalog")
        return FALLBACK_CATALOG
    return sealed
