"""The published size of every dataset with a reader: videos and captions per split, with their source.

One table (`COUNTS`) serves ``videotext dataset check`` (which compares a read dataset
with it) and ``docs/datasets/counts.md`` (a docs test checks the page shows exactly
these rows). A figure comes either from the dataset's paper or from the official
release files as distributed (counted on the files); each split names its source. A figure the
source only gives rounded (WebVid's "2.5M") carries that rounding as its
`precision`: a found count matches when it rounds to the published figure.

Splits are named as the reader names them under the entry's protocol (ActivityNet's
``paragraph`` protocol calls ``val_1`` ``test``). A validation split that a reader
carves out of another (``meta["validation"]``) is counted back into the split it was
carved from, since the published figures know nothing of it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from videotext.data.schema import VideoTextDataset


@dataclass(frozen=True)
class Count:
    """A published count; `precision` is the rounding it was published with (1 = exact)."""

    value: int
    precision: int = 1

    def matches(self, found: int) -> bool:
        return abs(found - self.value) * 2 <= self.precision if self.precision > 1 else found == self.value

    def __str__(self) -> str:
        if self.precision == 1:
            return f"{self.value:,}"
        unit, size = ("M", 1_000_000) if self.value >= 1_000_000 else ("k", 1_000)
        digits = max(0, round(math.log10(size / self.precision)))
        return f"≈{self.value / size:.{digits}f}{unit}"


@dataclass(frozen=True)
class Split:
    """One split's published counts; None where the source publishes no figure."""

    name: str
    videos: Count | None
    captions: Count | None
    source: str


@dataclass(frozen=True)
class Published:
    """The published counts of one dataset under one protocol."""

    dataset: str  # reader name
    protocol: str  # the reader's meta["protocol"] these splits apply to
    text: str  # what a "caption" is here: captions, sentences, clips, narration lines
    splits: tuple[Split, ...]
    note: str = ""

    def split(self, name: str) -> Split | None:
        return next((s for s in self.splits if s.name == name), None)


def _n(value: int, precision: int = 1) -> Count:
    return Count(value, precision)


ANET_RELEASE = "official release (train.json / val_1.json / val_2.json, counted)"
QVH_RELEASE = "official release (jayleicn/moment_detr data/highlight_*_release.jsonl, counted)"
CHARADES_STA = "Gao et al., ICCV 2017 (TALL): 12,408 / 3,720 sentence-moment pairs in 6,672 Charades videos"
YC2_RELEASE = "official release (youcookii_annotations_trainval.json, counted)"
MSRVTT_PAPER = "Xu et al., CVPR 2016 (10,000 clips, 20 sentences each, split 6,513 / 497 / 2,990)"
DIDEMO_RELEASE = "official release (LisaAnne/LocalizingMoments data/)"
COCO2014 = "official release (captions_train2014.json / captions_val2014.json, counted)"
COCO2017 = "official release (captions_train2017.json / captions_val2017.json, counted)"

