"""Benchmark: the moment head (`moment_detr`) on a CUDA device against the CPU, in one short script.

    python bench/moment_head_device.py --json bench/results/moment_head_cuda.json     # on a GPU machine
    python bench/moment_head_device.py --device cpu --steps 2 --epochs 1              # a check of the script

CI has no GPU, so this is where the head's device path is checked: a tensor made on the wrong device
(in the set matching, the saliency hinge, the window reading of `predict_moments`) fails here, not in
a user's first GPU run. On a moment set made on the spot (`moment_specs`: `--videos` train, val, test
videos of 1 to 3 minutes, no media rendered) with seeded random features of the synthetic moment set's
widths (appearance 1280, motion 80, audio 128, one step a second), `moment_detr/synthetic`'s settings:

1. parity: one initial state and one batch, the head in eval mode (no dropout) on the CPU and on the
   device at fp32 (TF32 off): every loss term and every output of `forward_windows`, max |difference|;
2. speed: the trainer's own step (forward, backward, optimiser; `timed_steps` of bench/gpu.py) over
   `--steps` steps after one untimed pass: the device at fp32 and under bf16 autocast, the CPU at one
   thread (`train.threads=1`, as the CPU benchmark trains), steps/s and the ratio;
3. end to end: `Trainer.fit` for `--epochs` on the device (validation each epoch, selection by
   `moments.mAP`), then the test split predicted from the selected weights on the device and on the
   CPU, decoded as spans (the head's own) and as saliency (the span finder): the largest score
   difference over the predictions and the share of queries whose top span is the same.

The features are noise, so the metrics say nothing of accuracy: they are the device path's figures.
On a machine without the packaged weights (a GPU image), `--text-model DIR` names a folder with
all-MiniLM-L6-v2's config and tokenizer; seeded random weights of that architecture are written there
when it has none (`random_text_model` of bench/gpu.py).
"""
from __future__ import annotations

import argparse
import copy
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu import random_text_model, sync, timed_steps  # noqa: E402  (bench/gpu.py: the GPU bench's helpers)

WIDTHS = {"appearance": 1280, "motion": 80, "audio": 128}  # the synthetic moment set's experts (docs/moments.md)


def make_set(root: Path, videos: tuple[int, int, int], seed: int = 0) -> Path:
    """A moment manifest (`moment_specs`, no media) and seeded random features of WIDTHS, 1 step a second."""
    from videotext.data.features import FeatureStore, FeatureWriter
    from videotext.data.schema import VideoTextDataset
    from videotext.data.synthetic.moments import moment_specs

    specs, splits = moment_specs(seed, dict(zip(("train", "val", "test"), videos)), (1.0, 3.0))
    dataset = VideoTextDataset("synthetic_moments", [s.to_video(f"videos/{s.id}.mp4") for s in specs], splits, root=root)
    manifest = dataset.save(root / "manifest.json")
    rng = np.random.default_rng(seed)
    store = FeatureStore(root / "features")
    writers = {e: FeatureWriter(store, e, d) for e, d in WIDTHS.items()}
    for video in dataset:
        steps = int(np.ceil(video.duration))
        for expert, writer in writers.items():
            writer.add(video.key, rng.normal(size=(steps, WIDTHS[expert])).astype(np.float32),
                       np.arange(steps, dtype=np.float64), step=1.0)
    for writer in writers.values():
        writer.commit()
    return manifest


def trainer_on(root: Path, device: str, amp: str, epochs: int, text_model: str | None, name: str) -> Any:
    from videotext.config import load_config
    from videotext.train.trainer import Trainer

    config = load_config("moment_detr/synthetic", [
        f"data.manifest={root / 'manifest.json'}", f"data.features={root / 'features'}", f"train.device={device}",
        f"train.amp={amp}", f"train.epochs={epochs}", "train.eval_every=1", "train.seed=0", "data.num_workers=0",
        "schedule.warmup_steps=2",  # a short fit: the config's 100 warm-up steps are longer than it
        *(["train.threads=1"] if device == "cpu" else []),
        *([f"model.text_model={text_model}"] if text_model else [])])
    trainer = Trainer(config, root / "runs" / name, progress=False)
    trainer.build()
    return trainer


def max_difference(a: Any, b: Any) -> float:
    """Largest |a − b| over the tensors of two outputs (dicts, tuples or tensors), read on the CPU."""
    if isinstance(a, torch.Tensor):
        return float((a.detach().float().cpu() - b.detach().float().cpu()).abs().max()) if a.numel() else 0.0
    if isinstance(a, dict):
        return max([max_difference(a[k], b[k]) for k in a if isinstance(a[k], (torch.Tensor, dict, tuple, list))],
                   default=0.0)
    if isinstance(a, (tuple, list)):
        return max([max_difference(x, y) for x, y in zip(a, b) if isinstance(x, (torch.Tensor, dict, tuple, list))],
                   default=0.0)
    return 0.0


def parity(root: Path, device: torch.device, text_model: str | None) -> dict[str, Any]:
    """Step 1: the CPU head and its copy on the device, one batch, eval mode, fp32 without TF32."""
    from videotext.runtime import to_device

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    trainer = trainer_on(root, "cpu", "off", 1, text_model, "parity")
    cpu = trainer.method.eval()
    there = copy.deepcopy(cpu).to(device).eval()
    batch = trainer.batches.batch(0, 0)
    with torch.no_grad():  # the saliency hinge draws its step pairs from the CPU generator: one seed for both
        here_loss = (torch.manual_seed(0), cpu.loss(batch))[1]
        there_loss = (torch.manual_seed(0), there.loss(to_device(batch, device)))[1]
        here_out, there_out = cpu.forward_windows(batch), there.forward_windows(to_device(batch, device))
    terms = {k: [float(here_loss[k]), float(there_loss[k])] for k in here_loss
             if isinstance(here_loss[k], torch.Tensor) and here_loss[k].numel() == 1}
    return {"loss_terms_cpu_device": terms,
            "loss_max_abs_diff": max(abs(a - b) for a, b in terms.values()),
            "forward_windows_max_abs_diff": max_difference(here_out, there_out),
            "batch_windows": int(batch["mask"].shape[0])}


