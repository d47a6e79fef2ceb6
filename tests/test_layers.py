"""The import layers written in docs/internals.md hold for every module of ``aah_viz`` and ``instrumentation``,
and the floors of ``instrumentation`` (the model at the bottom, what measures, trains or retrofits it above)
hold among its own modules.

Every import statement counts, at module level or inside a function: a lazy import defers loading, it
does not make an upward arrow or a circle acceptable. The checks are pure functions of a source tree,
so the last tests run them on a small package built in ``tmp_path`` that breaks each rule once.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs" / "internals.md"
PACKAGES = ("aah_viz", "instrumentation")
RUNLOG = "aah_viz.runlog"
MODEL = "instrumentation"  # the package whose floors the docs write down (``<!-- floors of instrumentation``)


@dataclass(frozen=True)
class Import:
    source: str  # the importing module
    target: str  # the imported module: the longest module of the tree the statement names
    names: tuple[str, ...]  # names taken from ``target`` (``from target import a, b``)
    line: int


def docs_block(text: str, marker: str) -> list[str]:
    """The non-empty lines of the fenced block that follows the HTML comment starting with ``marker``."""
    match = re.search(rf"<!-- {re.escape(marker)}[^\n]*-->\n```[a-z]*\n(.*?)\n```", text, re.S)
    assert match, f"no block after '<!-- {marker}' in the docs"
    return [line.strip() for line in match.group(1).splitlines() if line.strip()]


def parse_layers(lines: list[str]) -> list[list[str]]:
    """Layers highest first; each a list of entries (``a | b`` on one line)."""
    return [[entry.strip() for entry in line.split("|")] for line in lines]


def parse_private(lines: list[str]) -> tuple[set[str], dict[str, set[str]]]:
    """(modules private as a whole, {module: its private names}) from ``module`` or ``module: NAME ...`` lines."""
    whole, names = set(), {}
    for line in lines:
        module, sep, rest = line.partition(":")
        if sep:
            names[module.strip()] = set(rest.split())
        else:
            whole.add(module.strip())
    return whole, names


def find_modules(root: Path, packages) -> dict[str, Path]:
    found = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join(parts)] = path
    return found


def _in_tree(name: str, modules) -> str | None:
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def _parse(modules: dict[str, Path]) -> dict[str, ast.Module]:
    return {name: ast.parse(path.read_text(), filename=str(path)) for name, path in modules.items()}


def find_imports(modules: dict[str, Path], trees: dict[str, ast.Module] | None = None) -> list[Import]:
    """Every import of a module of the tree, anywhere in each module's code (``ast.walk``)."""
    trees = trees or _parse(modules)
    found = []
    for source, tree in trees.items():
        package = source if modules[source].name == "__init__.py" else source.rpartition(".")[0]
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    target = _in_tree(alias.name, modules)
                    if target and target != source:
                        found.append(Import(source, target, (), node.lineno))
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - node.level + 1]
                    origin = ".".join(base + ([node.module] if node.module else []))
                else:
                    origin = node.module
                for alias in node.names:
                    submodule = f"{origin}.{alias.name}"
                    if submodule in modules:  # ``from package import module``
                        found.append(Import(source, submodule, (), node.lineno))
                    elif (target := _in_tree(origin, modules)) and target != source:
                        found.append(Import(source, target, (alias.name,), node.lineno))
    return found


def attribute_uses(modules: dict[str, Path], trees: dict[str, ast.Module] | None = None) -> list[Import]:
    """``alias.NAME`` where ``alias`` is a module of the tree imported under that name (``from pkg import mod``)."""
    trees = trees or _parse(modules)
    found = []
    for source, tree in trees.items():
        bound = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and not node.level:
                for alias in node.names:
                    if f"{node.module}.{alias.name}" in modules:
                        bound[alias.asname or alias.name] = f"{node.module}.{alias.name}"
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.asname and alias.name in modules:
                        bound[alias.asname] = alias.name
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in bound:
                found.append(Import(source, bound[node.value.id], (node.attr,), node.lineno))
    return found


