"""Readers of the official annotation formats: exact counts, times, splits and errors on fixtures."""
from __future__ import annotations

import shutil
import zlib
from pathlib import Path

import pytest

from videotext.data.readers import READERS, read_dataset
from videotext.data.readers.tuxpaint import default_stamps_dir
from videotext.errors import DataFormatError

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "readers"


def split_sizes(dataset) -> dict[str, int]:
    return {name: len(ids) for name, ids in dataset.splits.items()}


def assert_bad(fmt: str, path: Path, key: str, file: str | None = None, **options) -> DataFormatError:
    """Reading `path` raises a DataFormatError whose message names the file at fault and `key`.

    The file at fault is `path` itself unless `file` names another (a split list, a folder).
    """
    with pytest.raises(DataFormatError) as info:
        read_dataset(fmt, path, **options)
    message = str(info.value)
    assert (file or path.name) in message, message
    assert key in message, message
    return info.value


# --- registry --------------------------------------------------------------------------
def test_registry_names_every_format():
    assert set(READERS) == {
        "msrvtt", "activitynet", "youcook2", "vatex", "lsmdc", "msvd", "didemo", "webvid", "cc3m", "coco",
        "howto100m", "tuxpaint", "folder", "manifest", "crosstask", "charades_sta", "qvhighlights",
    }


def test_unknown_format_lists_known_names():
    with pytest.raises(ValueError, match="unknown dataset format 'kinetics'.*msrvtt.*tuxpaint"):
        read_dataset("kinetics", FIXTURES)


def test_format_names_ignore_case_and_dashes():
    assert len(read_dataset("MSR-VTT", FIXTURES / "msrvtt" / "MSRVTT_data.json")) == 8


def test_unknown_option_is_named():
    with pytest.raises(DataFormatError, match="frames_per_clip"):
        read_dataset("lsmdc", FIXTURES / "lsmdc", frames_per_clip=8)


def test_missing_file_is_a_data_format_error():
    missing = FIXTURES / "msrvtt" / "nope.json"
    with pytest.raises(DataFormatError, match="nope.json.*not found"):
        read_dataset("msrvtt", missing)


def test_split_lists_option_replaces_a_split(tmp_path):
    ids = tmp_path / "mine.txt"
    ids.write_text("video1\nvideo3\n")
    dataset = read_dataset("msrvtt", FIXTURES / "msrvtt", split_lists={"test": ids})
    assert dataset.splits["test"] == ["video1", "video3"]
    ids.write_text("video1\nvideo42\n")
    with pytest.raises(DataFormatError, match="mine.txt.*video42"):
        read_dataset("msrvtt", FIXTURES / "msrvtt", split_lists={"test": ids})


# --- MSR-VTT ---------------------------------------------------------------------------
MSRVTT = FIXTURES / "msrvtt" / "MSRVTT_data.json"


def test_msrvtt_full_protocol_uses_the_official_split():
    dataset = read_dataset("msrvtt", MSRVTT)
    assert len(dataset) == 8
    assert dataset.splits == {
        "train": ["video0", "video1", "video2", "video3", "video4"], "val": ["video5"], "test": ["video6", "video7"],
    }
    assert [len(v.captions) for v in dataset] == [3, 3, 3, 3, 3, 3, 3, 2]
    assert sum(len(v.captions) for v in dataset) == 23
    # captions are ordered by sen_id, not by file order
    assert dataset["video1"].captions[0] == "a lady folds paper into a flower"
    assert dataset["video0"].duration == pytest.approx(11.72)
    assert dataset["video0"].path == "video0.mp4"
    assert dataset["video0"].meta["category"] == 9


def test_msrvtt_1k_a_val_list_becomes_test_and_val_is_carved_from_train():
    dataset = read_dataset("msrvtt", MSRVTT, protocol="1k-A", val_count=2, val_seed=0)
    assert dataset.splits["test"] == ["video6", "video7"]
    assert split_sizes(dataset) == {"train": 4, "test": 2, "val": 2}
    train, val, test = (set(dataset.splits[k]) for k in ("train", "val", "test"))
    assert not (train & val) and not (val & test) and not (train & test)
    assert train | val == {f"video{i}" for i in range(6)}  # val comes from the 1k-A training list only
    assert dataset.meta["validation"]["val"] == {"from": "train", "count": 2, "seed": 0}
    same = read_dataset("msrvtt", MSRVTT, protocol="1k-A", val_count=2, val_seed=0)
    assert same.splits == dataset.splits
    other = read_dataset("msrvtt", MSRVTT, protocol="1k-A", val_count=2, val_seed=1)
    assert other.splits["val"] != dataset.splits["val"]
    assert other.splits["test"] == dataset.splits["test"]


