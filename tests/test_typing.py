"""The public API is typed: the package ships `py.typed` (PEP 561), and mypy finds nothing in the modules
pyproject.toml's [tool.mypy] names (`make typecheck`). And the check can fail: an error added to a copy
of one of them is reported."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("mypy", reason="the type check needs the 'dev' extra")

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.heavy


def mypy(cwd: Path, cache: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mypy", "--cache-dir", str(cache)], cwd=cwd, capture_output=True,
                          text=True, timeout=600)


def test_the_package_ships_py_typed():
    import re

    assert (ROOT / "src" / "videotext" / "py.typed").is_file()  # the wheel carries it (tests/integration/test_wheel.py)
    package_data = re.search(r"\[tool\.setuptools\.package-data\]\nvideotext = \[(.*)\]",
                             (ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert package_data is not None and '"py.typed"' in package_data.group(1)


def test_the_public_modules_are_clean_and_an_error_is_found(tmp_path):
    done = mypy(ROOT, tmp_path / "cache")
    assert done.returncode == 0, done.stdout[-5000:]
    assert "Success: no issues found" in done.stdout

    copy = tmp_path / "repo"
    copy.mkdir()
    shutil.copy(ROOT / "pyproject.toml", copy / "pyproject.toml")
    shutil.copytree(ROOT / "src", copy / "src", ignore=shutil.ignore_patterns("__pycache__"))
    inference = copy / "src" / "videotext" / "inference.py"
    inference.write_text(inference.read_text() + "\n\ndef broken() -> int:\n    return load_model('runs/x')\n")
    done = mypy(copy, tmp_path / "cache")
    assert done.returncode == 1 and 'inference.py:' in done.stdout and "LoadedModel" in done.stdout, done.stdout[-3000:]
