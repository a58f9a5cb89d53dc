"""What is said: subtitles, Whisper on espeak-ng speech and on real read speech, bad inputs, the speech expert.

Speech comes from Debian's espeak-ng (muxed as AAC into videos made here) and from the LibriVox
utterances of Debian's pocketsphinx-testdata (`make assets`); recognition is Whisper tiny.en
through faster-whisper, the model files checked against their pinned sha256.
"""
from __future__ import annotations

import json
import os
import wave
from pathlib import Path

import numpy as np
import pytest

from tests.speech_media import ESPEAK, ESPEAK_MISSING, SENTENCES, silent_footage, speaking_video

pytest.importorskip("faster_whisper", reason="the speech extra is not installed: pip install 'videotext[speech]'")
needs_espeak = pytest.mark.skipif(ESPEAK is None, reason=ESPEAK_MISSING)
ASSETS = Path(os.environ.get("VIDEOTEXT_ASSETS", Path.home() / ".cache/videotext/debian")) / "pocketsphinx" / "data"

SRT = """1
00:00:00,500 --> 00:00:02,000
Hello <i>world</i>, this is a test.

2
00:00:02,500 --> 00:00:04,000
Second line
with two rows
"""
VTT = """WEBVTT

00:00.500 --> 00:02.000
<v Bob>Hello <b>there</b>

00:02.500 --> 00:04.000
second cue
"""

ASS = r"""[Script Info]
ScriptType: v4.00+

[V4+ Styles]
Format: Name, Fontname, Fontsize, PrimaryColour, SecondaryColour, OutlineColour, BackColour, Bold, Italic, Underline, StrikeOut, ScaleX, ScaleY, Spacing, Angle, BorderStyle, Outline, Shadow, Alignment, MarginL, MarginR, MarginV, Encoding
Style: Default,Arial,20,&H00FFFFFF,&H000000FF,&H00000000,&H00000000,0,0,0,0,100,100,0,0,1,2,0,2,10,10,10,1

[Events]
Format: Layer, Start, End, Style, Name, MarginL, MarginR, MarginV, Effect, Text
Dialogue: 0,0:00:00.50,0:00:02.00,Default,,0,0,0,,Hello {\i1}world{\i0}, this is a test.
Dialogue: 0,0:00:02.50,0:00:04.00,Default,,0,0,0,,Second line\Nwith two rows
"""
TEXTS = {"srt": SRT, "vtt": VTT, "ass": ASS}


def _mux_subtitles(video: Path, subtitles: Path, out: Path) -> Path:
    """`video`'s streams plus the subtitle stream FFmpeg reads from `subtitles`, remuxed into a Matroska file."""
    import av

    with av.open(str(video)) as source, av.open(str(subtitles)) as text, av.open(str(out), "w") as sink:
        mapping = {s.index: sink.add_stream_from_template(s) for s in source.streams if s.type in ("video", "audio")}
        text_stream = sink.add_stream_from_template(text.streams.subtitles[0])
        for packet in source.demux():
            if packet.dts is not None and packet.stream.index in mapping:
                packet.stream = mapping[packet.stream.index]
                sink.mux(packet)
        for packet in text.demux(text.streams.subtitles[0]):
            if packet.dts is not None:
                packet.stream = text_stream
                sink.mux(packet)
    return out


# --- subtitles -----------------------------------------------------------------------------------
def test_srt_and_vtt_files_give_timed_lines_without_markup(tmp_path):
    from videotext.data.speech.subtitles import read_subtitles

    (tmp_path / "a.srt").write_text(SRT, encoding="utf-8")
    (tmp_path / "a.vtt").write_text(VTT, encoding="utf-8")
    srt = read_subtitles(tmp_path / "a.srt")
    assert [(s.start, s.end, s.sentence) for s in srt] == [(0.5, 2.0, "Hello world, this is a test."),
                                                           (2.5, 4.0, "Second line with two rows")]
    vtt = read_subtitles(tmp_path / "a.vtt")
    assert [(s.start, s.end, s.sentence) for s in vtt] == [(0.5, 2.0, "Hello there"), (2.5, 4.0, "second cue")]


