"""Bad records in official files (one `on_bad` policy for every reader) and the published counts.

The ``quirks/`` fixtures reproduce, record for record, what the released files hold:
ActivityNet Captions ``train.json`` has a reversed segment (``v_0bosp4-pyTM``
[61.29, 60.71]), a zero-length one (``v_N7ppHQNikv8`` [34.77, 34.77]), ends past the
duration by float noise (``v_MKmrqcoCZ-M``: 70.29 vs 70.28999999999999) and by 0.01 s
(``v_pSdlIsd_vZc``: 43.42 vs 43.41); beside them, quirks other releases show: an end
0.4 s past the duration, a segment starting after the video's end, an empty caption
and an exact duplicate.
"""
from __future__ import annotations

import inspect
import json
import os
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from videotext.cli import app
from videotext.data.readers import READERS, read_dataset
from videotext.data.readers.counts import COUNTS, UNPUBLISHED, compare, markdown_rows
from videotext.errors import DataFormatError

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "readers"
ROOT = Path(__file__).resolve().parents[2]
ANET_QUIRKS = FIXTURES / "activitynet" / "quirks"
YC2_QUIRKS = FIXTURES / "youcook2" / "quirks"


def spans(video) -> list[tuple[float, float]]:
    return [(s.start, s.end) for s in video.segments]


def records_of(dataset, kind: str) -> list[dict]:
    return [r for r in dataset.meta["bad_records"]["records"] if r["kind"] == kind]


# --- the policy ------------------------------------------------------------------------------
def test_every_reader_takes_on_bad():
    missing = [name for name, reader in READERS.items() if "on_bad" not in inspect.signature(reader).parameters]
    assert missing == []


def test_unknown_policy_is_named():
    with pytest.raises(DataFormatError, match="on_bad.*'fix'.*repair, drop, error"):
        read_dataset("activitynet", ANET_QUIRKS, on_bad="fix")


def test_activitynet_repair_swaps_clips_and_drops():
    dataset = read_dataset("activitynet", ANET_QUIRKS, protocol="official")
    report = dataset.meta["bad_records"]
    assert report["repaired"] == {"reversed": 1, "past_duration": 5}
    assert report["dropped"] == {"zero_length": 1, "outside_video": 1, "duplicate": 1, "empty_caption": 1}
    assert spans(dataset["v_0bosp4-pyTM"]) == [(41.63, 61.29), (60.71, 61.29), (60.71, 70.54)]
    assert spans(dataset["v_N7ppHQNikv8"]) == [(25.83, 34.77), (34.77, 54.3)]
    assert spans(dataset["v_MKmrqcoCZ-M"])[1] == (57.64, 70.28999999999999)
    assert spans(dataset["v_pSdlIsd_vZc"]) == [(0.0, 43.41), (15.85, 24.32), (24.32, 43.41)]
    assert spans(dataset["v_late00000001"]) == [(10.0, 30.0)]  # 0.4 s past: clipped; [31, 35]: dropped
    assert spans(dataset["v_uqiMw7tQ1Cc"]) == [(0.28, 55.15), (13.79, 55.15)]
    # the same sentence at other times is not a duplicate; the same sentence at the same times is
    drums = dataset["v_v4KygkYPdp0"]
    assert [s.sentence for s in drums.segments].count("The credits of the clip are shown.") == 2
    assert len(drums.segments) == 3
    assert [s.sentence for s in dataset["v_blank0000001"].segments] == ["A woman waves at the camera."]
    reversed_ = records_of(dataset, "reversed")[0]
    assert reversed_["record"] == "v_0bosp4-pyTM.timestamps[1]" and reversed_["file"].endswith("train.json")
    assert reversed_["value"] == [61.29, 60.71] and reversed_["repaired"] == [60.71, 61.29]
    assert [r["record"] for r in records_of(dataset, "past_duration")] == [
        "v_MKmrqcoCZ-M.timestamps[1]", "v_pSdlIsd_vZc.timestamps[0]", "v_pSdlIsd_vZc.timestamps[2]",
        "v_late00000001.timestamps[0]", "v_uqiMw7tQ1Cc.timestamps[1]"]
    assert records_of(dataset, "empty_caption")[0]["record"] == "v_blank0000001.sentences[1]"
    assert report["videos_without_text"] == []


