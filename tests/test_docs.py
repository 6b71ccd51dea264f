"""The docs stay whole: no doc blown up by an editing slip, no paragraph repeated over and
over, and every relative link in README.md and docs/ points at a file that exists.

(A slip once inserted one paragraph 23,988 times into docs/real-clis.md: 144,271 lines.)
"""

from __future__ import annotations

import re
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
