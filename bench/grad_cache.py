"""Benchmark: the memory of a contrastive step at batch 512 against batch 64, chunked (`train.chunk`).

Each step runs in a fresh process (one training step of a method built in place, fp32, on the
CPU): the method and the batch's inputs are made first, then the step runs while a thread reads
the process's resident memory every millisecond. The figure is the step's peak above the
resident memory just before it, i.e. the memory beyond the model and the inputs (the inputs of
512 rows stay in memory whole, as in the paper's Gradient Cache). glibc is told to hand every
block over 64 KiB back to the kernel when freed (MALLOC_MMAP_THRESHOLD_), so resident memory
follows what is alive. Prints, per method: the peak at batch 64 and at 512 with the same chunk,
their ratio (the aim: at most 1.3), the peak of the plain full-batch step at 64 (and at 512 with
`--plain-512`) and the seconds of each step.

Methods: `frozen` (the `small` preset, 64×64 frames, 4 frames a clip, its MiniLM text tower
trained, as the paper trains its text tower) and `dual` (MiniLM trained, the demo's three
experts, 6 steps each).

    python bench/grad_cache.py                        # both methods, chunk 32, batches 64 and 512
    python bench/grad_cache.py --methods frozen --chunk 16 --plain-512
    python bench/grad_cache.py --device cuda --methods frozen --preset base   # the paper's ViT-B/16 on a GPU

On a machine without the packaged MiniLM, `--text-model DIR` names a folder with its config and tokenizer;
seeded random weights of that architecture are written there when it has none (memory and time depend
on shapes, not values).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import threading
import time
from pathlib import Path

CAPTION_WORDS = "a red blue green circle square star moves left right up down grows spins then vanishes".split()


def _resident_bytes() -> int:
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _captions(count: int) -> list[str]:
    import random

    rng = random.Random(0)
    return [" ".join(rng.choice(CAPTION_WORDS) for _ in range(rng.randint(4, 12))) + f" {i}" for i in range(count)]


def _method_and_batch(name: str, batch: int, preset: str = "small", text_model: str = ""):
    import numpy as np
    import torch

    from videotext.data.loaders import collate_video_features
    from videotext.models import build_method
    from videotext.models.frozen import PRESETS

    torch.manual_seed(0)
    if name == "frozen":
        method = build_method("frozen", {"preset": preset, "num_frames": 4, "text_model": text_model})
        size = PRESETS[preset]["img_size"]
        video = {"frames": torch.randn(batch, 4, 3, size, size)}
    elif name == "dual":
        dims = {"appearance": 1280, "motion": 80, "audio": 128}
        method = build_method("dual", {"text_model": text_model}, expert_dims=dims)
        rng = np.random.RandomState(0)
        video = collate_video_features([{e: rng.randn(6, d).astype(np.float32) for e, d in dims.items()}
                                        for _ in range(batch)], list(dims))
    else:
        raise SystemExit(f"unknown method {name!r}: frozen or dual")
    return method.train(), {"text": method.prepare_text(_captions(batch)), "video": video}


def measure_step(name: str, batch: int, chunk: int, device: str = "cpu", preset: str = "small",
                 text_model: str = "") -> dict:
    """One step in this process: peak resident bytes above the level before it (on a GPU: the peak of
    torch's allocated memory above it, under bf16 autocast), and its seconds."""
    import contextlib
    import gc

    import torch

    from videotext.train.grad_cache import chunked_backward

    torch.set_num_threads(1)
    method, inputs = _method_and_batch(name, batch, preset, text_model)
    if device != "cpu":
        return _measure_on_gpu(method, inputs, name, batch, chunk, torch.device(device))
    gc.collect()
    before = _resident_bytes()
    peak = [before]
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], _resident_bytes())
            time.sleep(0.001)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    start = time.perf_counter()
    if chunk:
        loss = chunked_backward(method, inputs, chunk, scale=lambda value: value)["loss"]
    else:
        loss = method.loss(inputs)["loss"]
        loss.backward()
    seconds = time.perf_counter() - start
    done.set()
    sampler.join()
    peak[0] = max(peak[0], _resident_bytes())
    return {"method": name, "batch": batch, "chunk": chunk, "peak_mib": (peak[0] - before) / 2**20,
            "seconds": seconds, "loss": float(loss)}


