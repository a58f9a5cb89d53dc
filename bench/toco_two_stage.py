"""Benchmark: ToCo's two-stage retrieval vs the exact all-pairs cross-encoder vs cheap-only.

Loads a trained `toco` run, encodes one split once, then scores every caption against
every video three ways and times only the scoring (the encoding is shared):

- cheap: the dual scorer alone (mean-pooled tokens, one matrix product);
- two-stage: cheap everywhere + the fusion encoder's f + λ·f^t on each query's top-k;
- exact: f + λ·f^t for every (caption, video) pair, O(captions × videos) fusion passes.

It prints t2v R@1/5/10 and MdR and the scoring time per query of each, the speed-up of
two-stage over exact, and writes JSON.

    python bench/toco_two_stage.py /tmp/toco/run --split test --top-k 16 --out bench/results/toco_two_stage.json
"""
from __future__ import annotations

import argparse
import platform
import time
from pathlib import Path

import torch

from videotext.eval.evaluate import encode_split
from videotext.eval.retrieval import multi_caption_relevance, retrieval_metrics
from videotext.inference import load_model
from videotext.io import write_json
from videotext.train.trainer import RunData


def timed(fn) -> tuple[torch.Tensor, float]:
    start = time.perf_counter()
    with torch.inference_mode():
        out = fn()
    return out.float(), time.perf_counter() - start


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir")
    parser.add_argument("--split", default="test")
    parser.add_argument("--top-k", type=int, default=16)
    parser.add_argument("--out", default="")
    args = parser.parse_args(argv)

    loaded = load_model(args.run_dir, device="cpu")
    method = loaded.method
    if method.name != "toco":
        raise SystemExit(f"{args.run_dir}: a {method.name!r} run, expected toco")
    data = RunData(loaded.config)
    encoded = encode_split(method, data.split(args.split), data.read_features)
    relevant = multi_caption_relevance([r.video_id for r in encoded.refs], encoded.video_ids)
    n_queries = len(encoded.refs)

    method.config.rerank_top_k = args.top_k
    rows = {
        "cheap": timed(lambda: method.cheap_similarity(encoded.text, encoded.video)),
        "two_stage": timed(lambda: method.similarity(encoded.text, encoded.video)),
        "exact": timed(lambda: method.full_similarity(encoded.text, encoded.video)),
    }
    result = {"run_dir": str(args.run_dir), "split": args.split, "top_k": args.top_k, "queries": n_queries,
              "videos": len(encoded.video_ids), "threads": torch.get_num_threads(), "machine": platform.machine()}
    for name, (sims, seconds) in rows.items():
        metrics = retrieval_metrics(sims, relevant)
        result[name] = {"R1": metrics["R1"], "R5": metrics["R5"], "R10": metrics["R10"], "MdR": metrics["MdR"],
                        "ms_per_query": 1000 * seconds / n_queries}
        print(f"{name:>9}: R@1 {metrics['R1']:5.1f}  R@5 {metrics['R5']:5.1f}  R@10 {metrics['R10']:5.1f}  "
              f"MdR {metrics['MdR']:4.1f}  {1000 * seconds / n_queries:8.3f} ms/query")
    result["speedup_two_stage_vs_exact"] = result["exact"]["ms_per_query"] / result["two_stage"]["ms_per_query"]
    print(f"two-stage is {result['speedup_two_stage_vs_exact']:.1f}x faster than exact "
          f"({n_queries} queries x {len(encoded.video_ids)} videos, top-{args.top_k})")
    if args.out:
        write_json(Path(args.out), result)
    return result


if __name__ == "__main__":
    main()