def speed(root: Path, device: torch.device, steps: int, cpu_steps: int, text_model: str | None) -> dict[str, Any]:
    """Step 2: steps/s of the trainer's step, the device at fp32 and bf16, the CPU at one thread."""
    from videotext.runtime import to_device
    from videotext.train.trainer import epoch_length

    out = {}
    for where, amp, count in ((str(device), "off", steps), (str(device), "bf16", steps), ("cpu", "off", cpu_steps)):
        if where == "cpu" and device.type == "cpu" and amp == "off" and "device_fp32" in out:
            break  # a check of the script on a CPU: the device row is the CPU row
        trainer = trainer_on(root, where, amp, 1000, text_model, f"speed-{where}-{amp}")
        trainer.method.train()
        available = max(1, epoch_length(trainer.batches, 0))
        prepared = [to_device(trainer.batches.batch(0, i % available), trainer.device) for i in range(count)]
        seconds = timed_steps(trainer, prepared, prepared, torch.device(where))
        key = "cpu_1_thread" if where == "cpu" and device.type != "cpu" else f"device_{'fp32' if amp == 'off' else amp}"
        out[key] = {"steps": count, "seconds": round(seconds, 4), "steps_per_s": round(count / seconds, 2),
                    "batch_size": int(trainer.config.train.batch_size)}
        print(f"{key}: {count / seconds:.2f} steps/s", flush=True)
    if "cpu_1_thread" in out:
        out["device_fp32_over_cpu"] = round(out["device_fp32"]["steps_per_s"] / out["cpu_1_thread"]["steps_per_s"], 1)
    out["bf16_over_fp32"] = round(out["device_bf16"]["steps_per_s"] / out["device_fp32"]["steps_per_s"], 2)
    return out


def end_to_end(root: Path, device: torch.device, epochs: int, text_model: str | None) -> dict[str, Any]:
    """Step 3: a fit on the device, then the test split from its selected weights on both sides."""
    import dataclasses

    from videotext.eval.moment_eval import predict_moments

    trainer = trainer_on(root, str(device), "off", epochs, text_model, "fit")
    started = time.perf_counter()
    result = trainer.fit()
    sync(device)
    fit_s = time.perf_counter() - started
    test = trainer.data.split(trainer.config.data.test_split)
    there = trainer.method.eval()
    here = copy.deepcopy(there).to("cpu").eval()
    out = {"epochs": epochs, "fit_s": round(fit_s, 1), "best_step": result["best_step"],
           "test_metrics_noise_features": {k: result["moments"][k] for k in ("R1@0.5", "mAP")}}
    for decode in ("spans", "saliency"):
        for method in (there, here):
            method.config = dataclasses.replace(method.config, decode=decode)
        ours, _, _ = predict_moments(there, test, trainer.data.read_features, device=device)
        cpu, _, _ = predict_moments(here, test, trainer.data.read_features, device="cpu")
        # regressed boundaries differ in float rounding: a top span is the same within 1 ms
        same_top = np.mean([max(abs(a - b) for a, b in zip(ours[q][0][:2], cpu[q][0][:2])) < 1e-3
                            for q in cpu if cpu[q] and ours[q]])
        pairs = [(a, b) for q in cpu for a, b in zip(ours[q], cpu[q])]
        seconds = max(max(abs(a[0] - b[0]), abs(a[1] - b[1])) for a, b in pairs)
        diff = max(abs(a[2] - b[2]) for a, b in pairs)
        out[decode] = {"queries": len(cpu), "same_top_span_share": float(same_top), "max_score_abs_diff": float(diff),
                       "max_boundary_abs_diff_s": float(seconds)}
        print(f"{decode}: same top span {100 * same_top:.1f} %, max score diff {diff:.2e}, "
              f"max boundary diff {seconds:.2e} s", flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--videos", default="64,8,8", help="train, val, test videos of 1 to 3 minutes")
    parser.add_argument("--steps", type=int, default=30, help="timed device steps")
    parser.add_argument("--cpu-steps", type=int, default=3, help="timed CPU steps")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--text-model", type=Path, default=None)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    device = torch.device(args.device)
    text_model = random_text_model(args.text_model) if args.text_model else None
    record: dict[str, Any] = {"benchmark": "moment_head_device", "device": str(device),
                              "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
                              "torch": torch.__version__, "random_text_weights": text_model is not None,
                              "command": " ".join(sys.argv), "date": time.strftime("%Y-%m-%d")}
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        make_set(root, tuple(int(v) for v in args.videos.split(",")))
        for name, step in (("parity", lambda: parity(root, device, text_model)),
                           ("speed", lambda: speed(root, device, args.steps, args.cpu_steps, text_model)),
                           ("end_to_end", lambda: end_to_end(root, device, args.epochs, text_model))):
            started = time.perf_counter()
            try:
                record[name] = step()
            except Exception as exc:  # one failing step is reported and the next one runs
                record[name] = {"error": f"{type(exc).__name__}: {exc}"}
                import traceback

                traceback.print_exc()
            print(f"== {name} ({time.perf_counter() - started:.0f} s): {json.dumps(record[name])}", flush=True)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