COUNTS: tuple[Published, ...] = (
    Published("activitynet", "official", "sentences", (
        Split("train", _n(10_009), _n(37_421), ANET_RELEASE),
        Split("val_1", _n(4_917), _n(17_505), ANET_RELEASE),
        Split("val_2", _n(4_885), _n(17_031), ANET_RELEASE),
    ), "Krishna et al., ICCV 2017 describe 20k videos split 10,024 / 4,926 / 5,044; the released files hold "
       "the videos still listed."),
    Published("activitynet", "paragraph", "sentences", (
        Split("train", _n(10_009), _n(37_421), ANET_RELEASE + "; the carved val counts here"),
        Split("test", _n(4_917), _n(17_505), ANET_RELEASE + ": val_1"),
        Split("val_2", _n(4_885), _n(17_031), ANET_RELEASE),
    )),
    Published("activitynet", "moments", "sentences", (
        Split("train", _n(10_009), _n(37_421), ANET_RELEASE),
        Split("val", _n(4_917), _n(17_505), ANET_RELEASE + ": val_1"),
        Split("test", _n(4_885), _n(17_031), ANET_RELEASE + ": val_2"),
    ), "Zhang et al., AAAI 2020 (2D-TAN) split: val_1 validates, val_2 tests."),
    Published("charades_sta", "official", "queries", (
        Split("train", _n(5_338), _n(12_408), CHARADES_STA + "; the carved val counts here"),
        Split("test", _n(1_334), _n(3_720), CHARADES_STA),
    )),
    Published("qvhighlights", "official", "queries", (
        Split("train", _n(7_100), _n(7_218), QVH_RELEASE),
        Split("val", _n(1_519), _n(1_550), QVH_RELEASE),
        Split("test", _n(1_529), _n(1_542), QVH_RELEASE + " (answers withheld)"),
    ), "Lei et al., NeurIPS 2021: 10,148 videos, 10,310 queries."),
    Published("qvhighlights", "val-as-test", "queries", (
        Split("train", _n(7_100), _n(7_218), QVH_RELEASE + "; the carved val counts here"),
        Split("test", _n(1_519), _n(1_550), QVH_RELEASE + ": the validation file"),
        Split("test_release", _n(1_529), _n(1_542), QVH_RELEASE + ": the test file (answers withheld)"),
    )),
    Published("youcook2", "official", "segments", (
        Split("train", _n(1_333), _n(10_337), "Zhou et al., AAAI 2018 (videos); " + YC2_RELEASE + " (segments)"),
        Split("validation", _n(457), _n(3_492), "Zhou et al., AAAI 2018 (videos); " + YC2_RELEASE + " (segments)"),
    ), "The 210 test videos' sentences are withheld."),
    Published("youcook2", "validation-as-test", "segments", (
        Split("train", _n(1_333), _n(10_337), YC2_RELEASE + "; the carved val counts here"),
        Split("test", _n(457), _n(3_492), YC2_RELEASE + ": the validation subset"),
    )),
    Published("msrvtt", "full", "captions", (
        Split("train", _n(6_513), _n(130_260), MSRVTT_PAPER),
        Split("val", _n(497), _n(9_940), MSRVTT_PAPER),
        Split("test", _n(2_990), _n(59_800), MSRVTT_PAPER),
    ), "10,000 videos, 200,000 captions in all."),
    Published("msrvtt", "1k-A", "captions", (
        Split("train", _n(9_000), _n(180_000), "Yu et al., ECCV 2018 (JSFusion); the carved val counts here"),
        Split("test", _n(1_000), _n(20_000), "Yu et al., ECCV 2018 (JSFusion); all 20 captions kept"),
    )),
    Published("msrvtt", "1k-B", "captions", (
        Split("train", _n(6_656), _n(133_120), "Miech et al., 2018 (MoEE); the carved val counts here"),
        Split("test", _n(1_000), _n(20_000), "Miech et al., 2018 (MoEE); all 20 captions kept"),
    )),
    Published("vatex", "official", "English captions", (
        Split("train", _n(25_991), _n(259_910), "Wang et al., ICCV 2019 (10 English captions per video)"),
        Split("validation", _n(3_000), _n(30_000), "Wang et al., ICCV 2019"),
        Split("public_test", _n(6_000), None, "Wang et al., ICCV 2019"),
    )),
    Published("vatex", "validation-as-test", "English captions", (
        Split("train", _n(25_991), _n(259_910), "Wang et al., ICCV 2019; the carved val counts here"),
        Split("test", _n(3_000), _n(30_000), "Wang et al., ICCV 2019: the validation set"),
        Split("public_test", _n(6_000), None, "Wang et al., ICCV 2019"),
    )),
    Published("vatex", "hgr", "English captions", (
        Split("train", _n(25_991), _n(259_910), "Wang et al., ICCV 2019"),
        Split("val", _n(1_500), _n(15_000), "Chen et al., CVPR 2020 (HGR): half the validation set"),
        Split("test", _n(1_500), _n(15_000), "Chen et al., CVPR 2020 (HGR): the other half"),
    )),
    Published("lsmdc", "official", "sentences", (
        Split("train", _n(101_079), None, "Rohrbach et al., IJCV 2017 (LSMDC 2016 training clips)"),
        Split("val", _n(7_408), None, "Rohrbach et al., IJCV 2017 (LSMDC 2016 validation clips)"),
        Split("test", _n(1_000), None, "LSMDC 2016 retrieval challenge (LSMDC16_challenge_1000_publictect.csv)"),
        Split("test_full", _n(10_053), None, "Rohrbach et al., IJCV 2017 (LSMDC 2016 public test clips)"),
    )),
    Published("msvd", "standard", "captions", (
        Split("train", _n(1_200), None, "Venugopalan et al., NAACL 2015 (split of Guadarrama et al. 2013)"),
        Split("val", _n(100), None, "Venugopalan et al., NAACL 2015"),
        Split("test", _n(670), None, "Venugopalan et al., NAACL 2015"),
    ), "Chen & Dolan, ACL 2011: 1,970 clips, about 80k English descriptions (no exact per-split figure)."),
    Published("msvd", "all", "captions", (
        Split("all", _n(1_970), None, "Chen & Dolan, ACL 2011"),
    )),
    Published("didemo", "official", "descriptions", (
        Split("train", None, None, "no figure: train_data.json has not been counted here"),
        Split("val", _n(1_094), _n(4_180), DIDEMO_RELEASE + " (val_data.json, counted)"),
        Split("test", _n(1_037), _n(4_021), DIDEMO_RELEASE + " (test_data.json, counted)"),
    ), "Hendricks et al., ICCV 2017 describe over 10,000 videos; the exact figures are of the released files."),
    Published("webvid", "2M", "captions", (
        Split("train", _n(2_500_000, 100_000), _n(2_500_000, 100_000), "Bain et al., ICCV 2021 (2.5M pairs)"),
        Split("val", _n(5_000), _n(5_000), "official release (results_2M_val.csv)"),
    )),
    Published("webvid", "10M", "captions", (
        Split("train", _n(10_700_000, 100_000), _n(10_700_000, 100_000), "official release (WebVid-10M: 10.7M pairs)"),
        Split("val", _n(5_000), _n(5_000), "official release (results_10M_val.csv)"),
    )),
    Published("cc3m", "official", "captions", (
        Split("train", _n(3_318_333), _n(3_318_333), "official release (rows of Train_GCC-training.tsv)"),
        Split("val", _n(15_840), _n(15_840), "official release (rows of Validation_GCC-1.1.0-Validation.tsv)"),
    ), "Sharma et al., ACL 2018. Images come from their URLs: rows sharing a URL are one image, so a "
       "download report or repeated URLs lower the image count."),
    Published("coco", "2014", "captions", (
        Split("train", _n(82_783), _n(414_113), COCO2014),
        Split("val", _n(40_504), _n(202_654), COCO2014),
    ), "Chen et al., 2015 (arXiv:1504.00325): 82,783 / 40,504 images."),
    Published("coco", "2017", "captions", (
        Split("train", _n(118_287), _n(591_753), COCO2017),
        Split("val", _n(5_000), _n(25_014), COCO2017),
    )),
    Published("coco", "karpathy", "captions", (
        Split("train", _n(113_287), None, "Karpathy & Fei-Fei, CVPR 2015 (82,783 train + 30,504 restval)"),
        Split("val", _n(5_000), None, "Karpathy & Fei-Fei, CVPR 2015"),
        Split("test", _n(5_000), None, "Karpathy & Fei-Fei, CVPR 2015"),
    )),
    Published("crosstask", "official", "step segments", (
        Split("all", _n(2_763), None, "Zhukov et al., CVPR 2019 (videos of the 18 primary tasks)"),
    ), "Compared over all splits together: the reader's train / test follow videos.csv / videos_val.csv."),
    Published("howto100m", "official", "narration lines", (
        Split("train", _n(1_220_000, 10_000), _n(136_000_000, 1_000_000), "Miech et al., ICCV 2019"),
    )),
)