def test_msrvtt_1k_a_records_the_single_query_caption():
    dataset = read_dataset("msrvtt", MSRVTT, protocol="1k-A")
    assert dataset["video6"].meta["query_caption"] == "a dog jumps in a park"
    assert dataset["video6"].meta["query_caption_index"] == 1
    assert dataset["video7"].meta["query_caption_index"] == 0
    assert split_sizes(dataset) == {"train": 5, "test": 2, "val": 1}  # default: 10 % of 6 → 1


def test_msrvtt_1k_a_from_clip4clip_csv_lists():
    dataset = read_dataset("msrvtt", MSRVTT, protocol="jsfusion", splits_dir=FIXTURES / "msrvtt" / "clip4clip")
    assert dataset.splits["test"] == ["video6", "video7"]
    assert set(dataset.splits["train"]) | set(dataset.splits["val"]) == {f"video{i}" for i in range(6)}
    assert dataset.meta["split_lists"]["train"].endswith("MSRVTT_train.9k.csv")


def test_msrvtt_1k_b_reads_miech_lists_from_structured_symlinks():
    dataset = read_dataset("msrvtt", FIXTURES / "msrvtt", protocol="1k-B", val_count=1, val_seed=3)
    assert dataset.splits["test"] == ["video5", "video7"]
    assert split_sizes(dataset) == {"train": 5, "test": 2, "val": 1}
    assert set(dataset.splits["train"]) | set(dataset.splits["val"]) == {"video0", "video1", "video2", "video3", "video4", "video6"}


def test_msrvtt_media_found_by_glob(tmp_path):
    (tmp_path / "all").mkdir()
    (tmp_path / "all" / "video3.mp4").write_bytes(b"")
    (tmp_path / "video5.webm").write_bytes(b"")
    dataset = read_dataset("msrvtt", MSRVTT, video_dir=tmp_path)
    assert dataset["video3"].path == "all/video3.mp4"
    assert dataset["video5"].path == "video5.webm"
    assert dataset["video0"].path == "video0.mp4"
    assert dataset.media_path("video3") == tmp_path.resolve() / "all" / "video3.mp4"
    assert dataset.meta["missing_media"] == 6


@pytest.mark.parametrize("name, key", [
    ("missing_sentences.json", "sentences"),
    ("bad_split.json", "videos[3].split"),
    ("missing_caption.json", "sentences[4].caption"),
    ("truncated.json", "not valid JSON"),
])
def test_msrvtt_malformed(name, key):
    assert_bad("msrvtt", FIXTURES / "msrvtt" / "malformed" / name, key)


def test_msrvtt_unknown_id_in_split_list():
    assert_bad("msrvtt", MSRVTT, "video99", file="malformed/train_list_jsfusion.txt", protocol="1k-A",
               splits_dir=FIXTURES / "msrvtt" / "malformed")


def test_msrvtt_missing_split_list(tmp_path):
    shutil.copy(MSRVTT, tmp_path)
    assert_bad("msrvtt", tmp_path / "MSRVTT_data.json", "train_list_miech.txt", file=str(tmp_path), protocol="1k-B")


# --- ActivityNet Captions ----------------------------------------------------------------
def test_activitynet_paragraph_protocol():
    dataset = read_dataset("activitynet", FIXTURES / "activitynet", val_count=1)
    assert len(dataset) == 8  # 4 train + 2 val_1 + 2 val_2 (same videos, second annotation)
    assert split_sizes(dataset) == {"train": 3, "val_2": 2, "test": 2, "val": 1}
    assert dataset.splits["test"] == ["v_uqiMw7tQ1Cc", "v_bXdq2zI1Ms0"]
    assert dataset.splits["val_2"] == ["v_uqiMw7tQ1Cc#val_2", "v_bXdq2zI1Ms0#val_2"]
    second = dataset["v_bXdq2zI1Ms0#val_2"]
    assert second.key == "v_bXdq2zI1Ms0" and second.path == "v_bXdq2zI1Ms0.mp4"
    assert len(second.segments) == 2
    video = dataset["v_QOlSCBRmfWY"]
    assert video.duration == 82.73 and video.captions == []
    assert [(s.start, s.end) for s in video.segments] == [(0.83, 19.86), (17.37, 60.81), (56.26, 79.42)]
    assert video.segments[1].sentence == "The girl dances around the room while the camera captures her movements."
    # the paragraph is in time order even when the file lists events out of order
    assert dataset["v_nwznKOuZM7w"].paragraph.startswith("A kitchen is shown. A person pours water")
    assert sum(len(v.segments) for v in dataset) == 3 + 2 + 4 + 1 + 2 + 3 + 1 + 2