@pytest.mark.parametrize("kind", ["srt", "vtt", "ass"])  # subrip, webvtt and ass streams in Matroska
def test_subtitle_streams_inside_a_video_are_read(tmp_path, kind):
    from videotext.data.speech.subtitles import has_subtitle_stream, read_subtitles

    (tmp_path / f"a.{kind}").write_text(TEXTS[kind], encoding="utf-8")
    video = silent_footage(tmp_path / "plain.mp4", seconds=5.0)
    inside = _mux_subtitles(video, tmp_path / f"a.{kind}", tmp_path / "inside.mkv")
    assert not has_subtitle_stream(video) and has_subtitle_stream(inside)
    lines = [(s.start, s.end, s.sentence) for s in read_subtitles(inside)]
    assert lines == [(s.start, s.end, s.sentence) for s in read_subtitles(tmp_path / f"a.{kind}")]
    assert lines[0][:2] == (0.5, 2.0) and len(lines) == 2


@pytest.mark.parametrize("content, message", [
    ("1\n00:00:00,500 --> 00:00:02,000\nCaf\xe9 cr\xe8me\n\n".encode("latin-1"), "not UTF-8"),
    (b"this is not a subtitle file at all\n", "not a readable subtitle file"),
])
def test_a_broken_or_mis_encoded_subtitle_file_is_one_clear_error(tmp_path, content, message):
    from videotext.data.speech.subtitles import SubtitleError, read_subtitles

    path = tmp_path / "bad.srt"
    path.write_bytes(content)
    with pytest.raises(SubtitleError, match=message) as caught:
        read_subtitles(path)
    assert str(path) in str(caught.value)


# --- word error rate -----------------------------------------------------------------------------
def test_word_error_rate_counts_edits_after_normalising():
    from videotext.data.speech.wer import edit_distance, normalize, word_error_rate

    assert normalize("Mr. Dashwood's ill-disposed, 10 men!") == ["mister", "dashwood's", "ill", "disposed", "ten", "men"]
    assert edit_distance("a b c d".split(), "a x c d e".split()) == 2  # one substitution, one insertion
    assert edit_distance([], "a b".split()) == 2
    assert word_error_rate(["go forward ten meters", "he was not"], ["Go forward 10 meters.", "he is not at all"]) == \
        pytest.approx(3 / 7)


# --- recognition ---------------------------------------------------------------------------------
@needs_espeak
@pytest.mark.heavy
def test_whisper_tiny_en_transcribes_espeak_speech_in_a_video(tmp_path):
    from videotext.data.speech.recognize import SAMPLE_RATE, speech_engine
    from videotext.data.speech.wer import word_error_rate
    from videotext.data.video import read_audio

    engine = speech_engine("whisper", "tiny.en")
    references, hypotheses = [], []
    for i in (1, 2, 7, 12):
        sentence = SENTENCES[i][0]
        video = speaking_video(tmp_path / f"v{i}.mp4", sentence, seed=i, lead=2.0)
        lines = engine.recognize(read_audio(video, SAMPLE_RATE))
        assert lines and lines[0].start >= 1.0, lines  # the speech starts after 2 s of silence
        assert all(0 < line.confidence <= 1 and line.source == "asr:whisper:tiny.en" for line in lines)
        references.append(sentence)
        hypotheses.append(" ".join(line.text for line in lines))
    assert word_error_rate(references, hypotheses) <= 0.25, hypotheses  # 14.6 % over all 24 (docs/speech.md)


