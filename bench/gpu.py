"""Benchmark: the GPU path in one prepared script (about 6 minutes on one H100).

    python bench/gpu.py --json bench/results/gpu.json              # on a GPU machine
    python bench/gpu.py --device cpu --videos 24 --steps 2 --batch-size 8 --methods dual  # a check of the script

Everything through the project's own code, on one set made here (`videotext synth`, 6 s videos):
1. extraction: `extract_features` of every expert the packaged synthetic configs read (appearance,
   motion, audio, words, and CLIP ViT-B-32 with seeded random weights) on the device: videos/s and
   frames/s (the decoded frames the experts read);
2. training: for each method, its packaged `<method>/synthetic` config on that set, the
   trainer's own step (`Trainer._forward_backward` + `_optimizer_step`: forward, backward,
   optimiser) timed over `--steps` steps after one untimed pass over the same batches (the steady state:
   kernels chosen, a frozen text tower's cache filled), at fp32 (`train.amp=off`) and
   under bf16 autocast (`train.amp=bf16`; attention through `scaled_dot_product_attention`, which
   picks the fused kernels on a GPU): steps/s and the ratio;
3. `index build` of the set with a dual run on the device: videos/s from the feature store, and
   with extraction;
4. query latency of `model.search` (p50 / p95 over `--queries` captions, one at a time);
5. the pixel pipeline at the paper's size (`pixel_pipeline`: Frozen, ViT-B/16 at 224 px, 4 frames a clip,
   bf16): frames/s of the trainer's batch maker against the frames/s its step consumes.
Figures are printed and written to `--json`; CUDA timings synchronise before each clock read.
The official Frozen code's steps/s on the same GPU is `bench/official_steps.py --device cuda`.

On a machine without the packaged weights (a GPU image where only some packages travel):
`--text-model DIR` names a folder with all-MiniLM-L6-v2's config and tokenizer; seeded random weights
of that architecture are written there when it has none (timings depend on shapes, not values). The
words expert is left out where the GloVe package is missing (MMT then reads its other three experts,
as its synthetic config says for a set without speech), and ToCo where spaCy's tagger is missing.
"""
from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

METHODS = ("dual", "mmt", "frozen", "coot", "supportset", "toco", "clip4clip")
EXPERTS = ("appearance", "motion", "audio", "words", "clip")  # every expert a packaged synthetic config reads
# the demo's settings for these 128-px videos (videotext.demo): the appearance network at 96 px, flow at 64 px
DEMO_OPTIONS = {"appearance": {"input_size": 96}, "motion": {"flow_size": 64, "frames_per_step": 3}}


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def installed(package: str) -> bool:
    """Whether a weight package of `videotext.weights` is installed."""
    from videotext.weights import WeightsError, package_folder

    try:
        package_folder(package)
    except WeightsError:
        return False
    return True


def experts_here() -> list[str]:
    return [e for e in EXPERTS if e != "words" or installed("glove")]


def methods_here(methods: list[str]) -> list[str]:
    """`methods` less those whose packaged needs are missing here, each said in one line."""
    import importlib.util

    kept = []
    for method in methods:
        if method == "toco" and not (importlib.util.find_spec("spacy") and installed("spacy_en")):
            print("toco: skipped (spaCy and its English tagger, which mark the tokens of interest, are not installed)")
            continue
        kept.append(method)
    return kept


def random_text_model(folder: Path) -> str:
    """`folder` (a BERT-family config and tokenizer) with seeded random weights written once."""
    if not any(folder.glob("*.safetensors")):
        from transformers import AutoConfig, AutoModel

        torch.manual_seed(0)
        AutoModel.from_config(AutoConfig.from_pretrained(folder)).save_pretrained(folder)
    return str(folder)


def make_set(work: Path, videos: int, device: torch.device, workers: int) -> dict[str, Any]:
    """The synthetic set and its features; extraction timed."""
    from videotext.data.experts import extract_features
    from videotext.data.synthetic import synthesize

    synthesize(work, num_videos=videos, seed=0, progress=False, workers=workers)
    started = time.perf_counter()
    summary = extract_features(work / "manifest.json", experts_here(), work / "features", rate=1.0, progress=False,
                               device=str(device), workers=workers, batch_size=256, options=DEMO_OPTIONS)
    sync(device)
    seconds = time.perf_counter() - started
    frames = videos * 6 * 8  # 6 s at 8 fps: every frame is decoded (motion reads them all)
    return {"videos": videos, "seconds": seconds, "videos_per_s": videos / seconds, "frames_per_s": frames / seconds,
            "failed": summary.get("failed", 0)}