def entry_of(module: str, entries: list[str]) -> str | None:
    """The longest entry naming ``module`` or one of its packages."""
    matching = [e for e in entries if module == e or module.startswith(e + ".")]
    return max(matching, key=len) if matching else None


def layer_violations(imports: list[Import], modules, layers: list[list[str]]) -> list[str]:
    rank = {entry: i for i, line in enumerate(layers) for entry in line}  # 0 = highest
    entries = list(rank)
    problems = [f"{e} is listed but no such module or package" for e in entries if _in_tree(e, modules) != e]
    problems += [f"{m} is in no layer" for m in modules if entry_of(m, entries) is None]
    for imp in imports:
        src, dst = entry_of(imp.source, entries), entry_of(imp.target, entries)
        if src is None or dst is None or src == dst:
            continue
        if rank[dst] < rank[src]:
            problems.append(f"{imp.source}:{imp.line} imports {imp.target}, a higher layer ({dst} above {src})")
        elif rank[dst] == rank[src]:
            problems.append(f"{imp.source}:{imp.line} imports {imp.target}, beside it in one layer ({src} | {dst})")
    return problems


def floor_violations(imports: list[Import], modules, package: str, floors: list[list[str]]) -> list[str]:
    """The layer rules among the modules of ``package`` alone, against its own floors (highest first)."""

    def inside(module: str) -> bool:
        return module == package or module.startswith(package + ".")

    own = {m: path for m, path in modules.items() if inside(m)}
    return layer_violations([i for i in imports if inside(i.source) and inside(i.target)], own, floors)


def private_name_uses(imports: list[Import]) -> list[str]:
    """A ``_name`` of one module taken by another: what two modules share is a public name of one of them."""
    return [
        f"{imp.source}:{imp.line} takes {imp.target}.{name}, a private name"
        for imp in imports
        for name in imp.names
        if name.startswith("_") and not name.startswith("__")
    ]


def cycles(imports: list[Import]) -> list[list[str]]:
    """Strongly connected sets of more than one module (Tarjan, iterative)."""
    graph: dict[str, set[str]] = {}
    for imp in imports:
        graph.setdefault(imp.source, set()).add(imp.target)
        graph.setdefault(imp.target, set())
    index, low, on_stack, stack, found = {}, {}, set(), [], []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def private_violations(imports: list[Import], owner: str, whole: set[str], names: dict[str, set[str]]) -> list[str]:
    """Modules outside ``owner`` that import a private module, or a private name of a module."""
    problems = []
    for imp in imports:
        if imp.source == owner or imp.source.startswith(owner + "."):
            continue
        if imp.target in whole:
            problems.append(f"{imp.source}:{imp.line} uses {imp.target}, private to {owner}")
        for name in set(imp.names) & names.get(imp.target, set()):
            problems.append(f"{imp.source}:{imp.line} uses {imp.target}.{name}, private to {owner}")
    return problems


def check_tree(root: Path, packages, docs_text: str, owner: str, floors_of: str) -> dict[str, list]:
    modules = find_modules(root, packages)
    trees = _parse(modules)
    imports = find_imports(modules, trees)
    uses = imports + attribute_uses(modules, trees)
    whole, names = parse_private(docs_block(docs_text, "runlog-private"))
    floors = parse_layers(docs_block(docs_text, f"floors of {floors_of}"))
    return {
        "layers": layer_violations(imports, modules, parse_layers(docs_block(docs_text, "import layers"))),
        "floors": floor_violations(imports, modules, floors_of, floors),
        "cycles": cycles(imports),
        "private": private_violations(uses, owner, whole, names),
        "private_names": private_name_uses(uses),
    }


# ---- the project ------------------------------------------------------------------------------------


