"""Benchmark: one query from a cold command, against importing torch, in one run.

    python bench/cold_query.py INDEX [--query TEXT] [--repeats 7] [--json bench/results/cold_query.json]

INDEX is a folder made by `videotext index build` (`make demo` leaves runs/demo/index). Each repeat
runs, as fresh processes and in alternating order: `videotext search INDEX QUERY` through the
query encoder the build exported (ONNX, no torch), the same search with the exported encoder set
aside (torch and transformers, as before the export), and `python -c "import torch"`. Printed:
each one's median wall time and the ratios of the two searches to the torch import.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

QUERY_FOLDER = "query_encoder"


def wall(command: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("index", type=Path)
    parser.add_argument("--query", default="a red circle moves left")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    if not (args.index / QUERY_FOLDER).is_dir():
        sys.exit(f"{args.index}: no exported query encoder (build the index again with this version)")
    videotext = [str(Path(sys.executable).with_name("videotext"))]
    if not Path(videotext[0]).is_file():
        videotext = [sys.executable, "-m", "videotext"]
    with tempfile.TemporaryDirectory() as scratch:
        plain = Path(scratch) / "index"  # the same index without its exported encoder (links, no copies)
        shutil.copytree(args.index, plain, ignore=shutil.ignore_patterns(QUERY_FOLDER), copy_function=os.link)
        commands = {
            "search (exported encoder)": [*videotext, "search", str(args.index), args.query, "-k", "10"],
            "search (torch)": [*videotext, "search", str(plain), args.query, "-k", "10"],
            "import torch": [sys.executable, "-c", "import torch"],
        }
        for command in commands.values():  # warm the page cache once
            wall(command)
        times: dict[str, list[float]] = {name: [] for name in commands}
        for repeat in range(args.repeats):
            for name in (list(commands) if repeat % 2 == 0 else list(reversed(commands))):
                times[name].append(wall(commands[name]))
    medians = {name: statistics.median(values) for name, values in times.items()}
    torch_import = medians["import torch"]
    for name, median in medians.items():
        print(f"{name:28s} median {median:6.2f} s  ({median / torch_import:.2f}x import torch)")
    result = {"index": str(args.index), "query": args.query, "repeats": args.repeats, "cpus": os.cpu_count(),
              "median_s": medians, "ratio_to_import_torch": {n: m / torch_import for n, m in medians.items()},
              "all_s": times}
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