def timed_steps(trainer: Any, warm: list, prepared: list, device: torch.device) -> float:
    """Seconds of the trainer's steps over `prepared` (forward, backward, optimiser step), after
    untimed steps over `warm`; the device synchronised at both ends."""
    for batch in warm:
        trainer._forward_backward(batch, 1)
        trainer._optimizer_step()
    sync(device)
    started = time.perf_counter()
    for batch in prepared:
        trainer._forward_backward(batch, 1)
        trainer._optimizer_step()
    sync(device)
    return time.perf_counter() - started

def train_steps(method: str, work: Path, device: torch.device, amp: str, steps: int,
                batch_size: int | None = None, save_to: Path | None = None,
                text_model: str | None = None) -> dict[str, Any]:
    """Steps/s of one method's trainer step at `amp` (off | bf16)."""
    from videotext.config import load_config
    from videotext.train.trainer import Trainer
    from videotext.runtime import to_device

    config = load_config(f"{method}/synthetic", [
        f"data.manifest={work / 'manifest.json'}", f"data.features={work / 'features'}", f"train.device={device}",
        f"train.amp={amp}", "train.epochs=1000", "data.num_workers=0",
        *([f"train.batch_size={batch_size}"] if batch_size else []),
        *([f"model.text_model={text_model}"] if text_model and method != "clip4clip" else []),  # clip4clip: CLIP's own tower
        *([f"model.decoder_model={text_model}"] if text_model and method == "supportset" else []),
        *(["data.experts=[appearance,motion,audio]"] if method == "mmt" and "words" not in experts_here() else [])])
    trainer = Trainer(config, work / "runs" / f"{method}-{amp}", progress=False)
    trainer.build()
    trainer.method.train()
    batches = trainer.batches
    from videotext.train.trainer import epoch_length

    available = max(1, epoch_length(batches, 0))
    prepared = [to_device(batches.batch(0, i % available), trainer.device) for i in range(steps)]
    seconds = timed_steps(trainer, prepared, prepared, device)  # warm-up: kernels chosen, frozen text cached
    if save_to is not None:  # a run folder of the trained state, for the index and query timings
        from videotext.config import save_config
        from videotext.train.checkpoint import save_checkpoint

        save_to.mkdir(parents=True, exist_ok=True)
        save_config(trainer.config, save_to / "config.yaml")
        from videotext.config import to_plain

        save_checkpoint(save_to / "checkpoints" / "best", trainer.method,
                        {"method": method, "model": to_plain(trainer.config.model), "expert_dims": trainer.expert_dims})
    return {"steps": steps, "seconds": seconds, "steps_per_s": steps / seconds,
            "batch_size": int(config.train.batch_size), "trainable_parameters": sum(
                p.numel() for p in trainer.method.parameters() if p.requires_grad)}


def pixel_pipeline(work: Path, device: torch.device, steps: int, batch_size: int, text_model: str | None) -> dict[str, Any]:
    """Frozen at the paper's size (ViT-B/16, 224 px, 4 frames a clip, bf16): the frames/s the
    trainer's batch maker gives (decode, crop, resize, normalise, pin; one thread, as the trainer's
    prefetch thread makes them) against the frames/s its step consumes on the device. A ratio below
    1 means decoding starves the device."""
    from videotext.config import load_config
    from videotext.runtime import pin_batch, to_device
    from videotext.train.trainer import Trainer, epoch_length

    config = load_config("frozen/synthetic", [
        f"data.manifest={work / 'manifest.json'}", f"train.device={device}", "train.amp=bf16", "train.epochs=1000",
        "model.preset=base", "model.num_frames=4", "model.frame_cache=off", f"train.batch_size={batch_size}",
        *([f"model.text_model={text_model}"] if text_model else [])])
    trainer = Trainer(config, work / "runs" / "frozen-paper", progress=False)
    trainer.build()
    trainer.method.train()
    frames_per_batch = batch_size * 4
    trainer.batches.batch(0, 0)  # warm-up: the decoders' first open
    started = time.perf_counter()
    per_epoch = epoch_length(trainer.batches, 0)  # a small set holds few batches: they are decoded again in turn
    made = [pin_batch(trainer.batches.batch(0, (1 + i) % per_epoch)) for i in range(steps)]
    pipeline_s = time.perf_counter() - started
    prepared = [to_device(b, trainer.device, non_blocking=True) for b in made]
    step_s = timed_steps(trainer, prepared[:2], prepared, device)  # warm-up: kernels chosen
    made_fps, used_fps = steps * frames_per_batch / pipeline_s, steps * frames_per_batch / step_s
    return {"batch_size": batch_size, "frames_per_clip": 4, "size": 224, "batches": steps,
            "pipeline_frames_per_s": made_fps, "step_frames_per_s": used_fps, "pipeline_over_step": made_fps / used_fps}


