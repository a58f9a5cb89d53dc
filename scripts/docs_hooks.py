"""MkDocs hooks of the documentation site (mkdocs.yml `hooks:`; `make docs`).

- `<!-- config-keys -->` in a page becomes the tables of every run-config key: the sections of
  `videotext.config.RunConfig` and each method's `model:` keys, with type, default and the comment
  written beside the field (read from the source with `ast`, so the docs build imports no torch).
- A link from a page to a file of the repository outside docs/ (a source file, a benchmark, a test)
  becomes that file's repository path in code: the pages read the same on GitHub, and the site has
  no link that leads nowhere.
"""
from __future__ import annotations

import ast
import os
import re
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "videotext"
MARKER = "<!-- config-keys -->"
LINK = re.compile(r"(?<!!)\[([^\]]+)\]\(([^)\s#]+)(#[^)\s]*)?\)")
SECTIONS = {"data": "DataConfig", "data.narration": "NarrationConfig", "data.mixture[]": "MixtureSource",
            "optim": "OptimConfig", "schedule": "ScheduleConfig", "train": "TrainConfig",
            "inference": "InferenceConfig"}


def dataclass_fields(path: Path) -> dict[str, list[tuple[str, str, str, str]]]:
    """{class name: [(field, type, default, comment)]} of the dataclasses defined in the module at `path`."""
    source = path.read_text(encoding="utf-8")
    lines = source.splitlines()
    out = {}
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.ClassDef) or not any("dataclass" in ast.unparse(d) for d in node.decorator_list):
            continue
        fields = []
        for item in node.body:
            if not isinstance(item, ast.AnnAssign) or not isinstance(item.target, ast.Name):
                continue
            default = ast.unparse(item.value) if item.value is not None else "required"
            factory = re.fullmatch(r"field\(default_factory=(?:lambda: )?(.+)\)", default)
            if factory:
                default = {"list": "[]", "dict": "{}"}.get(factory.group(1), factory.group(1))
                default = "…" if default.endswith("Config") or default == "MixtureSource" else default
            line = lines[item.lineno - 1]
            comment = line.split("  # ", 1)[1].strip() if "  # " in line else ""
            fields.append((item.target.id, ast.unparse(item.annotation), default, comment))
        out[node.name] = fields
    return out


def method_configs() -> dict[str, list[tuple[str, str, str, str]]]:
    """{method name: its Config's fields}, for every method module (a class with `name = "…"`, `Config = X`)."""
    out = {}
    for path in sorted((SRC / "models").glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if not isinstance(node, ast.ClassDef):
                continue
            values = {t.id: item.value for item in node.body if isinstance(item, ast.Assign)
                      for t in item.targets if isinstance(t, ast.Name)}
            name, config = values.get("name"), values.get("Config")
            if isinstance(name, ast.Constant) and isinstance(config, ast.Name):
                out[str(name.value)] = dataclass_fields(path).get(config.id, [])
    return dict(sorted(out.items()))


def _table(prefix: str, fields: list[tuple[str, str, str, str]]) -> list[str]:
    def cell(text: str) -> str:
        return text.replace("|", "\\|")

    rows = ["| key | type | default | meaning |", "|---|---|---|---|"]
    rows += [f"| `{prefix}{name}` | `{cell(kind)}` | `{cell(default)}` | {cell(comment)} |"
             for name, kind, default, comment in fields]
    return rows


def config_keys() -> str:
    """The Markdown tables of every run-config key."""
    shared = dataclass_fields(SRC / "config.py")
    top = [f for f in shared["RunConfig"] if f[0] not in ("data", "optim", "schedule", "train", "inference")]
    out = ["### Top level", "", *_table("", top)]
    for section, cls in SECTIONS.items():
        fields = [f for f in shared[cls] if not (section == "data" and f[0] in ("narration", "mixture"))]
        out += ["", f"### `{section}`", "", *_table(section.replace("[]", "[i]") + ".", fields)]
    for method, fields in method_configs().items():
        out += ["", f"### `model` of `method: {method}`", "", *_table("model.", fields)]
    return "\n".join(out)


def _outside_docs(target: str, page_path: str, docs_dir: str) -> str | None:
    """The repository path of a relative link target that lies outside docs/, else None."""
    if re.match(r"^[a-z][a-z0-9+.-]*:", target):
        return None
    here = Path(docs_dir) / os.path.dirname(page_path)
    resolved = (here / target).resolve()
    if resolved.is_relative_to(Path(docs_dir).resolve()) or not resolved.is_relative_to(ROOT):
        return None
    return resolved.relative_to(ROOT).as_posix()


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    if MARKER in markdown:
        markdown = markdown.replace(MARKER, config_keys())

    def relink(match: re.Match) -> str:
        text, target, _ = match.groups()
        path = _outside_docs(target, page.file.src_path, config["docs_dir"])
        if path is None:
            return match.group(0)
        return f"`{path}`" if Path(path).name in text else f"{text} (`{path}`)"

    return LINK.sub(relink, markdown)