def test_the_docs_name_the_layers_and_the_run_logs_private_parts():
    text = DOCS.read_text()
    layers = parse_layers(docs_block(text, "import layers"))
    flat = [e for line in layers for e in line]
    assert len(flat) == len(set(flat)) and {"aah_viz", "instrumentation", RUNLOG} <= set(flat)
    whole, names = parse_private(docs_block(text, "runlog-private"))
    assert all(m.startswith(RUNLOG + ".") for m in whole | set(names))
    modules = find_modules(REPO, PACKAGES)
    assert whole <= set(modules) and set(names) <= set(modules)
    for module, private in names.items():  # every private name is defined there
        defined = {
            t.id if isinstance(t, ast.Name) else t.name
            for node in ast.parse(modules[module].read_text()).body
            for t in ([*node.targets] if isinstance(node, ast.Assign) else [node])
            if isinstance(t, (ast.Name, ast.FunctionDef, ast.ClassDef))
        }
        assert private <= defined, private - defined


@pytest.fixture(scope="module")
def project() -> dict[str, list]:
    return check_tree(REPO, PACKAGES, DOCS.read_text(), RUNLOG, MODEL)


def test_no_module_imports_a_higher_layer_or_a_sibling(project):
    assert not project["layers"], "\n".join(map(str, project["layers"]))


def test_the_model_package_has_floors_and_no_module_imports_a_floor_above_its_own(project):
    """The model (config, events, routing, backends, attention, model) at the bottom of ``instrumentation``;
    the recorder, training, retrofit and the measuring modules above it; none of them imported from below."""
    floors = parse_layers(docs_block(DOCS.read_text(), f"floors of {MODEL}"))
    assert floors[0] == [MODEL] and floors[-1] and len(floors) > 5  # the package's face on top
    assert not project["floors"], "\n".join(map(str, project["floors"]))


def test_no_module_takes_another_modules_private_name(project):
    assert not project["private_names"], "\n".join(map(str, project["private_names"]))


def test_there_is_no_import_circle(project):
    assert not project["cycles"], "\n".join(map(str, project["cycles"]))


def test_only_the_run_log_touches_locks_generations_and_segment_names(project):
    assert not project["private"], "\n".join(map(str, project["private"]))


def test_function_level_imports_are_seen():
    """The CLI imports its work inside ``func``: those imports are in the graph."""
    imports = find_imports(find_modules(REPO, PACKAGES))
    assert any(i.source == "aah_viz.cli.train" and i.target == "instrumentation" for i in imports)


# ---- the checks fail when a rule is broken ------------------------------------------------------------

TOY_DOCS = """
<!-- import layers -->
```text
toy | toy.top
toy.mid | toy.side
toy.low
```

<!-- runlog-private -->
```text
toy.low.lock
toy.low.paths: segment_name
```

<!-- floors of toy.low -->
```text
toy.low | toy.low.writer | toy.low.reader
toy.low.paths
toy.low.lock
```
"""