def index_and_queries(work: Path, device: torch.device, queries: int) -> dict[str, Any]:
    """`index build` videos/s with the dual run `train_steps` saved (from the store, and with
    extraction), and query latency."""
    from videotext.data.schema import VideoTextDataset
    from videotext.inference import load_model

    run = work / "runs" / "dual"
    model = load_model(run, device=str(device))
    dataset = VideoTextDataset.load(work / "manifest.json")
    out: dict[str, Any] = {}
    for name, features in (("from_store", work / "features"), ("with_extraction", work / "index-features")):
        sync(device)
        started = time.perf_counter()
        model.build_index(work / "manifest.json", work / f"index-{name}", features_dir=features, progress=False)
        sync(device)
        seconds = time.perf_counter() - started
        out[f"index_{name}"] = {"videos": len(dataset), "seconds": seconds, "videos_per_s": len(dataset) / seconds}
    captions = [c for v in dataset for c in v.captions][:queries]
    index = work / "index-from_store"
    model.search(captions[0], index, k=10)  # warm-up
    latencies = []
    for caption in captions:
        sync(device)
        started = time.perf_counter()
        model.search(caption, index, k=10)
        sync(device)
        latencies.append(1000 * (time.perf_counter() - started))
    latencies.sort()
    out["query_ms"] = {"p50": statistics.median(latencies), "p95": latencies[int(0.95 * (len(latencies) - 1))],
                       "queries": len(latencies)}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--videos", type=int, default=512)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--workers", type=int, default=8, help="decoding processes (extraction, synthesis)")
    parser.add_argument("--methods", default=",".join(METHODS))
    parser.add_argument("--batch-size", type=int, default=None, help="training batch (default: each config's)")
    parser.add_argument("--text-model", type=Path, default=None,
                        help="a MiniLM config + tokenizer folder (random weights) in place of the packaged MiniLM")
    parser.add_argument("--pipeline-batch", type=int, default=24,
                        help="clips a batch for the pixel pipeline at paper size (Frozen §4.3: 24); 0 = skip it")
    parser.add_argument("--work", type=Path, default=None)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        sys.exit("no CUDA device here: run with --device cpu to check the script")
    work = args.work or Path(tempfile.mkdtemp(prefix="gpu-bench-"))
    result: dict[str, Any] = {"device": torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor(),
                              "torch": torch.__version__, "videos": args.videos}
    started = time.perf_counter()
    result["extraction"] = make_set(work, args.videos, device, args.workers)
    print(f"extraction: {result['extraction']['videos_per_s']:.1f} videos/s, "
          f"{result['extraction']['frames_per_s']:.0f} frames/s", flush=True)
    result["training"] = {}
    text_model = random_text_model(args.text_model) if args.text_model else None
    for method in methods_here([m for m in args.methods.split(",") if m]):
        rows = {amp: train_steps(method, work, device, amp, args.steps, args.batch_size,
                                 save_to=work / "runs" / "dual" if (method, amp) == ("dual", "off") else None,
                                 text_model=text_model)
                for amp in ("off", "bf16")}
        rows["bf16_over_fp32"] = rows["bf16"]["steps_per_s"] / rows["off"]["steps_per_s"]
        result["training"][method] = rows
        print(f"{method:11s} fp32 {rows['off']['steps_per_s']:7.2f} steps/s   bf16 {rows['bf16']['steps_per_s']:7.2f}"
              f" steps/s   x{rows['bf16_over_fp32']:.2f}", flush=True)
    if args.pipeline_batch:
        result["pixel_pipeline"] = pixel_pipeline(work, device, min(args.steps, 10), args.pipeline_batch, text_model)
        row = result["pixel_pipeline"]
        print(f"pixel pipeline (Frozen, ViT-B/16 224 px, 4 frames, batch {row['batch_size']}, bf16): batches made at "
              f"{row['pipeline_frames_per_s']:.3g} frames/s on one thread, the step consumes "
              f"{row['step_frames_per_s']:.3g} frames/s: x{row['pipeline_over_step']:.3g}", flush=True)
    if "dual" in args.methods.split(","):
        result.update(index_and_queries(work, device, args.queries))
        print(f"index build: {result['index_from_store']['videos_per_s']:.1f} videos/s from the store, "
              f"{result['index_with_extraction']['videos_per_s']:.1f} with extraction; query p50 "
              f"{result['query_ms']['p50']:.1f} ms, p95 {result['query_ms']['p95']:.1f} ms", flush=True)
    result["seconds"] = time.perf_counter() - started
    print(f"time {result['seconds']:.0f} s")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
