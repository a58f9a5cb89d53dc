"""Text query → top-10 on a 10^5-entry index with a zero-shot CLIP ViT-B-32 run (`clip4clip`, meanP):
the latency of the whole `model.search(caption, index, k=10)` call, p50 / p95 over ~200 real captions,
at `--precision fp32`, `auto` (decided per network, `videotext.runtime.network_precision`; timed once
when it resolves to fp32 or bf16 as another column does) and `bf16`, on an exact (`flat`) and
an HNSW index (the library's settings: M 32, efConstruction 100, efSearch 128).

The run is `videotext convert openclip ViT-B-32` with random weights (`pretrained=""`: no CLIP
weights ship here; the cost of a query does not depend on them), or `--run DIR`. The index holds
`--n` clustered unit vectors of the run's dimension (bench/index_scale.py's generator: embedding-like
data in a 32-d subspace). Captions: the Tux Paint stamp captions (`make assets`) when present,
else sentences composed from a fixed word list.

Every caption goes through every setting back to back (the order rotating per caption), so load
from other processes on a shared machine hits all of them alike; one loop per index, as a server
searches one (FAISS's OpenMP threads, which spin after an exact search, would otherwise slow the
text tower of the HNSW calls next to it). Settings:

- `packed`: the library's path (the text tower's linear weights pre-packed for oneDNN,
  `videotext.openclip.PackedTextTransformer`); `modules`: open_clip's modules as before
  (`OpenCLIPTextEncoder.packed_inference = False`), the reference. Query vectors of the two are
  asserted equal to 1e-5 in cosine (bit-equal under bf16), and their top-10 lists compared.
- the breakdown of the packed call: tokenize (`prepare_text`), text tower (`encode_text` at the
  run's precision), index search (`Index.search` of the query vector), and the rest (Python in
  `LoadedModel.search` / `encode_texts`: batching, dtype boundary, hits) as the p50 of the whole
  call minus the p50s of the parts.
- ideas, each an interleaved A/B on `--idea-queries` captions: the text tower alone, packed vs
  modules; the sequence cut after the end-of-text
  token (CLIP's causal tower pools there; padded to `max_text_tokens` otherwise; asserted equal to
  1e-5 in cosine in fp32), torch threads 2 vs 1, `torch.inference_mode` vs `torch.no_grad`, FAISS
  threads for a single-query search of each index (alone, and inside the whole call: after a
  search FAISS's OpenMP threads spin and take a core from the next query's text tower), and the
  one-off cost of packing the weights.

    python bench/query_latency.py                      # ~5 min on 2 cores (the HNSW build: ~1.5 min)
    python bench/query_latency.py --n 20000 --queries 50 --idea-queries 20   # a quick look
"""
from __future__ import annotations

import argparse
import itertools
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import faiss
import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from index import recall_at_k  # noqa: E402  (bench/index.py)
from index_scale import clustered_dataset  # noqa: E402
import videotext  # noqa: E402
from videotext.io import write_json  # noqa: E402
from videotext.search import Index  # noqa: E402

SUBJECTS = ["a dog", "a small child", "two men", "a woman in a red coat", "a cat", "a chef", "a cyclist",
            "an old man", "a group of students", "a horse"]
ACTIONS = ["runs across", "walks slowly through", "plays in", "sits quietly in", "talks to a friend in"]
PLACES = ["a snowy park", "a busy kitchen", "the city street at night", "a green field", "a crowded market"]


def captions(count: int) -> tuple[list[str], str]:
    """`count` distinct captions (Tux Paint stamps when fetched, else composed ones) and their source."""
    from videotext.data.readers.tuxpaint import default_stamps_dir, stamp_caption

    root = default_stamps_dir()
    if root.is_dir():
        found = sorted({c for c in (stamp_caption(t) for t in sorted(root.rglob("*.txt"))) if c})
        if len(found) >= count:
            pick = np.random.default_rng(0).choice(len(found), count, replace=False)
            return [found[i] for i in sorted(pick)], f"Tux Paint stamps ({root})"
    composed = [f"{s} {a} {p}" for s, a, p in itertools.product(SUBJECTS, ACTIONS, PLACES)]
    return composed[:count], "composed from a word list"


def percentiles(ms: list[float]) -> dict[str, float]:
    return {"p50_ms": float(np.percentile(ms, 50)), "p95_ms": float(np.percentile(ms, 95)), "n": len(ms)}


def timed(function, *args) -> tuple[float, object]:
    t = time.perf_counter()
    out = function(*args)
    return (time.perf_counter() - t) * 1e3, out


