"""The house's measures (issue 45's bar), kept true by the suite.

Each checker reads source with ``ast`` from a package folder, so it runs on the real
``cli_proxy/`` and on a small synthetic tree in ``tmp_path``; every check has a self-test
that plants a violation and sees it caught. The import-linter ``layers`` contract
(``make lint``) stays too: this is the same rule counted directly.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest

from cli_proxy.backends import registry
from cli_proxy.server import formats

PACKAGE = Path(__file__).resolve().parent.parent / "cli_proxy"
MAX_FLAT = 12
APP_MAX_LINES = 350
ROUTES_MAX_LINES = 400
EDGE = ("server/app.py", "server/listener.py", "server/errors.py", "server/openapi.py")
EDGE_FOREIGN = ("_messages",)  # aiohttp's request-handler attribute (listener.py reads it)
ROUTE_CALLS = frozenset(
    {"add_get", "add_post", "add_put", "add_patch", "add_delete", "add_head", "add_route"}
)


def modules(root: Path) -> Iterator[Path]:
    yield from sorted(p for p in root.rglob("*.py") if "__pycache__" not in p.parts)


# ------------------------------------------------------------------ folders stay small


def crowded_folders(root: Path, limit: int = MAX_FLAT) -> dict[str, int]:
    """Folders holding more than ``limit`` modules directly (``__init__.py`` not counted)."""
    found: dict[str, int] = {}
    for folder in [root, *(p for p in root.rglob("*") if p.is_dir())]:
        if folder.name == "__pycache__":
            continue
        n = sum(1 for p in folder.glob("*.py") if p.name != "__init__.py")
        if n > limit:
            found[folder.relative_to(root).as_posix() or "."] = n
    return found


# ------------------------------------------------------------------ names in code


def code_words(source: str) -> Iterator[tuple[int, str, str]]:
    """(line, text, word) of every identifier and string literal (``text``) in code,
    docstrings and comments aside. A word is a lower-cased run of ``[a-z0-9_]`` in the text,
    and each of its ``_`` parts."""
    tree = ast.parse(source)
    docstrings = {
        id(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Expr)
        and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, str)
    }
    for node in ast.walk(tree):
        texts: list[str] = []
        if isinstance(node, ast.Name):
            texts.append(node.id)
        elif isinstance(node, ast.Attribute):
            texts.append(node.attr)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            texts.append(node.name)
        elif isinstance(node, (ast.arg, ast.keyword)) and node.arg:
            texts.append(node.arg)
        elif isinstance(node, ast.alias):
            texts.extend(filter(None, [node.name, node.asname]))
        elif isinstance(node, ast.ImportFrom) and node.module:
            texts.append(node.module)
        elif (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and id(node) not in docstrings
        ):
            texts.append(node.value)
        for text in texts:
            line = getattr(node, "lineno", 0)
            for word in re.findall(r"[a-z0-9_]+", text.lower()):
                yield line, text, word
                for part in word.split("_"):
                    if part and part != word:
                        yield line, text, part


def naming(
    paths: Iterable[Path], words: Iterable[str], root: Path, foreign: Iterable[str] = ()
) -> list[str]:
    """``file:line: word`` for each code word of ``paths`` that is one of ``words``, except
    in the texts listed in ``foreign`` (another library's names)."""
    wanted, skip = frozenset(words), frozenset(foreign)
    return [
        f"{path.relative_to(root).as_posix()}:{line}: {word}"
        for path in paths
        for line, text, word in code_words(path.read_text())
        if word in wanted and text not in skip
    ]


def backend_words() -> set[str]:
    return set(registry.names())


def _path_words(path: str) -> set[str]:
    """The lower-cased words of a route's path, parameters aside: ``/models/{model}:verb``
    gives ``models`` and ``verb``."""
    return {w for w in re.findall(r"[a-z0-9_]+", re.sub(r"\{[^}]*\}", "", path).lower())}


def format_words() -> set[str]:
    """Each wire format's name and the words of its own paths (call and count routes), less
    the words of the shared model list's paths (``models``: no one format's)."""
    words: set[str] = set()
    shared: set[str] = set()
    for fmt in formats.formats():
        words.add(fmt.name)
        for route in fmt.routes:
            if route.kind in ("call", "count"):
                words |= _path_words(route.path)
            else:
                shared |= _path_words(route.path)
    return words - shared


def outside_backends(root: Path) -> list[Path]:
    return [p for p in modules(root) if p.relative_to(root).parts[0] != "backends"]


# ------------------------------------------------------------------ size of the routes


def too_long(root: Path) -> list[str]:
    """``app.py`` over its bound, and any module that registers routes over its own."""
    found = []
    for path in modules(root):
        rel = path.relative_to(root).as_posix()
        lines = len(path.read_text().splitlines())
        if rel == "server/app.py" and lines > APP_MAX_LINES:
            found.append(f"{rel}: {lines} lines > {APP_MAX_LINES}")
        registers = any(
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ROUTE_CALLS
            for node in ast.walk(ast.parse(path.read_text()))
        )
        if registers and lines > ROUTES_MAX_LINES:
            found.append(f"{rel}: registers routes, {lines} lines > {ROUTES_MAX_LINES}")
    return found


# ------------------------------------------------------------------ import circles


def _type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def runtime_imports(path: Path, module: str, package: str) -> Iterator[str]:
    """Absolute names a module imports when it runs: function-level imports included,
    those under ``if TYPE_CHECKING:`` not. ``from a import b`` yields ``a.b`` (b may be a
    module)."""
    tree = ast.parse(path.read_text())
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and _type_checking(node.test):
            skipped.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    is_pkg = path.name == "__init__.py"
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = module.split(".")
                base = parts if is_pkg else parts[:-1]
                base = base[: len(base) - (node.level - 1)]
                mod = ".".join([*base, *([node.module] if node.module else [])])
            else:
                mod = node.module or ""
            for a in node.names:
                yield f"{mod}.{a.name}"


def unit_graph(root: Path) -> dict[str, set[str]]:
    """Imports between the units of a package: its folders and its top modules."""
    package = root.name
    graph: dict[str, set[str]] = {}
    for path in modules(root):
        rel = path.relative_to(root).with_suffix("").parts
        if rel == ("__init__",):
            continue
        dotted = ".".join((package, *(rel[:-1] if rel[-1] == "__init__" else rel)))
        unit = rel[0]
        targets = graph.setdefault(unit, set())
        for name in runtime_imports(path, dotted, package):
            parts = name.split(".")
            if parts[0] == package and len(parts) > 1 and parts[1] != unit:
                targets.add(parts[1])
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected groups of more than one unit (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in graph:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


# ------------------------------------------------------------------ the real tree


def test_no_folder_holds_more_than_twelve_modules() -> None:
    assert crowded_folders(PACKAGE) == {}


def test_no_backend_is_named_outside_backends() -> None:
    assert {"claude", "gemini", "codex", "copilot"} <= backend_words()  # the registry is read
    inside = [p for p in modules(PACKAGE) if p.relative_to(PACKAGE).parts[0] == "backends"]
    assert naming(inside, backend_words(), PACKAGE)  # the backends do name themselves
    assert naming(outside_backends(PACKAGE), backend_words(), PACKAGE) == []


def test_the_edge_names_no_wire_format() -> None:
    assert {"chat", "responses", "messages"} <= format_words()  # the table is read
    assert naming([PACKAGE / e for e in EDGE], format_words(), PACKAGE, EDGE_FOREIGN) == []


def test_app_and_routes_modules_stay_short() -> None:
    assert too_long(PACKAGE) == []


def test_no_import_circle_between_folders() -> None:
    graph = unit_graph(PACKAGE)
    assert {"server", "gateway", "backends", "run", "plan"} <= graph.keys()
    assert graph["server"] and graph["gateway"]  # imports are seen at all
    assert circles(graph) == []


# ------------------------------------------------------------------ each check catches


def _tree(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_a_crowded_folder_is_caught(tmp_path: Path) -> None:
    files = {f"pkg/server/m{i}.py": "" for i in range(MAX_FLAT)} | {"pkg/server/__init__.py": ""}
    root = _tree(tmp_path, files)
    assert crowded_folders(root / "pkg") == {}
    (root / "pkg/server/one_more.py").write_text("")
    assert crowded_folders(root / "pkg") == {"server": MAX_FLAT + 1}


def test_a_name_in_code_is_caught_and_prose_is_not(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "pkg/a.py": '"""The claude backend."""\n# claude\nx = 1\n',
            "pkg/b.py": 'def f():\n    """codex"""\n    return {"bin": "gemini-cli"}\n',
            "pkg/c.py": "from pkg.backends import copilot_thing\n",
            "pkg/backends/d.py": 'NAME = "claude"\n',
        },
    )
    found = naming(outside_backends(root / "pkg"), backend_words(), root / "pkg")
    assert found == ["b.py:3: gemini", "c.py:1: copilot"]


def test_a_wire_format_at_the_edge_is_caught(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "pkg/server/app.py": 'app.router.add_post("/v1/chat/completions", h)\n',
            "pkg/server/errors.py": "if fmt.name == 'messages': pass\n",
            "pkg/server/listener.py": "def respond(chat_format): getattr(p, '_messages')\n",
            "pkg/server/openapi.py": '"""Paths of /v1/responses."""\n',
        },
    )
    found = naming([root / "pkg" / e for e in EDGE], format_words(), root / "pkg", EDGE_FOREIGN)
    assert found == [
        "server/app.py:1: chat",
        "server/app.py:1: completions",
        "server/listener.py:1: chat",
        "server/errors.py:1: messages",
    ]


def test_long_app_and_routes_modules_are_caught(tmp_path: Path) -> None:
    route = "r.add_get('/x', h)\n"
    root = _tree(
        tmp_path,
        {
            "pkg/server/app.py": "x = 1\n" * APP_MAX_LINES,
            "pkg/server/status.py": route + "x = 1\n" * (ROUTES_MAX_LINES - 1),
            "pkg/server/long.py": "x = 1\n" * (ROUTES_MAX_LINES + 5),
        },
    )
    assert too_long(root / "pkg") == []
    (root / "pkg/server/app.py").write_text("x = 1\n" * (APP_MAX_LINES + 1))
    (root / "pkg/server/status.py").write_text(route + "x = 1\n" * ROUTES_MAX_LINES)
    assert too_long(root / "pkg") == [
        f"server/app.py: {APP_MAX_LINES + 1} lines > {APP_MAX_LINES}",
        f"server/status.py: registers routes, {ROUTES_MAX_LINES + 1} lines > {ROUTES_MAX_LINES}",
    ]


@pytest.mark.parametrize(
    ("import_back", "circle"),
    [
        ("from pkg.server.app import x\n", [["gateway", "server"]]),
        ("def late():\n    from pkg.server import app\n", [["gateway", "server"]]),
        ("import pkg.server.app\n", [["gateway", "server"]]),
        ("from pkg import server\n", [["gateway", "server"]]),
        ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.server import a\n", []),
        ("# from pkg.server import app\n", []),
    ],
)
def test_an_import_circle_is_caught(tmp_path: Path, import_back: str, circle: list[str]) -> None:
    root = _tree(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/server/__init__.py": "",
            "pkg/server/app.py": "from ..gateway import Gateway\n",
            "pkg/plan/__init__.py": "from . import spec\n",
            "pkg/plan/spec.py": "",
            "pkg/gateway.py": "from pkg.plan import spec\n" + import_back,
        },
    )
    graph = unit_graph(root / "pkg")
    assert "gateway" in graph["server"]
    assert circles(graph) == circle
