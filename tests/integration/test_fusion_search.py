"""`--by both` on a folder where the picture cannot tell videos apart: 20 videos of the same footage,
each with its own subtitle line. The words of a line must find its video first, as `--by said`
does, whatever order the (equal) visual scores come in."""
from __future__ import annotations

import json
import shutil

import pytest
from typer.testing import CliRunner

from tests.speech_media import SENTENCES, silent_footage

VIDEOS = 20


@pytest.fixture(scope="module")
def same_footage(tiny_synth, tmp_path_factory):
    """The index folder of 20 copies of one video, copy i subtitled with sentence i."""
    pytest.importorskip("bm25s", reason="spoken search needs the 'speech' extra: pip install 'videotext[speech]'")
    from tests.test_distributed import _fake_run
    from videotext.cli import app

    root = tmp_path_factory.mktemp("same_footage")
    folder = root / "videos"
    folder.mkdir()
    footage = silent_footage(root / "footage.mp4", seconds=2.0, seed=0)
    for i in range(VIDEOS):  # byte-identical copies: two encodings of the same frames can differ
        shutil.copyfile(footage, folder / f"talk{i:02d}.mp4")
        (folder / f"talk{i:02d}.srt").write_text(f"1\n00:00:00,500 --> 00:00:02,000\n{SENTENCES[i][0]}\n",
                                                  encoding="utf-8")
    run = _fake_run(tiny_synth, root / "run")
    result = CliRunner().invoke(app, ["index", "build", str(run), str(folder), "--out", str(root / "idx"), "--speech"])
    assert result.exit_code == 0, result.output
    return root / "idx"


def test_equal_pictures_give_equal_visual_scores(same_footage):
    from videotext.inference import load_model
    from videotext.search.index import Index
    from videotext.search.runs import run_behind

    index = Index.load(same_footage)
    model = load_model(run_behind(index, None, same_footage))
    scores = {h.score for h in model.search(SENTENCES[0][1], index, k=VIDEOS)}
    assert len(scores) == 1, scores


@pytest.mark.parametrize("fusion", ["standard", "rrf"])
def test_key_words_find_their_video_first_with_the_default_fused_search(same_footage, fusion):
    from videotext.inference import load_model
    from videotext.search.index import Index
    from videotext.search.runs import run_behind
    from videotext.search.channels import search_by
    from videotext.search.spoken import SpokenIndex

    index, spoken = Index.load(same_footage), SpokenIndex.load(same_footage)
    model = load_model(run_behind(index, None, same_footage))
    firsts = {by: [search_by(model, index, spoken, SENTENCES[i][1], k=3, by=by, fusion=fusion)[0].id
                   for i in range(VIDEOS)] for by in ("said", "both")}
    expected = [f"talk{i:02d}" for i in range(VIDEOS)]
    assert firsts["said"] == expected
    assert firsts["both"] == expected  # 20 of 20, as by what is said


def test_cli_prints_the_fused_hit_with_its_line(same_footage):
    from videotext.cli import app

    result = CliRunner().invoke(app, ["search", str(same_footage), "kitten rescued from a tree", "--json", "-k", "2"])
    assert result.exit_code == 0, result.output
    found = json.loads(result.output)
    assert found[0]["id"] == "talk18" and found[0]["meta"]["said"]["text"] == SENTENCES[18][0]
    bad = CliRunner().invoke(app, ["search", str(same_footage), "kitten", "--fusion", "max"])
    assert bad.exit_code == 2 and "--fusion 'max': expected one of standard, rrf" in bad.output
