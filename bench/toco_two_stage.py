"""Benchmark: ToCo's two-stage retrieval vs the exact all-pairs cross-encoder vs cheap-only.

Loads a trained `toco` run, encodes one split once, then scores every caption against
every video three ways and times only the scoring (the encoding is shared):

- cheap: the dual scorer alone (mean-pooled tokens, one matrix product);
- two-stage: cheap everywhere + the fusion encoder's f + λ·f^t on each query's top-k;
- exact: f + λ·f^t for every (caption, video) pair, O(captions × videos) fusion passes.

The exact matrix costs O(queries × videos) fusion passes (~1 ms each on one CPU core),
so `--queries N` scores N captions spread evenly over the split (the same N for all
three rows, every video a candidate); 0 = every caption.
`--sweep-k 4,8,32` adds the two-stage metric at other shortlist sizes, assembled from
the cheap and exact matrices (no extra fusion passes; same ranking as `similarity`).
It prints t2v R@1/5/10 and MdR and the scoring time per query of each, the speed-up of
two-stage over exact, and writes JSON.

    python bench/toco_two_stage.py /tmp/toco/run --split test --top-k 16 --queries 200 --out bench/results/toco_two_stage.json
"""
from __future__ import annotations

import argparse
import platform
import time
from pathlib import Path

import torch

from videotext.eval.evaluate import encode_split
from videotext.eval.relevance import multi_caption_relevance
from videotext.eval.retrieval import retrieval_metrics
from videotext.inference import load_model
from videotext.io import write_json
from videotext.data.run_data import RunData


def timed(fn) -> tuple[torch.Tensor, float]:
    start = time.perf_counter()
    with torch.inference_mode():
        out = fn()
    return out.float(), time.perf_counter() - start


def query_subset(total: int, count: int) -> torch.Tensor:
    """`count` distinct indices spread evenly over range(total)."""
    return torch.linspace(0, total - 1, count).round().long().unique()


def two_stage_from(cheap: torch.Tensor, exact: torch.Tensor, k: int) -> torch.Tensor:
    """What `similarity` returns at shortlist size k, given both full matrices [T, V]."""
    top = cheap.topk(min(k, cheap.shape[1]), dim=1).indices
    fused = exact.gather(1, top)
    return cheap.scatter(1, top, fused + (cheap.max() + 1.0 - fused.min()))


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir")
    parser.add_argument("--split", default="test")
    parser.add_argument("--top-k", type=int, default=16)
    parser.add_argument("--queries", type=int, default=0, help="captions scored, spread evenly; 0 = all")
    parser.add_argument("--sweep-k", default="", help="comma-separated shortlist sizes, from the exact matrix")
    parser.add_argument("--out", default="")
    args = parser.parse_args(argv)

    loaded = load_model(args.run_dir, device="cpu")
    method = loaded.method
    if method.name != "toco":
        raise SystemExit(f"{args.run_dir}: a {method.name!r} run, expected toco")
    data = RunData(loaded.config)
    encoded = encode_split(method, data.split(args.split), data.read_features)
    relevant = multi_caption_relevance([r.video_id for r in encoded.refs], encoded.video_ids)
    text = encoded.text
    if 0 < args.queries < len(encoded.refs):
        keep = query_subset(len(encoded.refs), args.queries)
        text = {k: (v[keep] if isinstance(v, torch.Tensor) else v) for k, v in text.items()}
        relevant = relevant[keep.numpy()]
    n_queries = int(relevant.shape[0])

    method.config.rerank_top_k = args.top_k
    rows = {
        "cheap": timed(lambda: method.cheap_similarity(text, encoded.video)),
        "two_stage": timed(lambda: method.similarity(text, encoded.video)),
        "exact": timed(lambda: method.full_similarity(text, encoded.video)),
    }
    result = {"run_dir": str(args.run_dir), "split": args.split, "top_k": args.top_k, "queries": n_queries,
              "videos": len(encoded.video_ids), "threads": torch.get_num_threads(), "machine": platform.machine()}
    for name, (sims, seconds) in rows.items():
        metrics = retrieval_metrics(sims, relevant)
        result[name] = {"R1": metrics["R1"], "R5": metrics["R5"], "R10": metrics["R10"], "MdR": metrics["MdR"],
                        "ms_per_query": 1000 * seconds / n_queries}
        print(f"{name:>9}: R@1 {metrics['R1']:5.1f}  R@5 {metrics['R5']:5.1f}  R@10 {metrics['R10']:5.1f}  "
              f"MdR {metrics['MdR']:4.1f}  {1000 * seconds / n_queries:8.3f} ms/query")
    for k in [int(x) for x in args.sweep_k.split(",") if x]:
        metrics = retrieval_metrics(two_stage_from(rows["cheap"][0], rows["exact"][0], k), relevant)
        result[f"two_stage_k{k}"] = {m: metrics[m] for m in ("R1", "R5", "R10", "MdR")}
        print(f"  top-{k:<3}: R@1 {metrics['R1']:5.1f}  R@5 {metrics['R5']:5.1f}  R@10 {metrics['R10']:5.1f}  "
              f"MdR {metrics['MdR']:4.1f}")
    result["speedup_two_stage_vs_exact"] = result["exact"]["ms_per_query"] / result["two_stage"]["ms_per_query"]
    print(f"two-stage is {result['speedup_two_stage_vs_exact']:.1f}x faster than exact "
          f"({n_queries} queries x {len(encoded.video_ids)} videos, top-{args.top_k})")
    if args.out:
        write_json(Path(args.out), result)
    return result


if __name__ == "__main__":
    main()