def test_activitynet_drop_drops_every_bad_record():
    dataset = read_dataset("activitynet", ANET_QUIRKS, protocol="official", on_bad="drop")
    report = dataset.meta["bad_records"]
    assert report["repaired"] == {}
    assert report["dropped"] == {"reversed": 1, "zero_length": 1, "past_duration": 5, "outside_video": 1,
                                 "duplicate": 1, "empty_caption": 1}
    assert spans(dataset["v_0bosp4-pyTM"]) == [(41.63, 61.29), (60.71, 70.54)]
    assert spans(dataset["v_pSdlIsd_vZc"]) == [(15.85, 24.32)]
    assert spans(dataset["v_late00000001"]) == []
    assert report["videos_without_text"] == ["v_late00000001"]
    assert sum(len(v.segments) for v in dataset) == 11  # 21 records in the files, 10 dropped


def test_activitynet_error_names_file_record_and_field():
    with pytest.raises(DataFormatError) as info:
        read_dataset("activitynet", ANET_QUIRKS / "train.json", on_bad="error")
    message = str(info.value)
    assert "train.json" in message and "v_0bosp4-pyTM.timestamps[1]" in message
    assert "ends before it starts" in message and "[61.29, 60.71]" in message


def test_youcook2_repair_then_duplicate():
    dataset = read_dataset("youcook2", YC2_QUIRKS, protocol="official")
    report = dataset.meta["bad_records"]
    assert report["repaired"] == {"reversed": 1, "past_duration": 1}
    assert report["dropped"] == {"duplicate": 1, "zero_length": 1, "empty_caption": 1}
    # [127, 114] swapped becomes the same step as annotations[2], which is then the duplicate
    assert spans(dataset["GLd3aX16zBg"]) == [(90, 102), (114, 127), (235, 241.62)]
    assert records_of(dataset, "duplicate")[0]["record"] == "database.GLd3aX16zBg.annotations[2].segment"
    assert spans(dataset["sdB8F5m3Bdg"]) == [(90, 120)]
    assert records_of(dataset, "empty_caption")[0]["record"] == "database.sdB8F5m3Bdg.annotations[1].sentence"
    with pytest.raises(DataFormatError, match=r"annotations\[1\]\.segment.*ends before it starts"):
        read_dataset("youcook2", YC2_QUIRKS, protocol="official", on_bad="error")


def test_captions_empty_and_duplicate_are_dropped():
    dataset = read_dataset("msrvtt", FIXTURES / "msrvtt" / "quirks")
    assert dataset["video0"].captions == ["a car is shown", "a man drives a red car"]
    assert dataset["video1"].captions == ["people are dancing"]
    assert dataset.meta["bad_records"]["dropped"] == {"duplicate": 1, "empty_caption": 1}
    assert [r["record"] for r in dataset.meta["bad_records"]["records"]] == [
        "sentences[2].caption", "sentences[3].caption"]
    with pytest.raises(DataFormatError, match=r"MSRVTT_data.json \[sentences\[2\]\.caption\]: exact duplicate"):
        read_dataset("msrvtt", FIXTURES / "msrvtt" / "quirks", on_bad="error")


def test_lsmdc_clip_in_two_files_is_not_a_duplicate():
    dataset = read_dataset("lsmdc", FIXTURES / "lsmdc" / "quirks")
    clip = "0001_American_Beauty_00.00.51.926-00.00.54.129"
    assert dataset.splits == {"train": [clip], "test": [clip]}  # the empty row's clip is not created
    assert dataset[clip].captions == ["SOMEONE looks out the window."]
    report = dataset.meta["bad_records"]
    assert report["dropped"] == {"duplicate": 2, "empty_caption": 1}
    # row 1 of the challenge file repeats the training caption: the same clip, not a bad record;
    # its row 2 repeats row 1 of the same file: a duplicate
    assert [(Path(r["file"]).name, r["record"]) for r in report["records"]] == [
        ("LSMDC16_annos_training.csv", "row 2.sentence"), ("LSMDC16_annos_training.csv", "row 3.sentence"),
        ("LSMDC16_challenge_1000_publictect.csv", "row 2.sentence")]


