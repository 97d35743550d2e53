"""The shape of the source tree: no import cycles, packages reached only through their ``__init__`` or the names a
module exports (its ``__all__``), and the
runners (``agent.py``, ``cli.py``) using Memory's public API only.

Imports are read from the source. For cycles every import counts (module level and inside functions: a lazy
import is a dependency of the design even when it is not one at import time) except those under
``if TYPE_CHECKING:``, which only name a type for annotations (a part typed with its owner's class) and never run.
For reaches into another package's private modules every import counts.
"""

from __future__ import annotations

import ast
import functools
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "threadmind"
ROOT = "threadmind"


def _module_name(path: Path) -> str:
    parts = [ROOT, *path.relative_to(SRC).with_suffix("").parts]
    return ".".join(parts[:-1]) if parts[-1] == "__init__" else ".".join(parts)


MODULES: dict[str, Path] = {_module_name(p): p for p in SRC.rglob("*.py")}
PACKAGES = {name for name, path in MODULES.items() if path.name == "__init__.py"}


def _package_of(module: str) -> str:
    return module if module in PACKAGES else module.rpartition(".")[0]


def _type_checking_nodes(tree: ast.Module) -> set[int]:
    """ids of the import statements under ``if TYPE_CHECKING:``."""
    found: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            found.update(id(child) for stmt in node.body for child in ast.walk(stmt))
    return found


@functools.cache
def _tree(module: str) -> ast.Module:
    """The parsed source of ``module`` (read once: the checks ask for each module's tree many times)."""
    return ast.parse(MODULES[module].read_text())


def _imports(module: str, *, typing_only: bool = True) -> Iterator[tuple[str, int]]:
    """(imported module, line) for every import in ``module`` that names a threadmind module (without those
    under ``TYPE_CHECKING`` when ``typing_only`` is False)."""
    tree = _tree(module)
    package = _package_of(module)
    skip = set() if typing_only else _type_checking_nodes(tree)
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == ROOT:
                    yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            if target.split(".")[0] != ROOT:
                continue
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                yield (sub if sub in MODULES else target), node.lineno


GRAPH: dict[str, set[str]] = {m: {t for t, _ in _imports(m, typing_only=False) if t in MODULES and t != m}
                              for m in MODULES}