def test_activitynet_official_protocol_keeps_released_splits():
    dataset = read_dataset("activitynet", FIXTURES / "activitynet", protocol="official")
    assert split_sizes(dataset) == {"train": 4, "val_1": 2, "val_2": 2}


def test_activitynet_single_file():
    dataset = read_dataset("activitynet", FIXTURES / "activitynet" / "val_2.json")
    assert dataset.splits == {"val_2": ["v_uqiMw7tQ1Cc", "v_bXdq2zI1Ms0"]}


def test_activitynet_malformed():
    assert_bad("activitynet", FIXTURES / "activitynet" / "malformed" / "train.json", "v_ehGHCYKzyZ8.timestamps")
    assert_bad("activitynet", FIXTURES / "activitynet" / "malformed" / "val_1.json", "v_uqiMw7tQ1Cc.timestamps")


# --- YouCook2 ----------------------------------------------------------------------------
YOUCOOK2 = FIXTURES / "youcook2" / "youcookii_annotations_trainval.json"


def test_youcook2_validation_subset_is_test():
    dataset = read_dataset("youcook2", YOUCOOK2, val_count=1, val_seed=0)
    assert len(dataset) == 6
    assert split_sizes(dataset) == {"train": 3, "test": 2, "val": 1}
    assert dataset.splits["test"] == ["sdB8F5m3Bdg", "fn9anlEL4FI"]
    assert set(dataset.splits["train"]) | set(dataset.splits["val"]) == {
        "GLd3aX16zBg", "xHr8X2Wpmno", "V53XmPeyjIU", "mZwK0TBI1iY"}
    video = dataset["GLd3aX16zBg"]
    assert [(s.start, s.end) for s in video.segments] == [(90, 102), (114, 127), (132, 138), (139, 145), (173, 174)]
    assert video.segments[4].sentence == "cut the sandwich in half diagonally"
    assert video.duration == 241.62 and video.meta["recipe_type"] == "113"
    assert sum(len(v.segments) for v in dataset) == 17


def test_youcook2_official_protocol():
    dataset = read_dataset("youcook2", FIXTURES / "youcook2", protocol="official")
    assert split_sizes(dataset) == {"train": 4, "validation": 2}


def test_youcook2_malformed():
    assert_bad("youcook2", FIXTURES / "youcook2" / "malformed" / "youcookii_annotations_trainval.json",
               "database.GLd3aX16zBg.annotations[1].sentence")
    assert_bad("youcook2", FIXTURES / "youcook2" / "malformed" / "reversed_segment.json",
               "database.GLd3aX16zBg.annotations[0].segment", on_bad="error")


# --- VATEX -------------------------------------------------------------------------------
def test_vatex_default_protocol():
    dataset = read_dataset("vatex", FIXTURES / "vatex", val_count=1)
    assert len(dataset) == 7
    assert split_sizes(dataset) == {"train": 3, "public_test": 1, "test": 2, "val": 1}
    video = dataset["Ptf_2VRj-V0_000122_000132"]
    assert video.meta["youtube_id"] == "Ptf_2VRj-V0"
    assert (video.meta["start"], video.meta["end"], video.duration) == (122, 132, 10.0)
    assert len(video.captions) == 3 and len(video.meta["captions_zh"]) == 3
    assert dataset["--07WQ2iBlw_000001_000011"].meta["youtube_id"] == "--07WQ2iBlw"
    assert "captions_zh" not in dataset["zzR8UvnkOQo_000042_000052"].meta


def test_vatex_hgr_protocol_uses_ce_lists():
    dataset = read_dataset("vatex", FIXTURES / "vatex", protocol="hgr")
    assert dataset.splits["val"] == ["2KDs6C8dMoU_000024_000034"]
    assert dataset.splits["test"] == ["aBcD_eFgHiJ_000005_000015"]
    assert split_sizes(dataset) == {"train": 4, "public_test": 1, "val": 1, "test": 1}


