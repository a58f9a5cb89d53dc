"""Benchmark: training throughput of 1 process vs `torchrun` with N processes (DDP, gloo on CPU).

    python bench/distributed.py [--manifest /tmp/vt/synth/manifest.json] [--steps 6] [--batch 32]
                                [--procs 1 2] [--out bench/results/distributed.json]

Trains `dual` (packaged config dual/synthetic, text encoder fine-tuned so every step does
real work) for `--steps` optimizer steps of the same global batch at each world size,
launched as `torchrun --standalone --nproc-per-node N bench/distributed.py --worker …`,
and times the steps after the first (model loading, the first step's allocations and
the validation are left out). Prints examples/s and the ratio to one process; also one
process with as many threads as the N-process run has cores.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def worker(args: argparse.Namespace) -> None:
    """One rank: train for args.steps steps, rank 0 writes the timing JSON."""
    from videotext.config import PACKAGED, load_config
    from videotext.train.trainer import Trainer

    features = args.features or str(Path(args.manifest).parent / "features")
    config = load_config(PACKAGED / "dual" / "synthetic.yaml", [
        f"data.manifest={args.manifest}", f"data.features={features}", "model.freeze_text=false",
        f"train.batch_size={args.batch}", "train.epochs=1", "train.device=cpu", f"train.threads={args.threads}",
        "schedule.warmup_steps=0", f"train.global_negatives={args.global_negatives}"])
    stamps: list[float] = []
    trainer = Trainer(config, args.run_dir, progress=False, stop_after_steps=args.steps,
                      on_step=lambda step, parts: stamps.append(time.perf_counter()))
    trainer.fit()
    if trainer.rank == 0:
        steps = len(stamps) - 1
        seconds = stamps[-1] - stamps[0]
        Path(args.result_file).write_text(json.dumps({
            "world_size": trainer.world, "threads_per_process": args.threads, "global_batch": args.batch,
            "timed_steps": steps, "seconds": seconds, "steps_per_s": steps / seconds,
            "examples_per_s": steps * args.batch / seconds}))


def launch(procs: int, threads: int, args: argparse.Namespace, scratch: Path) -> dict:
    result = scratch / f"p{procs}_t{threads}.json"
    run = scratch / f"run_p{procs}_t{threads}"
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={procs}",
               __file__, "--worker", "--manifest", args.manifest, "--steps", str(args.steps),
               "--batch", str(args.batch), "--threads", str(threads), "--run-dir", str(run),
               "--result-file", str(result),
               "--global-negatives", args.global_negatives]
    if args.features:
        command += ["--features", args.features]
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads), "HF_HUB_OFFLINE": "1"}
    subprocess.run(command, check=True, env=env, cwd=ROOT, stdout=subprocess.DEVNULL)
    return json.loads(result.read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--manifest", default="/tmp/vt/synth/manifest.json")
    parser.add_argument("--features", default="")
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--procs", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--global-negatives", default="true")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "distributed.json"))
    parser.add_argument("--worker", action="store_true")
    parser.add_argument("--run-dir", default="")
    parser.add_argument("--result-file", default="")
    args = parser.parse_args()
    if args.worker:
        return worker(args)
    rows = []
    with tempfile.TemporaryDirectory(prefix="vt-bench-dist-") as tmp:
        for procs in args.procs:
            rows.append(launch(procs, args.threads, args, Path(tmp)))
        most = max(args.procs)
        if most > 1:  # the fair single-process baseline: as many threads as the DDP run has processes
            rows.append(launch(1, most * args.threads, args, Path(tmp)))
    base = rows[0]["examples_per_s"]
    for row in rows:
        row["ratio_to_1_process"] = row["examples_per_s"] / base
        print(f"{row['world_size']} process(es) x {row['threads_per_process']} thread(s): "
              f"{row['examples_per_s']:.1f} examples/s ({row['steps_per_s']:.2f} steps/s, "
              f"global batch {row['global_batch']}), x{row['ratio_to_1_process']:.2f}")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"rows": rows, "cpu_count": os.cpu_count()}, indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