def test_manifest_reader_keeps_the_conversion_report(tmp_path):
    dataset = read_dataset("activitynet", ANET_QUIRKS, protocol="official")
    dataset.save(tmp_path / "manifest.json")
    again = read_dataset("manifest", tmp_path / "manifest.json")
    assert again.meta["bad_records"]["dropped"] == dataset.meta["bad_records"]["dropped"]
    assert spans(again["v_pSdlIsd_vZc"]) == spans(dataset["v_pSdlIsd_vZc"])


# --- the command line ------------------------------------------------------------------------
def test_convert_prints_and_writes_the_report(tmp_path):
    out = tmp_path / "anet" / "manifest.json"
    result = CliRunner().invoke(app, ["dataset", "convert", "activitynet", str(ANET_QUIRKS), "-o", str(out),
                                      "--option", "protocol=official"])
    assert result.exit_code == 0, result.output
    assert "repaired 6 (past_duration 5, reversed 1)" in result.output
    assert "dropped 4 (duplicate 1, empty_caption 1, outside_video 1, zero_length 1)" in result.output
    report = json.loads((tmp_path / "anet" / "manifest.bad_records.json").read_text())
    assert len(report["records"]) == 10 and report["on_bad"] == "repair"
    bad = CliRunner().invoke(app, ["dataset", "convert", "activitynet", str(ANET_QUIRKS), "-o", str(out),
                                   "--on-bad", "error"])
    assert bad.exit_code == 2
    assert "v_0bosp4-pyTM.timestamps[1]" in bad.output and "Traceback" not in bad.output


def test_check_reports_each_split_and_exits_1_on_a_mismatch(tmp_path):
    result = CliRunner().invoke(app, ["dataset", "check", "activitynet", str(ANET_QUIRKS)])
    assert result.exit_code == 1, result.output
    assert re.search(r"train\s+7\s+10,009\s+15\s+37,421\s+4\s+DIFFERS", result.output), result.output
    assert "val_2: split not read" in result.output
    assert "dropped 4" in result.output
    assert "reversed (repaired 1): train.json: v_0bosp4-pyTM.timestamps[1]" in result.output
    assert ("past_duration (repaired 5): train.json: v_MKmrqcoCZ-M.timestamps[1], train.json: "
            "v_pSdlIsd_vZc.timestamps[0], train.json: v_pSdlIsd_vZc.timestamps[2], … 2 more") in result.output
    folder = CliRunner().invoke(app, ["dataset", "check", "folder", str(tmp_path)])
    assert folder.exit_code == 0 and "no published count" in folder.output


def test_check_reads_a_converted_manifest(tmp_path):
    out = tmp_path / "manifest.json"
    read_dataset("youcook2", YC2_QUIRKS, protocol="official").save(out)
    result = CliRunner().invoke(app, ["dataset", "check", "youcook2", str(out)])
    assert result.exit_code == 1, result.output  # a 2-video fixture against the real release
    assert re.search(r"validation\s+1\s+457\s+1\s+3,492\s+2\s+DIFFERS", result.output), result.output
    assert "empty_caption (dropped 1): youcookii_annotations_trainval.json: " in result.output  # kept from convert
    other = CliRunner().invoke(app, ["dataset", "check", "msrvtt", str(out)])
    assert other.exit_code == 2 and "holds 'youcook2', not 'msrvtt'" in other.output


def test_compare_counts_dropped_records_and_carved_validation():
    dataset = read_dataset("activitynet", ANET_QUIRKS, val_count=2)
    assert len(dataset.splits["val"]) == 2
    entry, rows = compare(dataset)
    assert entry.protocol == "paragraph"
    train, test, val_2 = rows  # the carved val is counted back into train
    assert (train.split, train.videos_found, train.captions_found, train.dropped) == ("train", 7, 15, 4)
    assert (test.split, test.videos_found, test.captions_found, test.dropped) == ("test", 1, 2, 0)
    assert train.problems == ["videos: 7 found, 10,009 published", "sentences: 15 found (+4 dropped), 37,421 published"]
    assert val_2.problems == ["split not read"]


