"""The project's scripts still import: the capture scripts in tests/data/real-cli/ (each the
record of how a capture was made, re-run when a CLI changes), scripts/, bench/ and the example
project. Nothing else runs them in the suite, and ruff does not resolve imports: four capture
scripts named modules that the House II move had put in ``cli_proxy/plan/``.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = sorted(
    [
        *(ROOT / "tests" / "data" / "real-cli").rglob("*.py"),
        *(ROOT / "scripts").glob("*.py"),
        *(ROOT / "bench").glob("*.py"),
        *(ROOT / "examples").rglob("*.py"),
    ]
)
OURS = ("cli_proxy", "tests")


def our_imports(script: Path) -> list[tuple[int, str, list[str]]]:
    """(line, module, names) of each import of ``cli_proxy`` or ``tests`` in ``script``."""
    found = []
    for node in ast.walk(ast.parse(script.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in OURS:
            found.append((node.lineno, node.module or "", [a.name for a in node.names]))
        elif isinstance(node, ast.Import):
            found += [(node.lineno, a.name, []) for a in node.names if a.name.split(".")[0] in OURS]
    return found


def test_there_are_scripts_to_check() -> None:
    assert sum(1 for s in SCRIPTS if our_imports(s)) >= 10


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_script_imports_resolve(script: Path) -> None:
    missing = []
    for line, module, names in our_imports(script):
        try:
            imported = importlib.import_module(module)
        except ImportError as exc:
            missing.append(f"line {line}: {module}: {exc}")
            continue
        missing += [f"line {line}: {module}.{n}" for n in names if not hasattr(imported, n)]
    assert not missing, missing
