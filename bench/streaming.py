"""Benchmark: training data streamed from WebDataset shards over HTTP against the same data read
from a folder, for features and for pixels (the media files), and peak memory at 1× and 10× the data.

    python bench/streaming.py [--manifest data/synthetic-2000-seed0/manifest.json] [--copies 10]

The data: the benchmark's synthetic set (2000 videos, `videotext benchmark run synthetic` makes it)
and its features, or `--videos` new synthetic videos with features extracted here when that set is
absent; written as shards (`videotext dataset shard`, 64 MB each at most) of features and of media.
A local HTTP server (`python -m http.server` in its own process, loopback) serves the shard folder. Each figure is one
pass over every sample, in one process, in alternating order, best of `--rounds`:
- features: the shard stream (`SlotStream` over HTTP, decoded to arrays) against the same shards
  read from the folder, and against the feature store itself (`VideoFeatures`, what training on
  data.manifest reads);
- the training reader itself (`ShardBatches`, 2 loader worker processes, batches of 50) over the
  same features in 16 MB shards, from HTTP and from the folder;
- pixels: media shards over HTTP against the video files in the folder, every frame of each of the
  first `--pixel-videos` videos decoded (PyAV) to RGB arrays: what a pixel method's loader does.
Memory: a fresh process streams the feature shards once at 1× and once at `--copies`× the data
(the shards repeated); its resident set size before the pass and the most it reached during it
(sampled every 200 samples) are printed for both.

`--faults` measures memory only, under faults: the feature shards (`--fault-shard-size`, 4 MB, so
that faults spread over many shards) served by tests/shard_server.py in this process, streamed over
HTTP by a fresh process at 1× and `--copies`× the data, clean and then with every shard spoilt once,
in turn by a dropped connection (half the body sent, then closed), an HTTP 500 and a stall (a quarter
of the body, then `--stall` s of silence, past the reader's `--read-timeout`); the reader retries
(3 retries, 0.05 s backoff). The machine's load average is printed beside each figure.

    python bench/streaming.py --faults --videos 300
"""
from __future__ import annotations

import argparse
import io
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

EXPERTS = ["appearance", "motion", "audio"]


def rss_mb() -> float:
    """This process's resident set size now (MB), from /proc."""
    with open("/proc/self/status", encoding="ascii") as status:
        line = next(line for line in status if line.startswith("VmRSS:"))
    return int(line.split()[1]) / 1024


def stream_pass(pattern: str, experts: list[str], limit: int, every=None, retry=None) -> tuple[int, int]:
    """(samples, bytes) of one pass over the shards (their `limit` samples), each sample decoded;
    `every()` is called each 200 samples (the memory probe); `retry`: the reader's (default Retry())."""
    from videotext.data.streaming import Retry, SlotStream, decode_sample, expand

    urls = expand(pattern)
    needs = ["json", *[f"{e}.npy" for e in experts], *[f"{e}.times.npy" for e in experts]] if experts else ["json"]
    stream = iter(SlotStream(urls, {}, needs, seed=0, epoch=0, slot=0, slots=1, buffer=100, retry=retry or Retry(),
                             failures=None))
    count, size = 0, 0
    while count < limit:
        sample = next(stream)
        count += 1
        if every is not None and count % 200 == 0:
            every()
        size += sum(len(v) for k, v in sample.items() if not k.startswith("__"))
        if experts:
            decode_sample(sample, experts)
        else:
            media = next(k for k in sample if k not in ("json", "__key__"))
            decoded_frames(io.BytesIO(sample[media]))
    return count, size


def decoded_frames(source) -> int:
    """Every frame of one video decoded to an RGB array (a path or a file object)."""
    import av

    with av.open(source) as container:
        return sum(frame.to_ndarray(format="rgb24").size > 0 for frame in container.decode(video=0))