class Packed:
    """Context: the text encoder's packed path on (True) or off (the modules, the reference)."""

    def __init__(self, model, on: bool):
        self.encoder, self.on = model.method.text_encoder, on

    def __enter__(self):
        self.before, self.encoder.packed_inference = self.encoder.packed_inference, self.on

    def __exit__(self, *exc):
        self.encoder.packed_inference = self.before


def tower_call(model, batch):
    """The text tower alone (tokens in, unit vectors out) at the run's precision."""
    with torch.inference_mode(), model.autocast():
        return model.method.encode_text(batch)


def interleave(settings: dict, texts: list[str], warmup: int) -> dict[str, list[float]]:
    """ms per caption of every setting {name: f(text)}, the settings back to back per caption."""
    names = list(settings)
    out = {name: [] for name in names}
    for i, text in enumerate(texts):
        shift = i % len(names)
        for name in names[shift:] + names[:shift]:
            ms, _ = timed(settings[name], text)
            if i >= warmup:
                out[name].append(ms)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run", default="", help="a run folder (default: convert open_clip --arch, random weights)")
    parser.add_argument("--arch", default="ViT-B-32")
    parser.add_argument("--n", type=int, default=100_000, help="index entries")
    parser.add_argument("--clusters", type=int, default=10_000)
    parser.add_argument("--spread", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--queries", type=int, default=200, help="captions timed")
    parser.add_argument("--idea-queries", type=int, default=60, help="captions per idea A/B")
    parser.add_argument("--warmup", type=int, default=5, help="first captions of each loop not counted")
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--kinds", nargs="+", default=["flat", "hnsw"], choices=["flat", "hnsw"])
    parser.add_argument("--precisions", nargs="+", default=["fp32", "auto", "bf16"], choices=["fp32", "auto", "bf16"],
                        help="`auto` is decided per network (videotext.runtime.network_precision)")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0 = physical cores)")
    parser.add_argument("--out", default="bench/results/query_latency.json")
    args = parser.parse_args()

    tmp = tempfile.TemporaryDirectory(prefix="vt-query-latency-")
    run = Path(args.run) if args.run else Path(tmp.name) / "run"
    if not args.run:
        from videotext.convert.openclip import convert

        convert(Path(args.arch), run)
    models, aliases = {}, {}
    for p in args.precisions:  # a precision that resolves to one already loaded is timed once
        model = videotext.load_model(run, precision=p, threads=args.threads)
        same = next((q for q, m in models.items() if m.dtype == model.dtype), None)
        if same is None:
            models[p] = model
        else:
            aliases[p] = same
    first = next(iter(models.values()))
    dim = first.method.text_encoder.hidden_size
    texts, source = captions(args.queries + args.warmup)
    print(f"run {run} ({first.config.name}), dim {dim}; precisions "
          f"{', '.join(f'{p}={m.dtype or torch.float32}' for p, m in models.items())}"
          f"{''.join(f' ({p} = {q}: timed once)' for p, q in aliases.items())}; torch threads "
          f"{torch.get_num_threads()}, faiss threads {faiss.omp_get_max_threads()}; {len(texts)} captions: {source}",
          flush=True)

    # --- the index ------------------------------------------------------------------------
    data_args = argparse.Namespace(n=args.n, dim=dim, clusters=args.clusters, spread=args.spread, seed=args.seed,
                                   queries=500)
    data, queries, names = clustered_dataset(data_args)
    indexes, builds = {}, {}
    for kind in args.kinds:
        t = time.perf_counter()
        indexes[kind] = Index(dim, kind=kind)
        indexes[kind].add(data, names)
        builds[kind] = time.perf_counter() - t
    recall = None
    if "flat" in indexes and "hnsw" in indexes:
        exact = [{h.id for h in hits} for hits in indexes["flat"].search(queries, args.k)]
        recall = recall_at_k(indexes["hnsw"], queries, exact, args.k)
    del data
    print(f"index: {args.n} x {dim} clustered; built " + ", ".join(f"{k} {s:.1f}s" for k, s in builds.items())
          + (f"; HNSW recall@{args.k} {recall:.3f} (generator queries)" if recall is not None else ""), flush=True)

    # --- same results: packed vs modules --------------------------------------------------
    agreement = {}
    for p, model in models.items():
        with Packed(model, False):
            ref = model.encode_text(texts)
        with Packed(model, True):
            new = model.encode_text(texts)
        cos = torch.nn.functional.cosine_similarity(ref, new).min().item()
        same = {kind: sum(a.id != b.id for ra, rb in zip(index.search(ref.numpy(), args.k),
                                                        index.search(new.numpy(), args.k)) for a, b in zip(ra, rb))
                for kind, index in indexes.items()}
        agreement[p] = {"min_cosine": cos, "bit_equal": bool(torch.equal(ref, new)), "differing_hits": same}
        assert cos >= 1 - 1e-5, f"{p}: packed query vectors differ from the modules' (min cosine {cos})"
        print(f"{p}: packed vs modules: min cosine {cos:.7f}, bit-equal {torch.equal(ref, new)}, hits that differ "
              f"in the top {args.k} of {len(texts)} captions: {same}", flush=True)

    # --- the whole call, and its parts: one loop per index (a server searches one) ---------------
    vectors = {t: first.encode_text(t).numpy() for t in texts}
    stats = {}
    for kind, index in indexes.items():
        settings = {}
        for p, model in models.items():
            for path in ("modules", "packed"):
                def call(text, model=model, index=index, on=path == "packed"):
                    with Packed(model, on):
                        return model.search(text, index, k=args.k)
                settings[f"search {p} {kind} {path}"] = call
            settings[f"tokenize {p} {kind}"] = lambda text, model=model: model.method.prepare_text([text])
            settings[f"tower {p} {kind}"] = lambda text, model=model: tower_call(model,
                                                                                 model.method.prepare_text([text]))
        settings[f"index {kind}"] = lambda text, index=index: index.search(vectors[text], args.k)
        stats.update({name: percentiles(ms) for name, ms in interleave(settings, texts, args.warmup).items()})
    rows = []
    print(f"\nwhole model.search(caption, index, k={args.k}), {len(texts) - args.warmup} captions (ms):")
    for p in models:
        for kind in indexes:
            ref, new = stats[f"search {p} {kind} modules"], stats[f"search {p} {kind} packed"]
            ratio = ref["p50_ms"] / new["p50_ms"]
            rows.append({"precision": p, "kind": kind, "modules": ref, "packed": new, "speedup_p50": ratio})
            print(f"  {p:5s} {kind:5s} modules p50 {ref['p50_ms']:6.2f} p95 {ref['p95_ms']:6.2f} | packed p50 "
                  f"{new['p50_ms']:6.2f} p95 {new['p95_ms']:6.2f} | modules/packed p50 {ratio:.2f}x", flush=True)
    breakdown = {}
    print("breakdown of the packed call, p50 (ms):")
    for p in models:
        for kind in indexes:
            parts = {"tokenize": stats[f"tokenize {p} {kind}"]["p50_ms"],
                     "text_tower": stats[f"tower {p} {kind}"]["p50_ms"],
                     "index_search": stats[f"index {kind}"]["p50_ms"]}
            total = stats[f"search {p} {kind} packed"]["p50_ms"]
            parts["python_rest"] = total - sum(parts.values())
            breakdown[f"{p} {kind}"] = {"total": total, **parts}
            print(f"  {p:5s} {kind:5s} total {total:6.2f} = tokenize {parts['tokenize']:.2f} + text tower "
                  f"{parts['text_tower']:.2f} + index search {parts['index_search']:.2f} + rest "
                  f"{parts['python_rest']:.2f}", flush=True)

    ideas = run_ideas(models, indexes, texts[: args.idea_queries + args.warmup], vectors, args)
    write_json(args.out, {
        "bench": "query_latency", "run": str(run), "arch": args.arch if not args.run else first.config.name,
        "n": args.n, "dim": dim, "clusters": args.clusters, "spread": args.spread, "k": args.k,
        "captions": len(texts) - args.warmup, "caption_source": source, "builds_s": builds,
        "hnsw_recall": recall, "torch": torch.__version__, "faiss": faiss.__version__,
        "torch_threads": torch.get_num_threads(), "faiss_threads": faiss.omp_get_max_threads(),
        "cpus": os.cpu_count(), "machine": platform.processor() or platform.machine(),
        "precisions": {p: str(m.dtype or torch.float32) for p, m in models.items()}, "aliases": aliases,
        "agreement": agreement, "results": rows, "breakdown": breakdown, "stats": stats, "ideas": ideas,
    })
    print(f"wrote {args.out}")


