"""The documentation site builds with warnings as errors (`make docs`, mkdocs.yml): every docs/ page is
in the nav, every link leads somewhere, every API name the reference pages give (mkdocstrings) exists,
and the config-key tables cover every key. And the check can fail: a broken link and a missing API
name each stop a build of a copy of the docs."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("mkdocs", reason="the site needs the 'docs' extra: pip install 'videotext[docs]'")
pytest.importorskip("mkdocstrings_handlers.python", reason="the site needs the 'docs' extra")

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.heavy


def build(root: Path, site: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)], cwd=root,
                          capture_output=True, text=True, timeout=600, env={"NO_MKDOCS_2_WARNING": "1",
                                                                             **_environment()})


def _environment() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"PYTHONPATH": str(ROOT / "src")}


def test_the_site_builds_with_warnings_as_errors(tmp_path):
    done = build(ROOT, tmp_path / "site")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    api = (tmp_path / "site" / "api.html").read_text(encoding="utf-8")
    for name in ("videotext.inference.load_model", "videotext.inference.LoadedModel.encode_text",
                 "videotext.apps.index_folder.build_index", "videotext.apps.index_folder.open_index",
                 "videotext.apps.index_folder.check_index", "videotext.apps.index_folder.SearchableIndex",
                 "videotext.apps.index_folder.BuildReport", "videotext.search.index.Index",
                 "videotext.data.schema.VideoTextDataset", "videotext.eval.retrieval.retrieval_metrics",
                 "videotext.apps.push.push_to_hub"):
        assert f'id="{name}"' in api, name
    keys = (tmp_path / "site" / "config.html").read_text(encoding="utf-8")
    from videotext.config import RunConfig
    from dataclasses import fields

    for section in ("data", "optim", "schedule", "train", "inference"):
        for field in fields(getattr(RunConfig(), section)):
            if field.name not in ("narration", "mixture"):
                assert f"<code>{section}.{field.name}</code>" in keys, (section, field.name)
    assert "<code>model.text_model</code>" in keys and "method: mmt" in keys
    assert (tmp_path / "site" / "benchmark_r1_cost.png").is_file()  # the benchmark plot, beside its tables
    assert "src/videotext/models/dual.py" in (tmp_path / "site" / "methods" / "dual.html").read_text()


@pytest.mark.parametrize("damage, says", [
    (lambda docs: (docs / "sharing.md").write_text((docs / "sharing.md").read_text() + "\n[gone](no-such-page.md)\n"),
     "no-such-page.md"),
    (lambda docs: (docs / "api.md").write_text((docs / "api.md").read_text() + "\n::: videotext.inference.no_such_name\n"),
     "no_such_name"),
])
def test_a_broken_link_or_a_missing_api_name_fails_the_build(tmp_path, damage, says):
    copy = tmp_path / "repo"
    copy.mkdir()
    shutil.copy(ROOT / "mkdocs.yml", copy / "mkdocs.yml")
    shutil.copytree(ROOT / "docs", copy / "docs")
    for name in ("src", "scripts"):
        (copy / name).symlink_to(ROOT / name)
    damage(copy / "docs")
    done = build(copy, tmp_path / "site")
    assert done.returncode != 0 and says in done.stdout + done.stderr, done.stderr[-3000:]
