"""The package imports only downward (docs/architecture.md): every `import` of a videotext module,
at the top of a file or inside a function, goes to a module of the same layer or a lower one.

    foundations   errors io embedding runtime distributed weights hub download (and the package's __version__)
    config        config
    parts         data text losses openclip models.layers
    models        models (base and one file per method)
    encode        encode
    eval          eval
    train         train
    search        search (the index and its stores)
    apps          inference convert captioning search.service (the HTTP app loads a model)
    entry         cli demo benchmark __main__ and the package's public __init__
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"
LAYERS = [
    ("foundations", ("errors", "io", "embedding", "runtime", "distributed", "weights", "hub", "download",
                     "__version__")),
    ("config", ("config",)),
    ("parts", ("data", "text", "losses", "openclip", "models.layers")),
    ("models", ("models",)),
    ("encode", ("encode",)),
    ("eval", ("eval",)),
    ("train", ("train",)),
    ("search", ("search",)),
    ("apps", ("inference", "convert", "captioning", "search.service")),
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
