"""The wheel works on its own: built from the source tree, installed with --no-deps into a
scratch folder outside the repository, and run from another folder outside it, with only
that folder on PYTHONPATH, so the installed copy (not src/) is what runs. A file the
package needs but the wheel leaves out (a config, a static page) fails here.

The dependencies come from the running environment (the wheel is installed --no-deps);
building is offline (--no-build-isolation uses the installed setuptools).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "src" / "videotext"
# a handful of videos, one short epoch: batch 8 and no warm-up so that 1 epoch = 1 step
TINY = ["--set", "train.batch_size=8", "--set", "schedule.warmup_steps=0", "--set", "model.freeze_text=true"]


def run(args: list[str], cwd: Path, env: dict[str, str], timeout: float = 600) -> str:
    done = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{' '.join(args)} exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    """(scratch folder holding the installed wheel, environment that imports it)."""
    base = tmp_path_factory.mktemp("wheel")
    assert not base.resolve().is_relative_to(ROOT), "the scratch folders must lie outside the repository"
    source = base / "source"  # a copy, so that building writes nothing (build/, *.egg-info) into the repository
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, source / name)
    shutil.copytree(PACKAGE, source / "src" / "videotext",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info"))
    env = {**os.environ, "PIP_NO_INDEX": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1",
           "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    env.pop("PYTHONPATH", None)
    run([sys.executable, "-m", "pip", "wheel", ".", "--no-deps", "--no-build-isolation", "-q", "-w", str(base / "dist")],
        source, env, timeout=900)
    wheel, = (base / "dist").glob("videotext-*.whl")
    shipped = {n for n in zipfile.ZipFile(wheel).namelist() if n.startswith("videotext/")}
    wanted = {"videotext/" + p.relative_to(source / "src" / "videotext").as_posix()
              for p in (source / "src" / "videotext").rglob("*") if p.is_file()}
    assert sorted(wanted - shipped) == [], "package files the wheel leaves out (pyproject package-data)"
    assert "videotext/py.typed" in shipped  # PEP 561: type checkers read the installed package's annotations
    scratch = base / "site"
    run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(scratch), str(wheel)], base, env)
    return scratch, {**env, "PYTHONPATH": str(scratch)}


def test_the_installed_wheel_runs_demo_train_by_name_and_configs(installed, tmp_path_factory):
    scratch, env = installed
    work = tmp_path_factory.mktemp("elsewhere")  # the user's folder: neither the repository nor the install
    cli = [str(scratch / "bin" / "videotext")]  # the console script pip wrote
    where = run([sys.executable, "-c", "import videotext, videotext.config as c; print(videotext.__file__); print(c.PACKAGED)"],
                work, env).split()
    assert [Path(p).is_relative_to(scratch) for p in where] == [True, True], where

    assert run(cli + ["--version"], work, env).strip() == "videotext 0.1.0"

    listed = dict(line.split(None, 1) for line in run(cli + ["configs"], work, env).splitlines())
    assert len(listed) == len(list(PACKAGE.glob("configs/*/*.yaml")))
    assert listed["mmt/msrvtt_1ka"].startswith("MMT (Gabeur et al. 2020) on MSR-VTT, split 1k-A")

    out = run(cli + ["demo", "--videos", "12", "--epochs", "1", "--out", "demo", *TINY], work, env)
    assert "report: demo/report/index.html" in out
    summary = json.loads((work / "demo" / "demo_summary.json").read_text())
    assert summary["test_videos"] >= 2 and (work / "demo" / "report" / "index.html").is_file()

    data = work / "data" / "synthetic-12-seed0"  # where the demo put its videos and features (the current folder)
    run(cli + ["train", "dual/synthetic", "--set", f"data.manifest={data.relative_to(work)}/manifest.json",
               "--set", f"data.features={data.relative_to(work)}/demo-features", "--set", "train.epochs=1", *TINY,
               "--out", "run", "--no-progress"], work, env)
    steps = [json.loads(line) for line in (work / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [s["step"] for s in steps if s["kind"] == "train"] == [1]
    assert json.loads((work / "run" / "test_metrics.json").read_text())["t2v"]["n_queries"] > 0