def run_ideas(models: dict, indexes: dict, texts: list[str], vectors: dict, args: argparse.Namespace) -> dict:
    """Interleaved A/B of each idea; prints one line each."""
    out: dict = {}
    print(f"\nideas, {len(texts) - args.warmup} captions each, p50 (ms):")

    def report(name: str, times: dict[str, list[float]], a: str, b: str) -> None:
        pa, pb = np.percentile(times[a], 50), np.percentile(times[b], 50)
        out[name] = {a: percentiles(times[a]), b: percentiles(times[b]), "ratio_p50": float(pa / pb)}
        print(f"  {name}: {a} {pa:.2f} vs {b} {pb:.2f} ({a}/{b} = {pa / pb:.2f}x)", flush=True)

    for p, model in models.items():
        encoder = model.method.text_encoder

        def modules_tower(t, model=model):
            with Packed(model, False):
                return tower_call(model, model.method.prepare_text([t]))
        report(f"text tower {p}, packed vs modules", interleave({
            "packed": lambda t, model=model: tower_call(model, model.method.prepare_text([t])),
            "modules": modules_tower}, texts, args.warmup), "modules", "packed")

        def padded(text, encoder=encoder):  # every caption padded to max_text_tokens, as CLIP's fixed context
            ids = encoder.tokenizer([text], context_length=encoder.max_tokens)
            return {"input_ids": ids, "attention_mask": (ids != 0).long(), "texts": [text]}

        cut = torch.cat([tower_call(model, encoder.tokenize([t])) for t in texts]).float()
        full = torch.cat([tower_call(model, padded(t)) for t in texts]).float()
        cos = torch.nn.functional.cosine_similarity(cut, full).min().item()
        if model.dtype is None:
            assert cos >= 1 - 1e-5, f"cut vs padded: min cosine {cos}"
        out[f"cut_min_cosine {p}"] = cos
        print(f"  {p}: cut after the end-of-text token vs padded to {encoder.max_tokens} tokens: min cosine {cos:.7f}")
        report(f"text tower {p}, sequence cut vs padded", interleave({
            "cut": lambda t, model=model, encoder=encoder: tower_call(model, encoder.tokenize([t])),
            "padded": lambda t, model=model: tower_call(model, padded(t))}, texts, args.warmup), "padded", "cut")

        threads = torch.get_num_threads()

        def one_thread(t, model=model):
            torch.set_num_threads(1)
            try:
                return tower_call(model, model.method.prepare_text([t]))
            finally:
                torch.set_num_threads(threads)
        report(f"text tower {p}, torch threads", interleave({
            f"{threads} threads": lambda t, model=model: tower_call(model, model.method.prepare_text([t])),
            "1 thread": one_thread}, texts, args.warmup), "1 thread", f"{threads} threads")

        def no_grad(t, model=model):
            with torch.no_grad(), model.autocast():
                return model.method.encode_text(model.method.prepare_text([t]))
        report(f"text tower {p}, grad mode", interleave({
            "inference_mode": lambda t, model=model: tower_call(model, model.method.prepare_text([t])),
            "no_grad": no_grad}, texts, args.warmup), "no_grad", "inference_mode")

        from videotext.openclip import PackedTextTransformer

        batch = model.method.prepare_text(texts[:1])
        packed = encoder._packed_transformer()
        encoder._packed = PackedTextTransformer(encoder.tower)  # a fresh one: its first call packs
        first, _ = timed(tower_call, model, batch)
        again, _ = timed(tower_call, model, batch)
        encoder._packed = packed
        out[f"first_call_ms {p}"] = {"first": first, "next": again}
        print(f"  {p}: first packed call (packs the weights) {first:.0f} ms, the next {again:.1f} ms")

    threads = faiss.omp_get_max_threads()
    for (p, model), (kind, index) in itertools.product(models.items(), indexes.items()):
        def whole(t, model=model, index=index):
            return model.search(t, index, k=args.k)

        def whole_one(t, model=model, index=index):
            faiss.omp_set_num_threads(1)
            try:
                return model.search(t, index, k=args.k)
            finally:
                faiss.omp_set_num_threads(threads)
        report(f"whole call {p} {kind}, FAISS threads", interleave({
            f"{threads} threads": whole, "1 thread": whole_one}, texts, args.warmup), f"{threads} threads", "1 thread")
    for kind, index in indexes.items():
        def faiss_one(t, index=index):
            faiss.omp_set_num_threads(1)
            try:
                return index.search(vectors[t], args.k)
            finally:
                faiss.omp_set_num_threads(threads)
        report(f"index search ({kind}), FAISS threads", interleave({
            f"{threads} threads": lambda t, index=index: index.search(vectors[t], args.k), "1 thread": faiss_one},
            texts, args.warmup), f"{threads} threads", "1 thread")
    return out


if __name__ == "__main__":
    main()