@pytest.mark.heavy
@pytest.mark.assets
def test_whisper_tiny_en_on_real_read_speech_is_within_six_percent_wer():
    from bench.speech import librivox
    from videotext.data.speech.recognize import speech_engine
    from videotext.data.speech.wer import word_error_rate

    if not (ASSETS / "librivox" / "transcription").is_file():
        pytest.skip(f"pocketsphinx-testdata absent in {ASSETS}: run `make assets`")
    clips = librivox()
    engine = speech_engine("whisper", "tiny.en")
    hypotheses = [" ".join(line.text for line in engine.recognize(samples)) for _, samples, _ in clips]
    wer = word_error_rate([c[2] for c in clips], hypotheses)
    assert wer <= 0.06, (wer, hypotheses)


@pytest.mark.assets
@pytest.mark.slow
def test_pocketsphinx_is_a_working_but_worse_fallback():
    from bench.speech import librivox
    from videotext.data.speech.recognize import speech_engine
    from videotext.data.speech.wer import word_error_rate

    if not (ASSETS / "librivox" / "transcription").is_file():
        pytest.skip(f"pocketsphinx-testdata absent in {ASSETS}: run `make assets`")
    clips = librivox()
    engine = speech_engine("pocketsphinx")
    hypotheses = [" ".join(line.text for line in engine.recognize(samples)) for _, samples, _ in clips]
    wer = word_error_rate([c[2] for c in clips], hypotheses)
    assert 0.05 < wer < 0.5, (wer, hypotheses)
    assert engine.source == "asr:pocketsphinx:en-us"


def test_a_whisper_model_whose_hash_differs_is_refused(tmp_path, monkeypatch):
    from videotext import weights
    from videotext.data.speech.recognize import WhisperEngine

    package = weights.PACKAGES["whisper_tiny_en"]
    fake = tmp_path / "fake_whisper"
    (fake / "model").mkdir(parents=True)
    (fake / "__init__.py").write_text("")
    for name in package.sha256:
        (fake / "model" / name).write_bytes(b"not the model")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(weights.PACKAGES, "whisper_tiny_en",
                        weights.WeightPackage(package.name, package.distribution, package.version, "fake_whisper",
                                              "model", dict(package.sha256)))
    with pytest.raises(weights.WeightsError, match=r"config\.json: sha256 [0-9a-f]{64} is not 14b1b421"):
        WhisperEngine("tiny.en")


@pytest.mark.heavy
def test_whisper_base_is_joined_from_its_two_packages_and_checked(tmp_path, monkeypatch):
    from videotext.data.speech.recognize import joined_whisper_base
    from videotext.weights import WHISPER_BASE_MODEL_SHA256, sha256_of

    monkeypatch.setenv("VIDEOTEXT_CACHE", str(tmp_path))
    folder = joined_whisper_base()
    assert folder.parent.parent == tmp_path and sha256_of(folder / "model.bin") == WHISPER_BASE_MODEL_SHA256
    assert sorted(p.name for p in folder.iterdir()) == ["config.json", "model.bin", "tokenizer.json", "vocabulary.txt"]
    with open(folder / "model.bin", "r+b") as handle:  # damage the cached join: it is joined again
        handle.write(b"\0" * 16)
    assert sha256_of(joined_whisper_base() / "model.bin") == WHISPER_BASE_MODEL_SHA256