def _measure_on_gpu(method, inputs, name: str, batch: int, chunk: int, device) -> dict:
    import torch

    from videotext.runtime import to_device
    from videotext.train.grad_cache import chunked_backward

    method.to(device)
    inputs = to_device(inputs, device)
    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    before = torch.cuda.memory_allocated(device)
    start = time.perf_counter()
    with torch.autocast("cuda", dtype=torch.bfloat16):
        if chunk:
            loss = chunked_backward(method, inputs, chunk, scale=lambda value: value,
                                    autocast=lambda: torch.autocast("cuda", dtype=torch.bfloat16))["loss"]
        else:
            loss = method.loss(inputs)["loss"]
    if not chunk:
        loss.backward()
    torch.cuda.synchronize(device)
    seconds = time.perf_counter() - start
    peak = torch.cuda.max_memory_allocated(device) - before
    parameters = sum(p.numel() for p in method.parameters())
    return {"method": name, "batch": batch, "chunk": chunk, "peak_mib": peak / 2**20, "seconds": seconds,
            "loss": float(loss), "device": torch.cuda.get_device_name(device), "parameters": parameters,
            "model_and_inputs_mib": before / 2**20}


def random_text_model(folder: Path) -> str:
    """`folder` (a BERT-family config and tokenizer) with seeded random weights written once."""
    if not any(folder.glob("*.safetensors")):
        import torch
        from transformers import AutoConfig, AutoModel

        torch.manual_seed(0)
        AutoModel.from_config(AutoConfig.from_pretrained(folder)).save_pretrained(folder)
    return str(folder)


def run_child(name: str, batch: int, chunk: int, device: str = "cpu", preset: str = "small",
              text_model: str = "") -> dict:
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536", "OMP_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, __file__, "--child", name, str(batch), str(chunk), device, preset,
                          *(["--text-model", text_model] if text_model else [])],
                         env=env, capture_output=True, text=True, check=False)
    if out.returncode:
        raise SystemExit(f"{name} batch {batch} chunk {chunk} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--methods", nargs="+", default=["frozen", "dual"])
    parser.add_argument("--chunk", type=int, default=32)
    parser.add_argument("--small", type=int, default=64)
    parser.add_argument("--large", type=int, default=512)
    parser.add_argument("--plain-512", action="store_true", help="also the plain step at the large batch")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "grad_cache.json")
    parser.add_argument("--device", default="cpu", help="cpu (resident memory) or cuda (torch's peak, bf16)")
    parser.add_argument("--preset", default="small", help="Frozen's video tower: small (CPU) or base (the paper's)")
    parser.add_argument("--text-model", type=Path, default=None,
                        help="a MiniLM config + tokenizer folder (random weights) in place of the packaged MiniLM")
    parser.add_argument("--child", nargs=5, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        name, batch, chunk, device, preset = args.child
        print(json.dumps(measure_step(name, int(batch), int(chunk), device, preset, str(args.text_model or ""))))
        return {}

    from videotext.io import write_json

    results = {"benchmark": "peak memory of a step beyond the model and inputs, chunked vs batch size",
               "chunk": args.chunk, "device": args.device, "preset": args.preset,
               "text_model": str(args.text_model or "bundled"), "machine": platform.processor() or platform.machine(), "methods": {}}
    text_model = random_text_model(args.text_model) if args.text_model else ""
    for name in args.methods:
        where = (args.device, args.preset, text_model)
        rows = {"chunked_small": run_child(name, args.small, args.chunk, *where),
                "chunked_large": run_child(name, args.large, args.chunk, *where),
                "plain_small": run_child(name, args.small, 0, *where)}
        if args.plain_512:
            rows["plain_large"] = run_child(name, args.large, 0, *where)
        ratio = rows["chunked_large"]["peak_mib"] / rows["chunked_small"]["peak_mib"]
        results["methods"][name] = {**rows, "large_over_small": ratio}
        print(f"{name}: chunk {args.chunk}: batch {args.small} {rows['chunked_small']['peak_mib']:.1f} MiB "
              f"({rows['chunked_small']['seconds']:.2f} s), batch {args.large} {rows['chunked_large']['peak_mib']:.1f} MiB "
              f"({rows['chunked_large']['seconds']:.2f} s): ×{ratio:.2f}; plain step at {args.small}: "
              f"{rows['plain_small']['peak_mib']:.1f} MiB ({rows['plain_small']['seconds']:.2f} s)"
              + (f", at {args.large}: {rows['plain_large']['peak_mib']:.1f} MiB ({rows['plain_large']['seconds']:.2f} s)"
                 if args.plain_512 else ""))
    write_json(args.out, results)
    print(f"wrote {args.out}")
    return results


if __name__ == "__main__":
    main()
