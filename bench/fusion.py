"""Benchmark: how `--by both` fuses what is shown with what is said, on mixed sets, rule against rule.

    python bench/fusion.py [--run runs/benchmark/synthetic/dual/seed_0] [--out bench/results/fusion.json]

The shown channel is a trained run's own search (`LoadedModel.search` over a FAISS index of its
test-time video vectors, from the run's feature store); the said channel is `SpokenIndex` over
transcript lines (BM25 and the shipped sentence encoder). Every set is built twice, from the
validation videos (where the rule is chosen) and from the test videos (where it is reported); a
query counts when its target video is ranked first.

- picture: every video of the split says one of the 24 sentences of tests/speech_media.py at random
  (unrelated to its picture); the query is the video's first caption.
- same footage: 24 videos with one picture (every video vector equal), each saying its own sentence;
  the query paraphrases the sentence's key words (a picture that cannot tell videos apart).
- other footage: as above, but each video keeps its own picture (unrelated to the query).
- both: every video of the split says sentence (i mod 24), so about V / 24 videos share each line;
  the query is the caption followed by the sentence's paraphrase: speech narrows to the group,
  the picture picks the video in it.

Columns: shown alone, said alone, and `--by both` under each fusion rule of `search.fusion`
(`rrf` with tied scores sharing a rank, `standard`), plus reciprocal rank fusion over positions as
it ranked before ties shared a rank (`rrf-positions`).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))


def said_lines(entries: list[str], sentences: list[str]) -> list:
    from videotext.search.spoken import SaidLine

    return [SaidLine(entry, 0.0, 3.0, text, "subtitle") for entry, text in zip(entries, sentences)]


def top1(search, queries: list[str], targets: list[str]) -> float:
    return float(np.mean([(hits := search(q)) and hits[0].id == t for q, t in zip(queries, targets)]))


def evaluate_set(model, vectors: np.ndarray, ids: list[str], lines: list[str], queries: list[str],
                 targets: list[str]) -> dict:
    """Top-1 share of each channel and fusion rule on one set."""
    from videotext.search.entries import Entry
    from videotext.search.fusion import FUSION_DEPTH, fuse_hits
    from videotext.search.index import new_index
    from videotext.search.channels import search_by
    from videotext.search.spoken import SpokenIndex

    index = new_index(vectors.shape[1], model.method_name)
    index.add(vectors, [Entry(id=i) for i in ids])
    spoken = SpokenIndex(said_lines(ids, lines))
    out = {"videos": len(ids), "queries": len(queries)}
    out["shown"] = top1(lambda q: search_by(model, index, spoken, q, k=1, by="shown"), queries, targets)
    for fusion in ("rrf", "standard"):
        out[f"said-{fusion}"] = top1(lambda q: search_by(model, index, spoken, q, k=1, by="said", fusion=fusion),
                                     queries, targets)
        out[f"both-{fusion}"] = top1(lambda q: search_by(model, index, spoken, q, k=1, fusion=fusion),
                                     queries, targets)

    def by_positions(query: str) -> list:
        """Reciprocal rank fusion over positions (every hit its own rank, ties in arbitrary order)."""
        def ranked(hits):
            return [dataclasses.replace(h, score=-float(position)) for position, h in enumerate(hits)]

        entry_of = index.get
        said = spoken.search(query, entry_of, k=FUSION_DEPTH, fusion="rrf")
        shown = model.search(query, index, k=FUSION_DEPTH)
        return fuse_hits([ranked(shown), ranked(said)], 1, "rrf")

    out["both-rrf-positions"] = top1(by_positions, queries, targets)
    return out


def build_sets(model, data, split: str, seed: int) -> dict:
    from tests.speech_media import SENTENCES

    dataset = data.split(split)
    vectors = model.encode_videos(dataset, data.read_features).numpy()  # [V, D]
    ids = [v.id for v in dataset]
    captions = [v.captions[0] for v in dataset]
    rng = np.random.default_rng(seed)
    sentences, paraphrases = [s for s, _ in SENTENCES], [q for _, q in SENTENCES]
    n = len(SENTENCES)
    sets = {}
    spoken = [sentences[i] for i in rng.integers(0, n, len(ids))]
    sets["picture"] = evaluate_set(model, vectors, ids, spoken, captions, ids)
    chosen = rng.choice(len(ids), n, replace=False)
    same = np.repeat(vectors[chosen[:1]], n, axis=0)
    sub_ids = [ids[i] for i in chosen]
    sets["same footage"] = evaluate_set(model, same, sub_ids, sentences, paraphrases, sub_ids)
    sets["other footage"] = evaluate_set(model, vectors[chosen], sub_ids, sentences, paraphrases, sub_ids)
    group = [i % n for i in range(len(ids))]
    sets["both"] = evaluate_set(model, vectors, ids, [sentences[g] for g in group],
                                [f"{c}, {paraphrases[g]}" for c, g in zip(captions, group)], ids)
    return sets


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--run", type=Path, default=Path("runs/benchmark/synthetic/dual/seed_0"))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=HERE / "results" / "fusion.json")
    args = parser.parse_args()

    from videotext.data.run_data import RunData
    from videotext.inference import load_model

    model = load_model(args.run, threads=1)
    data = RunData(model.config)
    started = time.perf_counter()
    result = {"run": str(args.run), "seed": args.seed}
    for split in ("val", "test"):
        result[split] = build_sets(model, data, split, args.seed)
    result["seconds"] = round(time.perf_counter() - started, 1)
    columns = ["shown", "said-rrf", "said-standard", "both-rrf-positions", "both-rrf", "both-standard"]
    for split in ("val", "test"):
        print(f"\n{split}: share of queries whose video is first")
        print(f"| set | videos | {' | '.join(columns)} |")
        print("|---" * (len(columns) + 2) + "|")
        for name, row in result[split].items():
            print(f"| {name} | {row['videos']} | " + " | ".join(f"{100 * row[c]:.1f} %" for c in columns) + " |")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1))
    print(f"\nwritten {args.out} ({result['seconds']} s)")


if __name__ == "__main__":
    main()