# --- transcripts of a folder ---------------------------------------------------------------------
@needs_espeak
@pytest.mark.heavy
def test_transcripts_prefer_subtitles_record_bad_inputs_and_resume(tmp_path):
    from videotext.data.speech.transcripts import TranscriptStore, transcribe

    folder = tmp_path / "videos"
    folder.mkdir()
    speaking_video(folder / "spoken.mp4", SENTENCES[0][0], seed=0)
    speaking_video(folder / "subtitled.mp4", SENTENCES[1][0], seed=1)
    (folder / "subtitled.srt").write_text(SRT, encoding="utf-8")  # says something else: the subtitles win
    speaking_video(folder / "badsubs.mp4", SENTENCES[2][0], seed=2)
    (folder / "badsubs.srt").write_bytes("1\n00:00:00,500 --> 00:00:02,000\nCaf\xe9\n\n".encode("latin-1"))
    silent_footage(folder / "noaudio.mp4")
    speaking_video(folder / "silence.mp4", None, seed=4)
    items = [(p.stem, p) for p in sorted(folder.glob("*.mp4"))]
    out = tmp_path / "features"

    summary = transcribe(items, out, "whisper", "tiny.en", progress=False)
    store = TranscriptStore(out)
    assert store.get("subtitled").source == "subtitle"
    assert [line.text for line in store.get("subtitled").lines] == ["Hello world, this is a test.",
                                                                   "Second line with two rows"]
    assert store.get("spoken").source == "asr:whisper:tiny.en" and "oven" in store.get("spoken").lines[0].text
    assert store.get("badsubs").source == "asr:whisper:tiny.en" and "volcano" in store.get("badsubs").lines[0].text.lower()
    assert store.get("noaudio").lines == [] and store.get("silence").lines == []
    failures = [json.loads(line) for line in (out / "failures.jsonl").read_text().splitlines()]
    by_item = {f["item"]: f["error"] for f in failures}
    assert sorted(by_item) == ["badsubs", "noaudio", "silence"]
    assert "not UTF-8" in by_item["badsubs"] and "no audio stream" in by_item["noaudio"]
    assert "no speech found" in by_item["silence"]
    assert summary["subtitle"] == 1 and summary["asr"] == 2 and summary["none"] == 2 and summary["failed"] == 0

    again = transcribe(items, out, "whisper", "tiny.en", progress=False)  # resumes: nothing to do
    assert again["kept"] == len(items) and again["asr"] == 0
    assert len((out / "failures.jsonl").read_text().splitlines()) == len(failures)
    (folder / "subtitled.srt").unlink()
    os.utime(folder / "subtitled.mp4")
    later = transcribe(items, out, "whisper", "tiny.en", progress=False)  # a changed file is done again
    assert later["kept"] == len(items) - 1 and TranscriptStore(out).get("subtitled").source.startswith("asr:")


@needs_espeak
def test_speech_expert_gives_glove_words_of_the_transcript(tmp_path):
    from videotext.data.experts import extract_features
    from videotext.data.experts.words import load_glove
    from videotext.data.features import FeatureStore

    folder = tmp_path / "videos"
    folder.mkdir()
    speaking_video(folder / "spoken.mp4", SENTENCES[11][0], seed=0)  # "Our dog loves to chase the red ball ..."
    silent_footage(folder / "noaudio.mp4")
    summary = extract_features(folder, ["speech"], tmp_path / "features", progress=False, workers=0)
    assert summary["failed"] == 0, summary
    store = FeatureStore(tmp_path / "features")
    features, times = store.get("speech", "spoken")
    vocab, vectors = load_glove()
    assert features.shape[1] == 50 and len(features) >= 8
    assert np.isclose(features, vectors[vocab["dog"]], atol=1e-3).all(axis=1).any()  # "dog" is among the words
    assert np.all(np.diff(times) >= 0) and times[0] >= 0.5
    assert store.is_missing("speech", "noaudio")
    assert (tmp_path / "features" / "transcripts.jsonl").is_file()
    assert store.info("speech")["config"]["model"] == "tiny.en"


# --- spoken search -------------------------------------------------------------------------------
def _srt(text: str, start: float, end: float) -> str:
    stamp = lambda t: f"00:00:{int(t):02d},{int(round(1000 * (t % 1))):03d}"  # noqa: E731
    return f"1\n{stamp(start)} --> {stamp(end)}\n{text}\n"