class FolderServer:
    """`python -m http.server` serving a folder on loopback, in its own process (as a real server
    would be: in this one it would take the GIL from the reader it is measured against)."""

    def __init__(self, folder: Path):
        import socket

        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        self.process = subprocess.Popen([sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1",
                                         "--directory", str(folder)], stdout=subprocess.DEVNULL,
                                        stderr=subprocess.DEVNULL)
        self.url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError("http.server did not start")

    def close(self) -> None:
        self.process.terminate()
        self.process.wait()


def loader_pass(pattern: str, samples: int, workers: int = 2, batch: int = 50) -> int:
    """One epoch of `ShardBatches` with `workers` loader processes (what training reads), decoded."""
    from videotext.data.streaming import FeatureDecoder, ShardBatches

    batches = ShardBatches(pattern, FeatureDecoder(EXPERTS), assemble=lambda items, epoch: {}, batch_size=batch,
                           samples_per_epoch=samples, seed=0, workers=workers, buffer=100)
    return sum(len(batches.batch(0, index)["video_ids"]) for index in range(batches.epoch_length(0)))


def timed(function, *args) -> tuple[float, object]:
    started = time.perf_counter()
    result = function(*args)
    return time.perf_counter() - started, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--manifest", type=Path, default=HERE.parent / "data" / "synthetic-2000-seed0" / "manifest.json")
    parser.add_argument("--videos", type=int, default=500)
    parser.add_argument("--pixel-videos", type=int, default=200)
    parser.add_argument("--copies", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--memory-child", nargs="+", help=argparse.SUPPRESS)  # PATTERN LIMIT [READ_TIMEOUT]
    parser.add_argument("--faults", action="store_true", help="Memory under faults only (see above).")
    parser.add_argument("--fault-shard-size", default="4MB")
    parser.add_argument("--stall", type=float, default=3.0)
    parser.add_argument("--read-timeout", type=float, default=1.0)
    parser.add_argument("--out", type=Path, default=HERE / "results" / "streaming.json")
    args = parser.parse_args()
    if args.memory_child:  # a fresh process: stream once, print the peak RSS
        import videotext.data.streaming  # noqa: F401  (its imports counted before the pass)

        from videotext.data.streaming import Retry

        count_peak: list[float] = []
        before, peak = rss_mb(), 0.0
        retry = Retry(retries=3, backoff=0.05, timeout=float(args.memory_child[2])) if len(args.memory_child) > 2 else None
        count, _ = stream_pass(args.memory_child[0], EXPERTS, int(args.memory_child[1]),
                               every=lambda: None if count_peak.append(rss_mb()) else None, retry=retry)
        peak = max([*count_peak, rss_mb()])  # a short pass may end before its first probe
        print(json.dumps({"samples": count, "rss_before_mb": before, "peak_rss_mb": peak,
                          "max_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
        return

    if args.faults:
        return faults_main(args)
    from videotext.data.experts import extract_features
    from videotext.data.features import FeatureStore
    from videotext.data.loaders import VideoFeatures
    from videotext.data.schema import VideoTextDataset
    from videotext.data.shards import shard_dataset
    from videotext.data.synthetic import synthesize

    work = Path(tempfile.mkdtemp(prefix="bench-streaming-"))
    try:
        manifest = args.manifest
        if not manifest.is_file():
            synthesize(work / "synth", num_videos=args.videos, seed=0, progress=False)
            extract_features(work / "synth" / "manifest.json", EXPERTS, work / "synth" / "features", rate=1.0,
                             progress=False)
            manifest = work / "synth" / "manifest.json"
        store = manifest.parent / "features"
        full = VideoTextDataset.load(manifest)
        pixel_manifest = work / "pixels.json"  # the first --pixel-videos videos, for the pixel passes
        full.subset([v.id for v in list(full)[: args.pixel_videos]]).save(pixel_manifest)
        served = work / "served"
        features = shard_dataset(manifest, served / "features", "64MB", "features", store, EXPERTS, progress=False)
        media = shard_dataset(pixel_manifest, served / "media", "8MB", "media", progress=False)
        server = FolderServer(served)
        last = lambda index: f"{len(index['shards']) - 1:06d}"  # noqa: E731
        feature_http = f"{server.url}/features/shard-{{000000..{last(features)}}}.tar"
        feature_disk = f"{served}/features/shard-{{000000..{last(features)}}}.tar"
        media_http = f"{server.url}/media/shard-{{000000..{last(media)}}}.tar"
        # the training reader deals whole shards to its workers: the same features in 16 MB shards
        split = shard_dataset(manifest, served / "split", "16MB", "features", store, EXPERTS, progress=False)
        feature_http_split = f"{server.url}/split/shard-{{000000..{last(split)}}}.tar"
        feature_disk_split = f"{served}/split/shard-{{000000..{last(split)}}}.tar"
        reader = VideoFeatures(FeatureStore(store), EXPERTS, max_steps=1 << 30)
        pixels = VideoTextDataset.load(pixel_manifest)

        def store_pass() -> int:
            return sum(1 for video in full if reader(video.key) is not None)

        def files_pass() -> int:
            return sum(decoded_frames(pixels.media_path(video)) for video in pixels)

        best: dict[str, float] = {}
        for _ in range(args.rounds):
            total, videos = features["samples"], media["samples"]
            for name, run in (("features over HTTP", lambda: stream_pass(feature_http, EXPERTS, total)),
                              ("features, shards in a folder", lambda: stream_pass(feature_disk, EXPERTS, total)),
                              ("features, feature store", store_pass),
                              ("features over HTTP, 2 loader workers", lambda: loader_pass(feature_http_split, total)),
                              ("features in a folder, 2 loader workers", lambda: loader_pass(feature_disk_split, total)),
                              ("media over HTTP", lambda: stream_pass(media_http, [], videos)),
                              ("media files in a folder", files_pass)):
                seconds, _ = timed(run)
                best[name] = min(best.get(name, float("inf")), seconds)
        server.close()

        for copy in range(1, args.copies):  # the same shards again under new names: 10× the data
            for shard in features["shards"]:
                shutil.copy(served / "features" / shard["name"],
                            served / "features" / shard["name"].replace("shard-", f"copy{copy:02d}-"))
        one = feature_disk
        many = f"{served}/features/{{shard,{','.join(f'copy{c:02d}' for c in range(1, args.copies))}}}-{{000000..{last(features)}}}.tar"
        memory = {}
        for label, pattern, limit in (("1x", one, features["samples"]), (f"{args.copies}x", many, features["samples"] * args.copies)):
            done = subprocess.run([sys.executable, __file__, "--memory-child", pattern, str(limit)],
                                  capture_output=True, text=True, check=True)
            memory[label] = json.loads(done.stdout.strip().splitlines()[-1])
    finally:
        shutil.rmtree(work, ignore_errors=True)

    samples = features["samples"]
    rows = {name: {"seconds": round(s, 3), "videos_per_s": round((media["samples"] if "media" in name else samples) / s, 1)}
            for name, s in best.items()}
    ratios = {"features: HTTP / shards in a folder": best["features, shards in a folder"] / best["features over HTTP"],
              "features: HTTP / feature store": best["features, feature store"] / best["features over HTTP"],
              "media: HTTP / files in a folder": best["media files in a folder"] / best["media over HTTP"],
              "features, 2 loader workers: HTTP / folder": best["features in a folder, 2 loader workers"]
              / best["features over HTTP, 2 loader workers"]}
    report = {"machine": platform.processor() or platform.machine(), "videos": samples,
              "pixel_videos": media["samples"], "rounds": args.rounds,
              "feature_shards": len(features["shards"]), "media_shards": len(media["shards"]), "passes": rows,
              "throughput_ratios": {k: round(v, 3) for k, v in ratios.items()}, "peak_memory": memory}
    for name, row in rows.items():
        print(f"{name:40s} {row['seconds']:7.3f} s  {row['videos_per_s']:9.1f} videos/s")
    for name, ratio in ratios.items():
        print(f"{name:44s} {ratio:.2f}x")
    for label, row in memory.items():
        print(f"resident memory, {label} the data ({row['samples']} samples): {row['rss_before_mb']:.0f} MB before "
              f"the pass, at most {row['peak_rss_mb']:.0f} MB during it")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1))


def load_average() -> str:
    one, five, _ = os.getloadavg()
    return f"load average {one:.1f} (1 min), {five:.1f} (5 min) on {os.cpu_count()} cores"


def faults_main(args: argparse.Namespace) -> None:
    """Resident memory of the shard stream over HTTP, clean and under faults, at 1× and `--copies`×."""
    from tests.shard_server import ShardServer
    from videotext.data.experts import extract_features
    from videotext.data.shards import shard_dataset
    from videotext.data.synthetic import synthesize

    work = Path(tempfile.mkdtemp(prefix="bench-streaming-faults-"))
    memory: dict[str, dict] = {}
    try:
        manifest = args.manifest
        if not manifest.is_file():
            synthesize(work / "synth", num_videos=args.videos, seed=0, progress=False)
            extract_features(work / "synth" / "manifest.json", EXPERTS, work / "synth" / "features", rate=1.0,
                             progress=False)
            manifest = work / "synth" / "manifest.json"
        served = work / "served"
        shards = shard_dataset(manifest, served, args.fault_shard_size, "features", manifest.parent / "features",
                               EXPERTS, progress=False)
        names = [shard["name"] for shard in shards["shards"]]
        for copy in range(1, args.copies):  # the same shards again under new names: `--copies`× the data
            for name in names:
                shutil.copy(served / name, served / name.replace("shard-", f"copy{copy:02d}-"))
        server = ShardServer(served, stall_seconds=args.stall)
        last = f"{len(names) - 1:06d}"
        one = f"{server.url}/shard-{{000000..{last}}}.tar"
        many = f"{server.url}/{{shard,{','.join(f'copy{c:02d}' for c in range(1, args.copies))}}}-{{000000..{last}}}.tar"
        every = [path.name for path in sorted(served.glob("*.tar"))]
        try:
            for faulted in (False, True):
                for label, pattern, limit in (("1x", one, shards["samples"]),
                                              (f"{args.copies}x", many, shards["samples"] * args.copies)):
                    server.clear()
                    if faulted:
                        for number, name in enumerate(every):  # every shard spoilt once: drop, 500, stall in turn
                            server.fault(name, ("drop", "500", "slow")[number % 3])
                    started, load = time.perf_counter(), load_average()
                    done = subprocess.run([sys.executable, __file__, "--memory-child", pattern, str(limit),
                                           str(args.read_timeout)], capture_output=True, text=True)
                    if done.returncode:
                        raise RuntimeError(f"the streaming process failed:\n{done.stderr[-3000:]}")
                    row = json.loads(done.stdout.strip().splitlines()[-1])
                    spoilt = sum(1 for name in every if server.faults.get(name, [None, 0])[1] == 0) if faulted else 0
                    row.update(seconds=round(time.perf_counter() - started, 1), load_before=load,
                               load_after=load_average(), faults_served=spoilt)
                    memory[f"{'faults' if faulted else 'clean'} {label}"] = row
                    print(f"{'under faults' if faulted else 'clean':12s} {label:>4s} ({row['samples']} samples, "
                          f"{spoilt} shards spoilt): {row['rss_before_mb']:.0f} MB before, at most "
                          f"{row['peak_rss_mb']:.0f} MB during the pass ({row['seconds']} s; {load})", flush=True)
        finally:
            server.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    out = args.out.with_name("streaming_faults.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"machine": platform.processor() or platform.machine(), "shards": len(names),
                               "shard_size": args.fault_shard_size, "stall_s": args.stall,
                               "read_timeout_s": args.read_timeout, "peak_memory": memory}, indent=1))


if __name__ == "__main__":
    main()