def _cycles() -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0

    def visit(node: str) -> None:
        nonlocal counter
        index[node] = low[node] = counter
        counter += 1
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(GRAPH[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component: list[str] = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for module in sorted(GRAPH):
        if module not in index:
            visit(module)
    return found


def test_the_source_tree_has_no_import_cycle() -> None:
    assert _cycles() == []


def _exported(module: str) -> set[str]:
    """The names a module lists in ``__all__`` (its contract with the rest of the library)."""
    for node in _tree(module).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            return set(ast.literal_eval(node.value))
    return set()


def _names_at(module: str, line: int) -> list[str]:
    """The names the ``from ... import`` statement at ``line`` of ``module`` imports."""
    for node in ast.walk(_tree(module)):
        if isinstance(node, ast.ImportFrom) and node.lineno == line:
            return [alias.name for alias in node.names]
    return []


def _private_reaches() -> list[str]:
    """Imports from another package's underscore module of a name that module does not export: ``from
    ..stores._sqlite import X`` is an internal contract when ``X`` is in ``stores/_sqlite.py``'s ``__all__``
    (anyio's practice), and a reach into its insides otherwise; a whole underscore module is never imported."""
    bad: list[str] = []
    for module in sorted(MODULES):
        own = _package_of(module)
        for target, line in _imports(module):
            if target not in MODULES or target in PACKAGES:
                continue
            target_package, _, leaf = target.rpartition(".")
            if not leaf.startswith("_") or target_package == own:
                continue
            if target_package == ROOT:  # the root's own private modules are shared leaves (_config, _results)
                continue
            names = _names_at(module, line)
            if leaf in names or not names or not set(names) <= _exported(target):
                bad.append(f"{module}:{line} imports {target}" + (
                    f" names it does not export: {sorted(set(names) - _exported(target))}" if names else ""))
    return list(dict.fromkeys(bad))  # one line per statement (each of its names is one import)


def test_packages_are_reached_through_their_init_or_a_modules_all_only() -> None:
    assert _private_reaches() == []


def test_the_reach_check_tells_an_exported_name_from_an_insider(monkeypatch: pytest.MonkeyPatch) -> None:
    """From ``memory``: ``Reflections`` is not a name of ``processors/_om_triggers.py``'s ``__all__`` (refused),
    ``activation_trigger`` is (allowed)."""
    def fake_imports(module: str, *, typing_only: bool = True) -> Iterator[tuple[str, int]]:
        if module == "threadmind.memory._turn":
            yield "threadmind.processors._om_triggers", 1
            yield "threadmind.processors._om_triggers", 2

    def fake_names(module: str, line: int) -> list[str]:
        return ["Reflections"] if line == 1 else ["activation_trigger"]

    monkeypatch.setattr(sys.modules[__name__], "_imports", fake_imports)
    monkeypatch.setattr(sys.modules[__name__], "_names_at", fake_names)
    assert _private_reaches() == ["threadmind.memory._turn:1 imports threadmind.processors._om_triggers names it "
                                  "does not export: ['Reflections']"]


def test_the_checks_catch_what_they_look_for() -> None:
    """The detectors themselves: a cycle and a private reach in hand-made graphs are found."""
    saved = dict(GRAPH)
    try:
        GRAPH["threadmind.tokens"] = GRAPH["threadmind.tokens"] | {"threadmind.agent"}
        assert any("threadmind.tokens" in c for c in _cycles())
    finally:
        GRAPH.clear()
        GRAPH.update(saved)


RUNNERS = sorted(str(p.relative_to(SRC)) for p in [*SRC.glob("agent/*.py"), SRC / "cli.py"])
_NAMEDTUPLE_API = {"_replace", "_asdict", "_fields", "_make"}  # public despite the underscore


def _underscore_uses(path: Path) -> list[str]:
    """Attribute reads like ``memory._x`` (on anything but ``self``/``cls``) in ``path``."""
    tree = ast.parse(path.read_text())
    hits: list[str] = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__")
                and node.attr not in _NAMEDTUPLE_API):
            value = node.value
            if isinstance(value, ast.Name) and value.id in ("self", "cls"):
                continue
            hits.append(f"{path.name}:{node.lineno} .{node.attr}")
    return hits


@pytest.mark.parametrize("runner", RUNNERS)
def test_runners_use_only_public_attributes(runner: str) -> None:
    """The agent and the CLI use what any user could: no underscore attribute of a Memory (or of anything
    else but themselves)."""
    assert _underscore_uses(SRC / runner) == []


def test_the_runner_check_sees_an_underscore_attribute(tmp_path: Path) -> None:
    sample = tmp_path / "runner.py"
    sample.write_text("async def run(memory):\n    return memory._core\n")
    assert _underscore_uses(sample) == ["runner.py:2 ._core"]


#: The one module of ``memory/`` that reaches the store and the actor system: the door (``_gateway.Door``).
DOOR = "threadmind.memory._gateway"


def _door_bypasses(path: Path) -> list[str]:
    """Where a module reaches the store or the actors around the door: ``<x>.store()``, ``<x>.storage.<op>(...)``,
    ``<x>.actors(...)``, ``<x>.system`` or the ``ActorSystem`` itself."""
    hits: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            func = node.func
            if func.attr in ("store", "actors") or (
                    isinstance(func.value, ast.Attribute) and func.value.attr == "storage"):
                hits.append((node.lineno, f".{func.attr}()"))
        elif isinstance(node, ast.Attribute) and node.attr == "system":
            hits.append((node.lineno, ".system"))
        elif isinstance(node, ast.Name) and node.id == "ActorSystem":
            hits.append((node.lineno, "ActorSystem"))
    return [f"{path.name}:{line} {what}" for line, what in sorted(hits)]


def test_memory_reaches_the_store_and_the_actors_through_its_door_only() -> None:
    """One door from ``memory/`` to the store and the actors (``_gateway.Door``): no other module of the package
    calls the store or the actor system; they send typed commands through the door."""
    others = {name: path for name, path in MODULES.items() if name.startswith("threadmind.memory.") and name != DOOR}
    assert others and {name: hits for name, path in others.items() if (hits := _door_bypasses(path))} == {}


def test_the_door_check_sees_each_bypass(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text("async def run(core):\n    await core.store().get_thread('t')\n"
                      "    await core.storage.get_thread('t')\n    await core.actors().ask('t', 1)\n"
                      "    return core.system\n")
    assert _door_bypasses(sample) == ["sample.py:2 .store()", "sample.py:3 .get_thread()", "sample.py:4 .actors()",
                                      "sample.py:5 .system"]


_CLOSURE_CALLS = {"exclusive", "holding", "resource_exclusive"}


def _closure_calls(path: Path) -> list[str]:
    """Where a module hands an actor a function to run (``exclusive``, ``holding``, ``resource_exclusive``)."""
    return [f"{path.name}:{node.lineno}" for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr in _CLOSURE_CALLS]


def test_memory_reaches_threads_by_typed_commands() -> None:
    """Saves, loads, read-modify-writes, moves, clones, token windows and writes across threads are commands the
    actors handle: no module of ``memory/`` hands an actor a function of its own to run."""
    modules = {name: path for name, path in MODULES.items() if name.startswith("threadmind.memory.")}
    assert modules and {name: hits for name, path in modules.items() if (hits := _closure_calls(path))} == {}


def test_the_closure_check_sees_a_call(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text("async def run(system, fn):\n    return await system.holding(['a', 'b'], fn, 'x')\n")
    assert _closure_calls(sample) == ["sample.py:2"]


def test_asyncio_is_imported_by_the_low_level_module_only() -> None:
    """threadmind's asyncio-specific code lives in ``threadmind._lowlevel``; the rest is anyio."""
    users = sorted(name for name in MODULES if any(t == "asyncio" for t in _stdlib_imports(name)))
    assert users == ["threadmind._lowlevel"]


def _stdlib_imports(module: str) -> Iterator[str]:
    for node in ast.walk(_tree(module)):
        if isinstance(node, ast.Import):
            yield from (alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            yield node.module.split(".")[0]


# -- the layer table of ARCHITECTURE.md ---------------------------------------------------------------------

ARCHITECTURE = Path(__file__).resolve().parents[1] / "ARCHITECTURE.md"


def _part(module: str) -> str:
    """The table's name of the part a module belongs to: its top-level package or module (``__init__`` for the
    package root)."""
    rest = module.split(".")[1:]
    return rest[0] if rest else "__init__"


def _layer_table() -> list[tuple[set[str], set[str] | None]]:
    """The rows of the parts table, lowest first: (the parts of the row, the parts it may import besides its
    own row; None: everything above)."""
    text = ARCHITECTURE.read_text()
    start = text.index("| part | job |")
    rows: list[tuple[set[str], set[str] | None]] = []
    for line in text[start:].splitlines()[2:]:
        if not line.startswith("|"):
            break
        cells = [cell.strip() for cell in line.strip().strip("|").split(" | ")]
        names = {name.removesuffix(".py").removesuffix("/") for name in _ticked(cells[0])}
        allowed = None if cells[-1] == "everything above" else set(_ticked(cells[-1]))
        rows.append((names, allowed))
    return rows


def _ticked(cell: str) -> list[str]:
    return cell.split("`")[1::2]


def _layer_breaches() -> list[str]:
    """Imports the table does not allow, and parts it does not name."""
    rows = _layer_table()
    row_of = {name: i for i, (names, _) in enumerate(rows) for name in names}
    bad: list[str] = []
    for module in sorted(MODULES):
        part = _part(module)
        if part not in row_of:
            bad.append(f"{module}: its part {part!r} has no row in ARCHITECTURE.md")
            continue
        names, allowed = rows[row_of[part]]
        for target, line in _imports(module, typing_only=False):
            other = _part(target)
            if other == part or other in names:
                continue
            below = other in row_of and row_of[other] < row_of[part]
            if (allowed is None and below) or (allowed is not None and other in allowed):
                continue
            bad.append(f"{module}:{line} imports {target}, which the row of {part!r} does not allow")
    return bad


def test_every_import_is_one_the_layer_table_allows() -> None:
    assert _layer_breaches() == []


def test_the_layer_check_catches_an_import_the_table_does_not_allow(monkeypatch: pytest.MonkeyPatch) -> None:
    """A made-up import of ``memory`` from ``codecs`` is named."""
    def fake_imports(module: str, *, typing_only: bool = True) -> Iterator[tuple[str, int]]:
        if module == "threadmind.codecs":
            yield "threadmind.memory", 1

    monkeypatch.setattr(sys.modules[__name__], "_imports", fake_imports)
    assert _layer_breaches() == ["threadmind.codecs:1 imports threadmind.memory, which the row of 'codecs' does "
                                 "not allow"]


def _reexports(package: str) -> set[str]:
    """The names a package ``__init__`` re-exports: its module-level ``from .x import A as A`` (also from another
    package, ``from ..tools import Tool as Tool``; a plain import is for the ``__init__``'s own use)."""
    names: set[str] = set()
    for node in ast.parse(MODULES[package].read_text()).body:
        if isinstance(node, ast.ImportFrom) and node.level and node.module != "__future__":
            names.update(alias.name for alias in node.names if alias.asname == alias.name)
    return names


@pytest.mark.parametrize("module", sorted(m for m in MODULES if _exported(m)))
def test_every_name_a_module_exports_exists(module: str) -> None:
    """``__all__`` one way: every name listed is defined (or imported) by the module."""
    import importlib

    loaded = importlib.import_module(module)
    assert [name for name in sorted(_exported(module)) if not hasattr(loaded, name)] == []


@pytest.mark.parametrize("package", sorted(p for p in PACKAGES if p != ROOT))
def test_a_package_exports_exactly_what_it_re_exports(package: str) -> None:
    """``__all__`` the other way: a package ``__init__`` re-exports a name only to list it (no half-public names)."""
    assert _reexports(package) == _exported(package)


@pytest.mark.parametrize("package", sorted(p for p in PACKAGES if p != ROOT))
def test_public_classes_and_functions_name_the_package_users_import(package: str) -> None:
    """``threadmind.stores.SQLiteStore`` says so in its repr and ``help()`` (msgspec Structs keep their defining
    module, where msgspec resolves their annotations)."""
    import importlib
    import inspect

    import msgspec

    loaded = importlib.import_module(package)
    wrong = []
    for name in sorted(_exported(package)):
        value = getattr(loaded, name)
        if isinstance(value, type) and issubclass(value, msgspec.Struct):
            continue
        module = getattr(value, "__module__", "")
        if (isinstance(value, type) or inspect.isfunction(value)) and module.startswith(f"{package}._"):
            wrong.append(f"{name}: {module}")
    assert wrong == []