# readers whose data have no published size: what `check` says instead
UNPUBLISHED = {
    "folder": "a folder of the user's own videos: there is no published count",
    "manifest": "a videotext manifest: name the dataset it holds (e.g. activitynet) to compare",
    "tuxpaint": "Tux Paint stamps vary with the Debian package version: there is no published count",
}

# the protocol a reader records when its meta has none
DEFAULT_PROTOCOL = "official"


def published(dataset: str, protocol: str | None) -> Published | None:
    """The published counts of `dataset` under `protocol` (None when there are none)."""
    protocol = protocol or DEFAULT_PROTOCOL
    return next((p for p in COUNTS if p.dataset == dataset and p.protocol == protocol), None)


def text_count(video) -> int:
    """How many texts a video holds: captions, else segment sentences, else moment queries, else narration lines."""
    return len(video.captions) or len(video.segments) or len(video.moments) or len(video.speech)


@dataclass
class Row:
    """One split compared: expected vs found, and the records dropped from it."""

    split: str
    videos_expected: Count | None
    videos_found: int | None
    captions_expected: Count | None
    captions_found: int | None
    dropped: int = 0
    source: str = ""
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def compare(dataset: VideoTextDataset, name: str | None = None) -> tuple[Published | None, list[Row]]:
    """Compare `dataset` with the published counts of its name and protocol.

    A split's captions match when the count found equals the published one, or when
    the records dropped by the bad-record policy make up the difference exactly (the
    published count is of the records in the file).
    """
    name = name or dataset.name
    entry = published(name, dataset.meta.get("protocol"))
    if entry is None:
        return None, []
    splits = _uncarved(dataset)
    dropped = _dropped_per_video(dataset)
    rows = []
    names = [s.name for s in entry.splits] + [s for s in splits if entry.split(s) is None and "all" not in
                                              [x.name for x in entry.splits]]
    for split_name in names:
        expected = entry.split(split_name)
        ids = _ids(splits, split_name)
        row = Row(split_name, expected.videos if expected else None, None if ids is None else len(ids),
                  expected.captions if expected else None,
                  None if ids is None else sum(text_count(dataset[i]) for i in ids),
                  0 if ids is None else sum(dropped.get(i, 0) for i in ids), expected.source if expected else "")
        if expected is None:
            row.source = "not published"
        elif ids is None:
            if expected.videos is not None or expected.captions is not None:
                row.problems.append("split not read")
        else:
            if row.videos_expected is not None and not row.videos_expected.matches(row.videos_found):
                row.problems.append(f"videos: {row.videos_found:,} found, {row.videos_expected} published")
            if row.captions_expected is not None and not (
                    row.captions_expected.matches(row.captions_found)
                    or row.captions_expected.matches(row.captions_found + row.dropped)):
                row.problems.append(f"{entry.text}: {row.captions_found:,} found"
                                    + (f" (+{row.dropped:,} dropped)" if row.dropped else "")
                                    + f", {row.captions_expected} published")
        rows.append(row)
    return entry, rows


