"""Text on screen (`data.ocr`): the engines on a rendered frame, spaces put back from character
positions, change detection, lines merged across time into segments, the stored format and resume."""
from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from tests.onscreen_media import draw_lines, texted_video
from videotext.data.ocr.engines import TextBox
from videotext.data.ocr.spacing import merge_fragments, respace, restore_spaces, split_joined_words
from videotext.data.ocr.reader import ONSCREEN, _Segments, changed, read_onscreen, thumbnail, video_text


def boxes(*xs):
    """Character boxes (four corners each) spanning [x0, x1] on one text row."""
    return [[[x0, 10], [x1, 10], [x1, 30], [x0, 30]] for x0, x1 in xs]


def test_a_gap_wider_than_the_threshold_is_a_space():
    # "Q3 2026": letters 10 px wide touching, a 12 px gap after "Q3" (1.2 median widths)
    chars = boxes((0, 10), (10, 20), (32, 42), (42, 52), (52, 62), (62, 72))
    assert restore_spaces("Q32026", chars, gap=0.6) == "Q3 2026"
    assert restore_spaces("Q32026", chars, gap=1.5) == "Q32026"  # gap below 1.5 widths: no space
    assert restore_spaces("Q3 2026", chars, gap=0.6) == "Q3 2026"  # 7 characters, 6 boxes: kept as read
    assert restore_spaces("Q32026", chars, gap=0) == "Q32026"
    spaced = boxes((0, 10), (10, 20), (20, 30), (32, 42), (42, 52), (52, 62), (62, 72))  # "Q3 2026" read with its space
    assert restore_spaces("Q3 2026", spaced, gap=0.1, spaced=False) == "Q3 2026"  # a spaced line is the reader's


def test_words_the_reader_ran_together_or_broke_apart_are_mended():
    """By the GloVe vocabulary's word frequencies (Zipf costs, as wordninja)."""
    assert split_joined_words("ExportPreferences") == "Export Preferences"  # case kept
    assert split_joined_words("Q3revenue, afterstorm") == "Q3 revenue, after storm"
    assert split_joined_words("Thermodynamics Zelenskyy") == "Thermodynamics Zelenskyy"  # words, names: kept
    assert merge_fragments("Votes m in is ter ele ct io n") == "Votes minister election"
    assert merge_fragments("a cup of flour in the house") == "a cup of flour in the house"
    assert respace("f（x）= 3x") == "f(x)= 3x"  # full-width forms to ASCII (NFKC)


def test_change_is_a_grid_cell_not_the_whole_frame():
    frame = np.full((360, 640, 3), 90, np.uint8)
    before = thumbnail(frame)
    small_caption = draw_lines(frame.copy(), [("Step 4", (20, 20))], size=20)  # a few % of the frame
    assert changed(before, thumbnail(small_caption))
    assert not changed(before, thumbnail(np.clip(frame.astype(int) + 3, 0, 255).astype(np.uint8)))
    assert changed(None, before)


def test_readings_of_one_line_merge_into_one_segment():
    segments = _Segments(every=1.0)
    title = [10, 10, 200, 40]
    segments.add(0.5, [], "ocr:fake")
    segments.add(1.5, [TextBox("Chapter 3: Thermodynamics", title, 0.9)], "ocr:fake")
    segments.add(2.5, [TextBox("Chapter 3: Thermodynamcs", [12, 11, 198, 41], 0.7),  # one letter misread
                       TextBox("x = 42", [10, 100, 80, 130], 0.95)], "ocr:fake")
    segments.add(3.5, [TextBox("x = 42", [10, 100, 80, 130], 0.97)], "ocr:fake")
    segments.add(4.5, [TextBox("Chapter 3: Thermodynamics", title, 0.9)], "ocr:fake")  # back: a new segment
    lines = segments.close("ocr:fake")
    assert [(line.text, line.start, line.end) for line in lines] == [
        ("Chapter 3: Thermodynamics", 1.0, 3.0), ("x = 42", 2.0, 4.0), ("Chapter 3: Thermodynamics", 4.0, 5.0)]
    assert lines[0].box == [10, 10, 200, 41] and lines[1].confidence == 0.97  # union box, best reading


class CountingEngine:
    """Reads a fixed line and counts the frames it was given."""

    source = "ocr:counting:1"

    def __init__(self):
        self.calls = 0

    def read(self, frame):
        self.calls += 1
        return [TextBox("Lecture 12", [40, 60, 200, 90], 0.9)] if frame.mean() > 0 else []


def test_a_static_picture_is_read_once(tmp_path):
    path = texted_video(tmp_path / "slide.mp4", [("Lecture 12", 0.0, 8.0, (40, 60))], seconds=8.0, still=True)
    engine = CountingEngine()
    lines, seen = video_text(path, engine)
    assert seen == {"samples": 8, "read": 1, "unreadable": 0} and engine.calls == 1
    assert [(line.text, line.start, line.end) for line in lines] == [("Lecture 12", 0.0, 8.0)]


