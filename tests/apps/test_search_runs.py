"""`run_behind`: the run whose model encodes queries against an index."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from videotext.errors import VideoTextError
from videotext.search import Entry, Index
from videotext.search.runs import run_behind


def test_the_index_names_its_run():
    index = Index(4)
    index.meta["run_dir"] = "/runs/dual"
    assert run_behind(index) == Path("/runs/dual")


def test_an_explicit_run_wins(tmp_path):
    index = Index(4)
    index.meta["run_dir"] = "/runs/dual"
    assert run_behind(index, tmp_path / "other") == tmp_path / "other"
    assert run_behind(Index(4), "/runs/given") == Path("/runs/given")


def test_neither_names_a_run():
    with pytest.raises(VideoTextError, match=r"^idx: the index does not name the run that built it; "
                                             r"pass --run RUN_DIR$"):
        run_behind(Index(4), None, "idx")
    with pytest.raises(VideoTextError, match=r"^the index does not name the run"):
        run_behind(Index(4))


def _runless_index(folder: Path) -> Path:
    index = Index(4)
    index.add(np.eye(4, dtype=np.float32)[:1], [Entry("v0", path="v0.mp4")])
    return index.save(folder)


def test_service_and_cli_need_a_run_when_the_index_names_none(tmp_path):
    from typer.testing import CliRunner

    from videotext.cli import app
    from videotext.apps.serve import create_app

    folder = _runless_index(tmp_path / "idx")
    with pytest.raises(VideoTextError, match="idx: the index does not name the run that built it"):
        create_app(folder)
    for args in (["search", str(folder), "a red circle"], ["search", str(folder), "--like", str(folder / "x.png")]):
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 2
        assert f"error: {folder}: the index does not name the run that built it; pass --run RUN_DIR" in result.output
    result = CliRunner().invoke(app, ["search", str(folder), "--like-id", "v0"])  # the index's own vectors: no run
    assert result.exit_code == 0 and result.output == ""  # v0 is the only entry, and it is left out