@pytest.mark.parametrize("transcripts", [
    pytest.param("subtitles", marks=needs_espeak),
    pytest.param("tiny.en", marks=[needs_espeak, pytest.mark.slow]),  # ~15 s idle, a minute on a loaded machine
])
@pytest.mark.heavy
def test_spoken_search_finds_the_video_that_says_a_paraphrased_sentence(tmp_path, transcripts):
    """24 videos, each speaking another sentence over unrelated footage; each sentence's paraphrasing
    query must rank its video first in at least 90 % of cases, from subtitle files or tiny.en's transcripts."""
    from videotext.data.speech.transcripts import TranscriptStore, transcribe
    from videotext.search.entries import Entry
    from videotext.search.spoken import SpokenIndex, lines_for_entries

    items = [(f"said{i:02d}", speaking_video(tmp_path / f"said{i:02d}.mp4", s, seed=i)) for i, (s, _) in
             enumerate(SENTENCES)]
    if transcripts == "subtitles":
        for (_, path), (sentence, _) in zip(items, SENTENCES):
            path.with_suffix(".srt").write_text(_srt(sentence, 1.0, 4.0), encoding="utf-8")
    transcribe(items, tmp_path / "features", "whisper", "tiny.en", progress=False)
    entries = {key: Entry(id=key, path=str(path), start=0.0, end=None, video_id=key) for key, path in items}
    spoken = SpokenIndex(lines_for_entries(list(entries.values()), TranscriptStore(tmp_path / "features").all()))
    firsts = [spoken.search(query, entries.get, k=3)[0] for _, query in SENTENCES]
    found = [hit.id == key for hit, (key, _) in zip(firsts, items)]
    assert np.mean(found) >= 0.9, [(h.id, h.meta["said"]["text"]) for h, ok in zip(firsts, found) if not ok]
    said = firsts[0].meta["said"]
    assert said["start"] >= 0.5 and said["end"] > said["start"] and "oven" in said["text"]


def test_lines_go_to_the_clips_they_start_in_and_filters_apply_to_spoken_hits():
    from videotext.data.speech.recognize import Line
    from videotext.data.speech.transcripts import Transcript
    from videotext.search.entries import Entry
    from videotext.search.spoken import SpokenIndex, lines_for_entries

    said = Transcript("talk", [Line(2.0, 4.0, "the volcano erupted", "subtitle"),
                               Line(7.0, 9.0, "penguins slide on the ice", "subtitle"),
                               Line(12.0, 14.0, "the volcano is quiet again", "subtitle")], "subtitle")
    clips = [Entry(id=f"talk@{s}", path=None, start=float(s), end=float(s + 10), video_id="talk", meta={"n": i})
             for i, s in enumerate((0, 5, 10))]  # windows of 10 s every 5 s
    lines = lines_for_entries(clips, {"talk": said})
    assert [(line.entry, line.start) for line in lines] == [("talk@0", 2.0), ("talk@0", 7.0), ("talk@5", 7.0),
                                                            ("talk@5", 12.0), ("talk@10", 12.0)]
    spoken = SpokenIndex(lines)
    by_id = {e.id: e for e in clips}
    hits = spoken.search("volcano", by_id.get, k=3)
    # each clip once, by its best line: the shorter volcano line first (BM25 length normalisation)
    assert [(h.id, h.meta["said"]["start"]) for h in hits][0] == ("talk@0", 2.0)
    assert sorted((h.id, h.meta["said"]["start"]) for h in hits[1:]) == [("talk@10", 12.0), ("talk@5", 12.0)]
    assert hits[0].score > hits[1].score >= hits[2].score
    only = spoken.search("volcano", by_id.get, k=3, where="start >= 5")
    assert {h.id for h in only} == {"talk@5", "talk@10"} and all(h.start >= 5 for h in only)
    assert spoken.search("volcano", lambda entry_id: None, k=3) == []  # entries gone from the index


def test_an_unknown_by_is_one_error_before_the_index_or_model_loads(tmp_path):
    from typer.testing import CliRunner

    from videotext.cli import app

    result = CliRunner().invoke(app, ["search", str(tmp_path / "no-index"), "a dog", "--by", "sayd"])
    assert result.exit_code == 2
    assert "--by 'sayd': expected shown, said, written, both, all or a comma list of shown, said, written" in result.output
    assert "no-index" not in result.output  # refused before the missing index is even opened