# --- the published counts --------------------------------------------------------------------
def test_counts_page_shows_the_table():
    lines = (ROOT / "docs" / "datasets" / "counts.md").read_text(encoding="utf-8").splitlines()
    start = lines.index("| dataset | protocol | split | videos | texts | source |") + 2
    end = lines.index("", start)
    assert lines[start:end] == markdown_rows()


def test_every_reader_has_published_counts_or_says_why_not():
    assert {p.dataset for p in COUNTS} | set(UNPUBLISHED) == set(READERS)


# --- the official files ----------------------------------------------------------------------
OFFICIAL = os.environ.get("VIDEOTEXT_OFFICIAL_DATA")


@pytest.mark.skipif(not OFFICIAL, reason="VIDEOTEXT_OFFICIAL_DATA is not set")
def test_official_files_read_as_released():
    """The released annotation files read, and match the published counts, under the default policy.

    Set ``VIDEOTEXT_OFFICIAL_DATA`` to a folder holding any of
    ``activitynet/{train,val_1,val_2}.json`` (ActivityNet Captions),
    ``youcook2/youcookii_annotations_trainval.json`` (YouCook2),
    ``didemo/{train,val,test}_data.json`` (DiDeMo, as in LocalizingMoments' ``data/``),
    ``qvhighlights/highlight_{train,val,test}_release.jsonl`` (QVHighlights, moment_detr's ``data/``)
    and ``msrvtt/MSRVTT_data.json`` (MSR-VTT); the datasets found are checked, the
    others skipped. The bad-record figures asserted are those of the released files.
    """
    root = Path(OFFICIAL)
    checked = 0
    if (root / "activitynet" / "train.json").is_file():
        dataset = read_dataset("activitynet", root / "activitynet", protocol="official")
        report = dataset.meta["bad_records"]
        assert report["repaired"] == {"past_duration": 506, "reversed": 2}
        assert report["dropped"] == {"zero_length": 2}
        per_file = {}
        for r in report["records"]:
            key = (Path(r["file"]).name, r["kind"])
            per_file[key] = per_file.get(key, 0) + 1
        assert per_file == {("train.json", "past_duration"): 261, ("train.json", "reversed"): 2,
                            ("train.json", "zero_length"): 2, ("val_1.json", "past_duration"): 134,
                            ("val_2.json", "past_duration"): 111}
        late = [r["value"]["span"][1] - r["value"]["duration"] for r in records_of(dataset, "past_duration")]
        assert max(late) < 0.0101 and sum(x > 0.005 for x in late) == 35
        assert all(row.ok for row in compare(dataset)[1])
        checked += 1
    if (root / "youcook2" / "youcookii_annotations_trainval.json").is_file():
        dataset = read_dataset("youcook2", root / "youcook2", protocol="official")
        assert dataset.meta["bad_records"]["records"] == []
        assert all(row.ok for row in compare(dataset)[1])
        checked += 1
    if (root / "didemo" / "val_data.json").is_file():
        dataset = read_dataset("didemo", root / "didemo")
        assert dataset.meta["bad_records"]["records"] == []
        assert all(row.ok for row in compare(dataset)[1] if row.split in dataset.splits)
        checked += 1
    if (root / "qvhighlights" / "highlight_val_release.jsonl").is_file():
        dataset = read_dataset("qvhighlights", root / "qvhighlights", protocol="official")
        assert dataset.meta["bad_records"]["records"] == []
        assert all(row.ok for row in compare(dataset)[1] if row.split in dataset.splits)
        assert sum(len(q.spans) for q in dataset.split("val").moment_queries()) == 2_803  # windows, counted
        checked += 1
    if (root / "msrvtt" / "MSRVTT_data.json").is_file():
        dataset = read_dataset("msrvtt", root / "msrvtt" / "MSRVTT_data.json")
        assert all(row.ok for row in compare(dataset)[1])
        checked += 1
    if not checked:
        pytest.skip(f"no official file under {root}")
