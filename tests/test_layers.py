"""The package imports only downward (docs/architecture.md): every `import` of a videotext module,
at the top of a file or inside a function, goes to a module of the same layer or a lower one, and
no module imports one that imports it back: no import cycle, of any length, not even within a
layer (a package's `__init__` counts as a module of its own).

    foundations   errors digests io embedding runtime distributed weights cache http_client hub hub_runs download (and __version__)
    config        config
    parts         data text losses openclip models.layers
    models        models (base and one file per method)
    encode        encode
    eval          eval
    train         train
    search        search (the index, its stores, its channels and query sides)
    run           run_model (a trained run loaded for encoding; the query side when a folder has no export)
    apps          apps (the index folder's owner, the HTTP service, a run's train/eval) convert captioning
    api           inference (`load_model`: a run with the folder's build and search delegated to its owner)
    entry         cli demo benchmark __main__ and the package's public __init__
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
LAYERS = [
    ("foundations", ("errors", "digests", "io", "embedding", "runtime", "distributed", "weights", "cache",
                     "http_client", "hub", "hub_runs", "download", "__version__")),
    ("config", ("config",)),
    ("parts", ("data", "text", "losses", "openclip", "models.layers")),
    ("models", ("models",)),
    ("encode", ("encode",)),
    ("eval", ("eval",)),
    ("train", ("train",)),
    ("search", ("search",)),
    ("run", ("run_model",)),
    ("apps", ("apps", "convert", "captioning")),
    ("api", ("inference",)),
    ("entry", ("cli", "demo", "benchmark", "__main__", "")),
]


def layer_of(module: str) -> int:
    """Index in LAYERS of a `videotext.…` module (the longest matching prefix wins)."""
    rest = module.removeprefix("videotext").removeprefix(".")
    best, length = None, -1
    for index, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            matches = rest == prefix or rest.startswith(prefix + ".") or (prefix == "" and rest == "")
            if matches and len(prefix) > length:
                best, length = index, len(prefix)
    if best is None:
        raise AssertionError(f"module {module} has no layer: add it to LAYERS and docs/architecture.md")
    return best


def module_name(path: Path, root: Path = SRC) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def is_module(name: str, root: Path = SRC) -> bool:
    path = root.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def videotext_imports(path: Path, root: Path = SRC) -> list[tuple[str, int]]:
    """(imported videotext module, line) for every import in `path`, inside functions too."""
    module = module_name(path, root)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(anchor + ([node.module] if node.module else []))
            # `from videotext.data import video` names the module data.video; `from videotext.x import f` x
            # (`from videotext import __version__` names the package attribute, layered on its own)
            found += [(f"{base}.{alias.name}" if is_module(f"{base}.{alias.name}", root) or base == "videotext"
                       else base, node.lineno) for alias in node.names]
    return [(name, line) for name, line in found if name == "videotext" or name.startswith("videotext.")]


def upward_imports() -> list[str]:
    out = []
    for path in sorted((SRC / "videotext").rglob("*.py")):
        here = module_name(path)
        for target, line in videotext_imports(path):
            if layer_of(target) > layer_of(here):
                out.append(f"{path.relative_to(SRC)}:{line} {LAYERS[layer_of(here)][0]} imports "
                           f"{LAYERS[layer_of(target)][0]} ({target})")
    return out


def import_graph(root: Path = SRC) -> dict[str, dict[str, list[str]]]:
    """module -> {imported videotext module -> ["path:line", ...]}, for every module under root/videotext."""
    graph: dict[str, dict[str, list[str]]] = {}
    for path in sorted((root / "videotext").rglob("*.py")):
        edges = graph.setdefault(module_name(path, root), {})
        for target, line in videotext_imports(path, root):  # `from m import a, b`: one edge, one line
            lines = edges.setdefault(target, [])
            if f"{path.relative_to(root)}:{line}" not in lines:
                lines.append(f"{path.relative_to(root)}:{line}")
    return {module: {target: lines for target, lines in edges.items() if target in graph and target != module}
            for module, edges in graph.items()}


def import_cycles(graph: dict[str, dict[str, list[str]]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted: every
    module of one lies on an import cycle with the others."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for target in sorted(graph.get(module, {})):
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in on_stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == module:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return sorted(found)


def cycle_report(root: Path = SRC) -> list[str]:
    """One line per import cycle: its modules, then each import that joins two of them."""
    graph = import_graph(root)
    out = []
    for component in import_cycles(graph):
        members = set(component)
        joins = [f"{line} {module} -> {target}" for module in component
                 for target, lines in sorted(graph[module].items()) if target in members for line in lines]
        out.append(f"cycle {' <-> '.join(component)}: {'; '.join(joins)}")
    return out


def test_every_import_goes_to_the_same_layer_or_below():
    assert upward_imports() == []


@pytest.mark.parametrize("module, layer", [
    ("videotext.errors", "foundations"), ("videotext.models.layers.pooling", "parts"),
    ("videotext.models.dual", "models"), ("videotext.data.readers.msrvtt", "parts"),
    ("videotext.eval.retrieval", "eval"), ("videotext.search.index", "search"), ("videotext", "entry"),
])
def test_layers_are_assigned_by_the_longest_prefix(module, layer):
    assert LAYERS[layer_of(module)][0] == layer


def test_the_checker_sees_imports_inside_functions(tmp_path):
    package = tmp_path / "videotext" / "models"
    package.mkdir(parents=True)
    (tmp_path / "videotext" / "inference.py").write_text("")
    (package / "x.py").write_text("def f():\n    from videotext.train.trainer import Trainer\n"
                                  "from ..search import index\nfrom videotext import inference\n")
    found = videotext_imports(package / "x.py", tmp_path)
    assert sorted(found) == [("videotext.inference", 4), ("videotext.search", 3), ("videotext.train.trainer", 2)]


def test_no_import_cycle():
    cycles = cycle_report()
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


def test_the_cycle_checker_finds_cycles_through_function_imports_and_longer_ones(tmp_path):
    package = tmp_path / "videotext" / "pkg"
    package.mkdir(parents=True)
    (tmp_path / "videotext" / "__init__.py").write_text("")
    (package / "__init__.py").write_text("from videotext.pkg.a import f\n")  # a cycle of two: the package and a
    (package / "a.py").write_text("def f():\n    from videotext.pkg import g\n    return g\n")
    (package / "b.py").write_text("from videotext.pkg import c\n")  # a cycle of three: b -> c -> d -> b
    (package / "c.py").write_text("import videotext.pkg.d\n")
    (package / "d.py").write_text("def h():\n    from . import b\n")
    (package / "e.py").write_text("from videotext.pkg.b import x\nfrom videotext.pkg import a\n")  # no cycle
    graph = import_graph(tmp_path)
    assert graph["videotext.pkg.a"] == {"videotext.pkg": ["videotext/pkg/a.py:2"]}
    assert import_cycles(graph) == [["videotext.pkg", "videotext.pkg.a"],
                                    ["videotext.pkg.b", "videotext.pkg.c", "videotext.pkg.d"]]
    report = cycle_report(tmp_path)
    assert len(report) == 2 and "videotext/pkg/d.py:2 videotext.pkg.d -> videotext.pkg.b" in report[1]