def test_vatex_malformed():
    assert_bad("vatex", FIXTURES / "vatex" / "malformed" / "vatex_training_v1.0.json", "[1].videoID")
    assert_bad("vatex", FIXTURES / "vatex" / "malformed" / "missing_encap.json", "[0].enCap")


# --- LSMDC -------------------------------------------------------------------------------
def test_lsmdc_splits_clips_and_times():
    dataset = read_dataset("lsmdc", FIXTURES / "lsmdc")
    assert len(dataset) == 8
    assert split_sizes(dataset) == {"train": 4, "val": 2, "test": 2}
    clip = dataset["0001_American_Beauty_00.01.02.348-00.01.06.101"]
    assert clip.captions == ["She turns and walks away.", "Then she smiles at SOMEONE."]
    assert clip.meta["movie"] == "0001_American_Beauty"
    assert clip.meta["start_aligned"] == pytest.approx(62.348)
    assert clip.meta["end_extracted"] == pytest.approx(67.0)
    assert clip.duration == pytest.approx(3.753)
    assert clip.path == "0001_American_Beauty/0001_American_Beauty_00.01.02.348-00.01.06.101.avi"
    assert dataset["0003_CASABLANCA_01.10.20.000-01.10.25.500"].meta["start_aligned"] == pytest.approx(4220.0)
    assert dataset["0003_CASABLANCA_01.12.00.250-01.12.03.000"].captions == [
        'The crowd sings "La Marseillaise", loudly.']
    assert sum(len(v.captions) for v in dataset) == 9


def test_lsmdc_malformed():
    err = assert_bad("lsmdc", FIXTURES / "lsmdc" / "malformed" / "LSMDC16_annos_training.csv", "row 2")
    assert "6 tab-separated columns" in str(err)
    assert_bad("lsmdc", FIXTURES / "lsmdc" / "malformed" / "bad_time.csv", "row 1.start_aligned")


# --- MSVD --------------------------------------------------------------------------------
def test_msvd_pickle_and_standard_lists():
    dataset = read_dataset("msvd", FIXTURES / "msvd")
    assert len(dataset) == 5
    assert split_sizes(dataset) == {"train": 3, "val": 1, "test": 1}
    assert [len(v.captions) for v in dataset] == [3, 2, 4, 2, 2]
    assert dataset["-4wsuPCjDBc_5_15"].captions[0] == "a squirrel is eating a peanut in its shell"
    assert dataset["-4wsuPCjDBc_5_15"].path == "-4wsuPCjDBc_5_15.avi"


def test_msvd_all_video_descriptions():
    dataset = read_dataset("msvd", FIXTURES / "msvd" / "descriptions")
    assert split_sizes(dataset) == {"all": 3}
    assert [len(v.captions) for v in dataset] == [3, 2, 1]
    assert dataset["mv89psg6zh4_33_46"].captions[1] == "A bird is bathing in a sink."


def test_msvd_malformed():
    assert_bad("msvd", FIXTURES / "msvd" / "malformed" / "AllVideoDescriptions.txt", "line 3")
    assert_bad("msvd", FIXTURES / "msvd" / "malformed" / "raw-captions.pkl", "-4wsuPCjDBc_5_15")


# --- DiDeMo ------------------------------------------------------------------------------
def test_didemo_consensus_times_and_paragraphs():
    dataset = read_dataset("didemo", FIXTURES / "didemo")
    assert len(dataset) == 5
    assert split_sizes(dataset) == {"train": 3, "val": 1, "test": 1}
    video = dataset["12090392@N02_13482799053_87ef417396.mov"]
    # captions follow annotation_id (3 before 10); times: chunk k covers 5k..5(k+1) seconds
    assert video.captions == ["a girl in a pink dress appears.", "the little girl jumps back up after falling."]
    assert [(s.start, s.end) for s in video.segments] == [(0.0, 5.0), (5.0, 25.0)]  # tie → first listed
    assert video.paragraph == "a girl in a pink dress appears. the little girl jumps back up after falling."
    assert [(s.start, s.end) for s in dataset["59565949@N00_5284911018_1d4ce5bf7a.mp4"].segments] == [(25.0, 30.0)]
    assert [(s.start, s.end) for s in dataset["44124421772@N01_2867533733_5c6b1b40bd.m4v"].segments] == [(15.0, 20.0)]
    test_video = dataset["13355018@N06_3549548779_aec2fe4d12.mov"]
    assert [(s.start, s.end) for s in test_video.segments] == [(0.0, 10.0), (20.0, 30.0)]
    assert test_video.path == "13355018@N06_3549548779_aec2fe4d12.mov.mp4"