def _toy(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def _toy_files() -> dict[str, str]:
    return {
        "toy/__init__.py": "",
        "toy/top.py": "from toy import mid\nfrom toy.low import writer\n",
        "toy/mid.py": "from toy.low import paths\n",
        "toy/side.py": "",
        "toy/low/__init__.py": "",
        "toy/low/lock.py": "",
        "toy/low/paths.py": "def segment_name(s, n):\n    return s\n\n\ndef resolve_under(root, p):\n    return p\n",
        "toy/low/writer.py": "from toy.low import lock, paths\n\nNAME = paths.segment_name('a', 1)\n",
        "toy/low/reader.py": "from toy.low.paths import resolve_under\n",
    }


def test_a_clean_toy_tree_passes(tmp_path):
    _toy(tmp_path, _toy_files())
    found = check_tree(tmp_path, ("toy",), TOY_DOCS, "toy.low", "toy.low")
    assert found == {"layers": [], "floors": [], "cycles": [], "private": [], "private_names": []}


def test_an_upward_import_between_floors_of_one_package_fails(tmp_path):
    files = _toy_files()
    files["toy/low/lock.py"] = "def later():\n    from toy.low import reader\n\n    return reader\n"
    files["toy/low/reader.py"] += "from toy.low import writer\n"
    _toy(tmp_path, files)
    found = check_tree(tmp_path, ("toy",), TOY_DOCS, "toy.low", "toy.low")
    assert sorted(found["floors"]) == [
        "toy.low.lock:2 imports toy.low.reader, a higher layer (toy.low.reader above toy.low.lock)",
        "toy.low.reader:2 imports toy.low.writer, beside it in one layer (toy.low.reader | toy.low.writer)",
    ]
    assert found["layers"] == []  # one entry of the top-level layers: only the floors see it


def test_a_private_name_taken_from_another_module_fails(tmp_path):
    files = _toy_files()
    files["toy/low/paths.py"] += "\n\ndef _shared():\n    return 1\n"
    files["toy/low/reader.py"] = "from toy.low import paths\nfrom toy.low.paths import _shared\n\nX = paths._shared\n"
    _toy(tmp_path, files)
    found = check_tree(tmp_path, ("toy",), TOY_DOCS, "toy.low", "toy.low")
    assert sorted(found["private_names"]) == [
        "toy.low.reader:2 takes toy.low.paths._shared, a private name",
        "toy.low.reader:4 takes toy.low.paths._shared, a private name",
    ]


def test_an_upward_or_sideways_import_inside_a_function_fails(tmp_path):
    files = _toy_files()
    files["toy/low/reader.py"] += "\n\ndef later():\n    from toy import top\n\n    return top\n"
    files["toy/side.py"] = "import toy.mid as m\n"
    _toy(tmp_path, files)
    found = check_tree(tmp_path, ("toy",), TOY_DOCS, "toy.low", "toy.low")
    assert sorted(found["layers"]) == [
        "toy.low.reader:5 imports toy.top, a higher layer (toy.top above toy.low)",
        "toy.side:1 imports toy.mid, beside it in one layer (toy.side | toy.mid)",
    ]
    assert found["cycles"] == [] and found["private"] == []  # nothing imports reader or side: no circle


def test_a_circle_hidden_in_a_function_fails(tmp_path):
    files = _toy_files()
    files["toy/low/paths.py"] += "\n\ndef _late():\n    from toy.low import reader\n\n    return reader\n"
    _toy(tmp_path, files)
    found = check_tree(tmp_path, ("toy",), TOY_DOCS, "toy.low", "toy.low")
    assert found["cycles"] == [["toy.low.paths", "toy.low.reader"]]
    assert found["layers"] == []  # one entry: only the circle check sees it


def test_private_modules_and_names_used_outside_their_package_fail(tmp_path):
    files = _toy_files()
    files["toy/mid.py"] = "from toy.low import lock, paths\n\nX = paths.segment_name('a', 1)\nY = paths.resolve_under\n"
    files["toy/side.py"] = "from toy.low.paths import resolve_under, segment_name\n"
    _toy(tmp_path, files)
    found = check_tree(tmp_path, ("toy",), TOY_DOCS, "toy.low", "toy.low")
    assert sorted(found["private"]) == [
        "toy.mid:1 uses toy.low.lock, private to toy.low",
        "toy.mid:3 uses toy.low.paths.segment_name, private to toy.low",
        "toy.side:1 uses toy.low.paths.segment_name, private to toy.low",
    ]


def test_a_listed_entry_that_does_not_exist_and_a_module_outside_every_entry_fail(tmp_path):
    _toy(tmp_path, {**_toy_files(), "stray/__init__.py": ""})
    docs = TOY_DOCS.replace("toy | toy.top", "toy.top | toy.gone")
    found = check_tree(tmp_path, ("toy", "stray"), docs, "toy.low", "toy.low")
    assert sorted(found["layers"]) == [
        "stray is in no layer",
        "toy is in no layer",
        "toy.gone is listed but no such module or package",
    ]
