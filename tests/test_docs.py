"""The docs stay whole: no doc blown up by an editing slip, no paragraph repeated over and
over, and every relative link in README.md and docs/ points at a file that exists.

(A slip once inserted one paragraph 23,988 times into docs/real-clis.md: 144,271 lines.)
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import re
import textwrap
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md")])
MAX_LINES = 2000
MAX_REPEATS = 3  # the same paragraph (40+ characters) at most this often in one doc
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def paragraphs(text: str) -> list[str]:
    return [p.strip() for p in re.split(r"\n\s*\n", text) if len(p.strip()) >= 40]


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_doc_is_not_blown_up(doc: Path) -> None:
    text = doc.read_text(encoding="utf-8")
    assert text.count("\n") <= MAX_LINES, f"{doc.name}: {text.count(chr(10))} lines"
    repeated = [(n, p[:60]) for p, n in Counter(paragraphs(text)).items() if n > MAX_REPEATS]
    assert not repeated, f"{doc.name}: paragraphs repeated: {repeated}"


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_relative_links_resolve(doc: Path) -> None:
    text = doc.read_text(encoding="utf-8")
    broken = []
    for target in LINK.findall(text):
        if re.match(r"[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            continue  # a URL or an anchor in the same doc
        path = (doc.parent / target.split("#", 1)[0]).resolve()
        if not path.exists():
            broken.append(target)
    assert not broken, f"{doc.name}: links to missing files: {broken}"


def test_the_checks_catch_a_blown_up_doc(tmp_path: Path) -> None:
    """The checks themselves: the 23,988-fold paragraph and a dead link are caught."""
    para = "the tool at the first such line it sees, and at once on any tool item."
    text = "# Doc\n\n" + f"{para}\n\n" * 5 + "[x](missing.md)\n"
    assert Counter(paragraphs(text))[para] == 5 > MAX_REPEATS
    assert LINK.findall(text) == ["missing.md"]


# ---------------------------------------------------------------- names the docs give
# A doc that names a module, a file or an import path that is not there sends a reader (or a
# user's code) to nothing: docs/fixtures.md once told users `from cli_proxy.testing import
# start_gateway`, a path a move had broken.
FILE_PATH = re.compile(r"(?<![\w/.-])cli_proxy/[\w/]*\w\.py\b")
MODULE = re.compile(r"(?<![\w/.-])cli_proxy(?:\.[A-Za-z_]\w*)+")
CODE_BLOCK = re.compile(r"^```(?:python|py)[^\n]*\n(.*?)^```", re.M | re.S)


def resolves(dotted: str) -> bool:
    """``dotted`` names a module, or a module's attribute (``cli_proxy.replay.plugin.x``)."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        module = ".".join(parts[:cut])
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            continue
        obj: object = importlib.import_module(module)
        for attr in parts[cut:]:
            if not hasattr(obj, attr):
                return False
            obj = getattr(obj, attr)
        return True
    return False


def example_imports(text: str) -> list[str]:
    """Every name a doc's Python example imports (``module`` or ``module.name``)."""
    out: list[str] = []
    for block in CODE_BLOCK.findall(text):
        try:
            tree = ast.parse(textwrap.dedent(block))
        except SyntaxError:
            continue  # a fragment, not a program; its names are still checked as text
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                out += [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                out += [f"{node.module}.{a.name}" for a in node.names if a.name != "*"]
    return out


def missing_names(text: str) -> list[str]:
    missing = [p for p in FILE_PATH.findall(text) if not (ROOT / p).is_file()]
    missing += [m for m in MODULE.findall(text) if not resolves(m)]
    missing += [i for i in example_imports(text) if not resolves(i)]
    return sorted(set(missing))


# The changelog names paths that moved away, on purpose; its examples are still checked.
HISTORY = {"changelog.md"}


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_names_in_the_doc_exist(doc: Path) -> None:
    """Every ``cli_proxy/...py`` path, ``cli_proxy.x.y`` module and example import is real."""
    text = doc.read_text(encoding="utf-8")
    if doc.name in HISTORY:
        text = "\n".join(f"```python\n{block}```" for block in CODE_BLOCK.findall(text))
    missing = missing_names(text)
    assert not missing, f"{doc.name} names what does not exist: {missing}"


def test_the_name_check_catches_a_missing_module() -> None:
    text = (
        "Run `python -m cli_proxy.no_such_module` or read `cli_proxy/no/such.py`; "
        "`cli_proxy.config.Settings` is real.\n\n"
        "```python\nfrom cli_proxy.testing import start_gateway\nfrom cli_proxy.nowhere import x\n"
        "import no_such_top_level_module\n```\n"
    )
    assert missing_names(text) == [
        "cli_proxy.no_such_module",
        "cli_proxy.nowhere",  # named in the example's text
        "cli_proxy.nowhere.x",  # and imported by it
        "cli_proxy/no/such.py",
        "no_such_top_level_module",
    ]