def test_didemo_malformed():
    assert_bad("didemo", FIXTURES / "didemo" / "malformed" / "train_data.json", "[0].times")
    assert_bad("didemo", FIXTURES / "didemo" / "malformed" / "bad_times.json", "[0].times[0]")


# --- WebVid ------------------------------------------------------------------------------
def test_webvid_rows_paths_and_durations():
    dataset = read_dataset("webvid", FIXTURES / "webvid", video_dir=FIXTURES / "webvid")
    assert len(dataset) == 6
    assert split_sizes(dataset) == {"train": 4, "val": 2}
    video = dataset["31353427"]
    assert video.captions == ["Merida, mexico - may 2017: people walking on the street"]
    assert video.path == "006001_006050/31353427.mp4"
    assert video.duration == 15.0
    assert dataset["2682353"].duration == 62.0
    assert dataset.root == (FIXTURES / "webvid").resolve()


def test_webvid_malformed():
    bad = FIXTURES / "webvid" / "malformed"
    assert_bad("webvid", bad / "results_2M_train.csv", "row 3")
    assert_bad("webvid", bad / "bad_duration.csv", "row 2.duration")
    assert_bad("webvid", bad / "missing_column.csv", "page_dir")


# --- CC3M --------------------------------------------------------------------------------
def crc(url: str) -> str:
    return str(zlib.crc32(url.encode("utf-8")) & 0xFFFFFFFF)


def test_cc3m_official_tsv_with_crc32_names():
    dataset = read_dataset("cc3m", FIXTURES / "cc3m")
    assert len(dataset) == 6  # 5 train rows, two share a URL → 4 images; 2 validation
    assert split_sizes(dataset) == {"train": 4, "val": 2}
    station = "http://lh6.ggpht.com/-IvRtNLNcG8o/TpFyrudaT6I/AAAAAAAAM6o/_11MuAAKalQ/IMG_3422.JPG?imgmax=800"
    image = dataset[f"training/{crc(station)}"]
    assert image.kind == "image" and image.path == "training/2901536091"
    assert image.captions == ["a very typical bus station", "a typical bus station in the city"]
    assert all(v.id.startswith("validation/") for v in dataset.split("val"))


def test_cc3m_index_naming_and_variants():
    by_index = read_dataset("cc3m", FIXTURES / "cc3m" / "Train_GCC-training.tsv", naming="index")
    assert [v.id for v in by_index] == ["training/0", "training/1", "training/2", "training/3", "training/4"]
    report = read_dataset("cc3m", FIXTURES / "cc3m" / "report" / "downloaded_training_report.tsv")
    assert [v.id for v in report] == ["training/3012451890", "training/1185164254"]
    assert report.meta["skipped"] == 1
    files = read_dataset("cc3m", FIXTURES / "cc3m" / "report" / "train_with_files.tsv")
    assert [v.path for v in files] == ["images/00000/000000001.jpg", "images/00000/000000002.jpg"]


def test_cc3m_malformed():
    assert_bad("cc3m", FIXTURES / "cc3m" / "malformed" / "Train_GCC-training.tsv", "row 2")


# --- COCO --------------------------------------------------------------------------------
def test_coco_official_caption_files():
    dataset = read_dataset("coco", FIXTURES / "coco")
    assert len(dataset) == 5
    assert split_sizes(dataset) == {"train": 3, "val": 2}
    image = dataset["000000391895"]
    assert image.kind == "image" and image.path == "train2017/000000391895.jpg"
    assert len(image.captions) == 3
    assert [len(v.captions) for v in dataset] == [3, 2, 1, 2, 1]


def test_coco_karpathy_split_merges_restval_into_train():
    dataset = read_dataset("coco", FIXTURES / "coco" / "karpathy")
    assert split_sizes(dataset) == {"test": 1, "train": 2, "val": 1}
    assert set(dataset.splits["train"]) == {"COCO_val2014_000000522418", "COCO_train2014_000000057870"}
    image = dataset["COCO_val2014_000000391895"]
    assert image.path == "val2014/COCO_val2014_000000391895.jpg" and len(image.captions) == 2


def test_coco_malformed():
    assert_bad("coco", FIXTURES / "coco" / "malformed" / "captions_train2017.json", "annotations[1].image_id")
    assert_bad("coco", FIXTURES / "coco" / "malformed" / "missing_images.json", "images")