def _ids(splits: dict[str, list[str]], name: str) -> list[str] | None:
    if name == "all":
        return [i for ids in splits.values() for i in dict.fromkeys(ids)] if splits else None
    return splits.get(name)


def _uncarved(dataset: VideoTextDataset) -> dict[str, list[str]]:
    """The dataset's splits with each carved validation split merged back into its source."""
    splits = {k: list(v) for k, v in dataset.splits.items()}
    for carved, info in (dataset.meta.get("validation") or {}).items():
        source = info.get("from") if isinstance(info, dict) else None
        if carved in splits and source in splits:
            splits[source] = splits[source] + splits.pop(carved)
    return splits


def _dropped_per_video(dataset: VideoTextDataset) -> dict[str, int]:
    """Video id → how many of its text records the bad-record policy dropped."""
    out: dict[str, int] = {}
    for entry in (dataset.meta.get("bad_records") or {}).get("records", []):
        if entry.get("action") == "dropped" and entry.get("video") in dataset:
            out[entry["video"]] = out.get(entry["video"], 0) + 1
    return out


def markdown_rows() -> list[str]:
    """The rows of the table in ``docs/datasets/counts.md``, one per published split."""
    rows = []
    for entry in COUNTS:
        for split in entry.splits:
            rows.append(f"| {entry.dataset} | {entry.protocol} | {split.name} | "
                        f"{split.videos if split.videos else '—'} | "
                        f"{f'{split.captions} {entry.text}' if split.captions else '—'} | {split.source} |")
    return rows


def as_dict(entry: Published | None, rows: list[Row]) -> dict[str, Any]:
    """A JSON-able form of a comparison."""
    return {
        "protocol": entry.protocol if entry else None,
        "splits": [{"split": r.split, "videos": [str(r.videos_expected) if r.videos_expected else None, r.videos_found],
                    "captions": [str(r.captions_expected) if r.captions_expected else None, r.captions_found],
                    "dropped": r.dropped, "problems": r.problems} for r in rows],
    }


def is_manifest(path: str | Path) -> bool:
    """Whether `path` is a videotext manifest (as `dataset convert` writes), judged by its first bytes."""
    path = Path(path)
    if not (path.is_file() and path.suffix == ".json"):
        return False
    with open(path, encoding="utf-8", errors="replace") as handle:
        return '"videotext-manifest"' in handle.read(4096)


def check_lines(name: str, entry: Published | None, rows: list[Row], dataset: VideoTextDataset) -> list[str]:
    """The table `videotext dataset check` prints: expected vs found per split, then what differs."""
    protocol = dataset.meta.get("protocol") or DEFAULT_PROTOCOL
    if name in UNPUBLISHED:
        return [f"{name}: {UNPUBLISHED[name]}"]
    if entry is None:
        known = sorted({p.protocol for p in COUNTS if p.dataset == name})
        return [f"{name}: no published counts for protocol {protocol!r}" + (f"; published for: {', '.join(known)}"
                                                                             if known else "")]
    table = [("split", "videos found", "published", f"{entry.text} found", "published", "dropped", "status")]
    for r in rows:
        table.append((r.split, _fmt(r.videos_found), str(r.videos_expected or "—"), _fmt(r.captions_found),
                      str(r.captions_expected or "—"), f"{r.dropped:,}", "ok" if r.ok else "DIFFERS"))
    widths = [max(len(line[i]) for line in table) for i in range(len(table[0]))]
    lines = [f"{name}, protocol {entry.protocol}: {len(dataset):,} videos"]
    lines += ["  " + "  ".join(cell.ljust(w) if i == 0 else cell.rjust(w) for i, (cell, w) in enumerate(zip(line, widths)))
              for line in table]
    lines += [f"  {r.split}: {problem}" for r in rows for problem in r.problems]
    sources: dict[str, list[str]] = {}
    for r in rows:
        sources.setdefault(r.source, []).append(r.split)
    lines += [f"  source of {', '.join(splits)}: {source}" for source, splits in sources.items()]
    if entry.note:
        lines.append(f"  note: {entry.note}")
    return lines


def _fmt(value: int | None) -> str:
    return "—" if value is None else f"{value:,}"