@pytest.mark.parametrize("engine", ["rapidocr", "tesseract"])
def test_engines_read_a_rendered_line(engine):
    from videotext.data.ocr.engines import OcrError, ocr_engine

    try:
        reader = ocr_engine(engine)
    except OcrError as exc:
        pytest.skip(str(exc))
    frame = draw_lines(np.full((360, 640, 3), 70, np.uint8), [("Breaking news bridge closed", (40, 60))])
    read = reader.read(frame)
    assert [b.text for b in read] == ["Breaking news bridge closed"], read
    x0, y0, x1, y1 = read[0].box
    assert 30 <= x0 <= 50 and 50 <= y0 <= 75 and 380 <= x1 <= 460 and 80 <= y1 <= 110  # where it was drawn
    assert 0.5 <= read[0].confidence <= 1.0


def test_store_resumes_and_reads_a_changed_video_again(tmp_path, monkeypatch):
    import videotext.data.ocr.reader as reader

    engines = []
    monkeypatch.setattr(reader, "ocr_engine", lambda name, threads=1: engines.append(CountingEngine()) or engines[-1])
    folder = tmp_path / "videos"
    folder.mkdir()
    items = [(name, texted_video(folder / f"{name}.mp4", [("Lecture 12", 1.0, 3.0, (40, 60))], seconds=4.0, seed=i))
             for i, name in enumerate(["a", "b"])]
    (folder / "broken.mp4").write_bytes(b"not a video")
    items.append(("broken", folder / "broken.mp4"))
    first = read_onscreen(items, tmp_path / "features", engine="counting", progress=False)
    assert (first["text"], first["failed"], first["kept"]) == (2, 1, 0)
    records = [json.loads(line) for line in (tmp_path / "features" / ONSCREEN).read_text().splitlines()]
    assert [r["key"] for r in records] == ["a", "b"] and records[0]["source"] == "ocr:counting:1"
    assert records[0]["lines"][0]["box"] == [40.0, 60.0, 200.0, 90.0]
    failure = json.loads((tmp_path / "features" / "failures.jsonl").read_text().splitlines()[0])
    assert (failure["item"], failure["stage"]) == ("broken", "ocr")
    shutil.copyfile(items[0][1], folder / "b.mp4")  # b changes in place
    again = read_onscreen(items[:2], tmp_path / "features", engine="counting", progress=False)
    assert (again["kept"], again["text"]) == (1, 1)


def test_the_ocr_expert_is_glove_vectors_of_the_words_on_screen(tmp_path, monkeypatch):
    """MMT's `ocr` expert on a folder: its on-screen text read first, then one GloVe row per known word,
    spread over the line's time on screen."""
    import videotext.data.ocr.reader as reader
    from videotext.data.experts import extract_features
    from videotext.data.experts.words import load_glove
    from videotext.data.features import FeatureStore

    monkeypatch.setattr(reader, "ocr_engine", lambda name, threads=1: CountingEngine())
    folder = tmp_path / "videos"
    folder.mkdir()
    texted_video(folder / "talk.mp4", [("Lecture 12", 1.0, 3.0, (40, 60))], seconds=4.0)
    texted_video(folder / "blank.mp4", [], seconds=2.0, still=True)
    summary = extract_features(folder, ["ocr"], tmp_path / "features", progress=False)
    assert summary["experts"]["ocr"]["done"] == 2
    store = FeatureStore(tmp_path / "features")
    vocabulary, vectors = load_glove()
    features, times = store.get("ocr", "talk")
    # the counting engine reads "Lecture 12" wherever the frame is not black: every sample of 0-4 s
    expected = vectors[[vocabulary["lecture"], vocabulary["12"]]]
    np.testing.assert_array_equal(features, expected.astype(np.float16).astype(np.float32))  # stored as float16
    np.testing.assert_allclose(times, [0.0, 2.0])
    assert (tmp_path / "features" / ONSCREEN).exists()


class FailingEngine(CountingEngine):
    """Fails on every second frame it is given."""

    def read(self, frame):
        if self.calls % 2 == 1:
            self.calls += 1
            raise RuntimeError("cannot read this frame")
        return super().read(frame)


def test_a_frame_the_engine_fails_on_is_skipped_and_counted(tmp_path):
    path = texted_video(tmp_path / "talk.mp4", [("Lecture 12", 0.0, 4.0, (40, 60))], seconds=4.0)
    lines, seen = video_text(path, FailingEngine(), change=-1.0)  # every sample read
    assert seen == {"samples": 4, "read": 4, "unreadable": 2}
    assert [line.text for line in lines] == ["Lecture 12", "Lecture 12"]  # read at 0.5 s and 2.5 s, not between