# --- HowTo100M ---------------------------------------------------------------------------
def test_howto100m_narration_is_speech():
    dataset = read_dataset("howto100m", FIXTURES / "howto100m")
    assert len(dataset) == 3 and split_sizes(dataset) == {"train": 3}
    video = dataset["--0tO9PrUhY"]
    assert video.captions == [] and video.segments == []
    assert [(s.start, s.end) for s in video.speech] == [(0.0, 4.32), (4.32, 8.1), (8.1, 12.75)]
    assert video.speech[2].sentence == "first mix the flour and the water"
    assert sum(len(v.speech) for v in dataset) == 9


def test_howto100m_malformed():
    assert_bad("howto100m", FIXTURES / "howto100m" / "malformed" / "caption.json", "--0tO9PrUhY.text")
    assert_bad("howto100m", FIXTURES / "howto100m" / "malformed" / "missing_end.json", "--0tO9PrUhY.end")


# --- Tux Paint ---------------------------------------------------------------------------
def test_tuxpaint_fixture_captions_and_skips():
    dataset = read_dataset("tuxpaint", FIXTURES / "tuxpaint" / "stamps", seed=0)
    assert sorted(v.id for v in dataset) == ["animals/pets/cat", "animals/pets/dog", "household/calculator"]
    assert dataset["animals/pets/cat"].captions == ["A cat says meow."]
    assert dataset["animals/pets/dog"].captions == ["A friendly dog."]
    assert dataset["household/calculator"].captions == ["A calculator.  6x7=42"]
    assert dataset["animals/pets/cat"].kind == "image" and dataset["animals/pets/cat"].path == "animals/pets/cat.png"
    assert dataset.meta["skipped"] == {"no_png": 1, "no_caption": 2, "variants": 1}
    assert sorted(sum(dataset.splits.values(), [])) == sorted(v.id for v in dataset)


def test_tuxpaint_missing_folder(tmp_path):
    assert_bad("tuxpaint", tmp_path / "stamps", "stamps")


@pytest.mark.assets
def test_tuxpaint_real_stamps():
    stamps = default_stamps_dir()
    if not stamps.is_dir():
        pytest.skip("Tux Paint stamps not fetched: run make assets")
    dataset = read_dataset("tuxpaint", stamps, seed=0)
    pngs = [p for p in stamps.rglob("*.png")]
    skipped = dataset.meta["skipped"]
    assert len(dataset) + skipped["variants"] + skipped["no_caption"] == len(pngs)
    assert len(dataset) > 500
    assert all(len(v.captions) == 1 and v.captions[0] and "utf8=" not in v.captions[0] for v in dataset)
    sizes = split_sizes(dataset)
    assert sum(sizes.values()) == len(dataset)
    assert sizes["train"] == round(0.8 * len(dataset)) and sizes["val"] == round(0.1 * len(dataset))
    assert read_dataset("tuxpaint", stamps, seed=0).splits == dataset.splits
    assert read_dataset("tuxpaint", stamps, seed=1).splits["test"] != dataset.splits["test"]
    if "household/electronics/calculator" in dataset:
        assert dataset["household/electronics/calculator"].captions[0].startswith("A calculator.")


# --- folder and manifest -----------------------------------------------------------------
def test_folder_reader(tmp_path):
    for rel in ["a.mp4", "b/c.avi", "b/d.MKV", "e.webm", "e.mov", "notes.txt"]:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_bytes(b"")
    dataset = read_dataset("folder", tmp_path)
    assert [v.id for v in dataset] == ["a", "b/c", "b/d", "e.mov", "e.webm"]
    assert dataset.splits == {"all": ["a", "b/c", "b/d", "e.mov", "e.webm"]}
    assert dataset["b/d"].path == "b/d.MKV" and dataset["a"].captions == []
    assert dataset.media_path("a") == tmp_path.resolve() / "a.mp4"


def test_folder_missing(tmp_path):
    assert_bad("folder", tmp_path / "videos", "videos")


def test_manifest_round_trip(tmp_path):
    original = read_dataset("msrvtt", MSRVTT, protocol="1k-A")
    original.save(tmp_path / "msrvtt.json")
    loaded = read_dataset("manifest", tmp_path / "msrvtt.json")
    assert loaded.splits == original.splits
    assert [v.captions for v in loaded] == [v.captions for v in original]
    assert loaded["video6"].meta["query_caption_index"] == 1


def test_manifest_malformed():
    assert_bad("manifest", FIXTURES / "manifest" / "not_a_manifest.json", "format")
