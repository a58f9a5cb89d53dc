"""Caption new videos with a trained run that has a caption decoder (Support-set, §6.5).

    from videotext.captioning import caption_videos
    caption_videos("runs/supportset", ["clip.mp4", "my_videos/"], beam_size=3)
    # → {"/abs/clip.mp4": "a red circle moves to the left", ...}

The video files are run through the run's own feature experts (with the extraction
settings of its training features), then decoded greedily (`beam_size=1`) or with beam
search. This is what `videotext caption RUN_DIR VIDEO…` calls.

The same run-level tools for a run's own data: `evaluate_run_captioning` (a split's
captioning scores → `report/captioning.json`) and `plot_support_attention` (the support-set
attention of one training batch, paper Fig. 3 → `report/support_attention.png`).
"""
from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from videotext.config import ConfigError
from videotext.data.readers._common import VIDEO_EXTENSIONS
from videotext.data.run_data import RunData
from videotext.data.schema import Video, VideoTextDataset
from videotext.data.synthetic.sharing import sharing_matrix
from videotext.errors import VideoTextError
from videotext.eval.captioning import evaluate_captioning
from videotext.eval.supportset_report import attention_stats, attention_title, save_attention_map, support_attention
from videotext.run_model import load_run as load_model
from videotext.io import write_json
from videotext.runtime import to_device


def _video_files(videos: Sequence[str | Path]) -> list[Path]:
    """Expand folders (recursively) and check that every path exists."""
    files: list[Path] = []
    for item in videos:
        path = Path(item)
        if path.is_dir():
            files.extend(sorted(f for f in path.rglob("*") if f.is_file() and f.suffix.lower() in VIDEO_EXTENSIONS))
        elif path.is_file():
            files.append(path)
        else:
            raise VideoTextError(f"{path}: no such video file or folder")
    if not files:
        raise VideoTextError(f"no video files in {[str(v) for v in videos]}")
    return [f.resolve() for f in dict.fromkeys(files)]


def caption_videos(run_dir: str | Path, videos: Sequence[str | Path], beam_size: int = 3,
                   checkpoint: str = "best", features_dir: str | Path | None = None,
                   max_len: int | None = None, device: str = "auto", progress: bool = False) -> dict[str, str]:
    """{absolute video path: generated caption} for video files and folders of them.

    `features_dir` keeps the extracted features (a temporary folder by default); a
    video that cannot be decoded is left out (see `<features_dir>/failures.jsonl`).
    """
    model = load_model(run_dir, checkpoint=checkpoint, device=device)
    if not hasattr(model.method, "caption") or getattr(model.method, "decoder", None) is None:
        raise VideoTextError(f"{run_dir}: method {model.config.method!r} has no caption decoder "
                             f"(train supportset with model.captioning other than 'none')")
    files = _video_files(videos)
    ids = {f"video{i:05d}": str(f) for i, f in enumerate(files)}  # store-safe keys (no slashes)
    dataset = VideoTextDataset("caption", [Video(id=k, path=p) for k, p in ids.items()], {"all": list(ids)})
    with tempfile.TemporaryDirectory(prefix="videotext-caption-") as tmp:
        reader = model.features_for(dataset, Path(features_dir) if features_dir else Path(tmp) / "features",
                                    progress=progress)
        present = [v.id for v in dataset if any(reader.store.has(e, v.key) for e in model.experts)]
        if not present:
            raise VideoTextError(f"none of the {len(files)} video(s) could be read")
        dataset = dataset.subset(present)
        out: dict[str, str] = {}
        for batch in model.method.video_batches(dataset, reader, 32):
            captions = model.method.caption(to_device(batch, model.device), beam_size=beam_size, max_len=max_len)
            out.update((ids[k], c) for k, c in zip(batch["video_ids"], captions))
    return out


def evaluate_run_captioning(run_dir: Any, split: str = "test", beam_size: int = 3, meteor: bool = True,
                            checkpoint: str = "best", device: str = "auto") -> dict[str, Any]:
    """Caption a run's `split` with its selected checkpoint and write `report/captioning.json`.

    For the eval report of runs whose method has a caption decoder (Support-set).
    """
    model = load_model(run_dir, checkpoint=checkpoint, device=device)
    if getattr(model.method, "decoder", None) is None:
        raise VideoTextError(f"{run_dir}: method {model.config.method!r} has no caption decoder")
    data = RunData(model.config)
    result = evaluate_captioning(model.method, data.split(split), data.read_features, beam_size, meteor, model.device)
    result["split"] = split
    (Path(run_dir) / "report").mkdir(parents=True, exist_ok=True)
    write_json(Path(run_dir) / "report" / "captioning.json", result)
    return result


def _supportset_train_batches(run_dir: Any, checkpoint: str) -> tuple[Any, list[Video], Any]:
    """A Support-set run's model, its training videos and their seeded training batches (epoch 0
    is the first epoch's order); any other method is a `ConfigError` naming the run."""
    model = load_model(run_dir, checkpoint=checkpoint, device="cpu")
    if model.config.method != "supportset":
        raise ConfigError(f"{run_dir}: a {model.config.method!r} run has no support-set attention")
    data = RunData(model.config)
    train = data.split(model.config.data.train_split)
    loader = model.method.train_batches(train, data.read_features, model.config.train.batch_size, model.config.train.seed)
    return model, train, loader


def support_attention_stats(run_dir: Any, batches: int = 5, checkpoint: str = "best") -> dict[str, Any]:
    """`attention_stats` of the first `batches` training batches of a Support-set run, mean and
    per batch; the event-sharing figures when the videos carry their events (synthetic sets)."""
    model, train, loader = _supportset_train_batches(run_dir, checkpoint)
    by_id = {v.id: v for v in train}
    per_batch = []
    for index in range(batches):
        batch = loader.batch(0, index)
        videos = [by_id[i] for i in batch["video_ids"]]
        shares = sharing_matrix(videos) if any(v.meta.get("events") for v in videos) else None
        per_batch.append(attention_stats(support_attention(model.method, batch, model.device), shares))
    return {"batches": per_batch, "mean": {k: float(np.mean([b[k] for b in per_batch])) for k in per_batch[0]}}


def plot_support_attention(run_dir: Any, out: Any = None, batch_index: int = 0, checkpoint: str = "best",
                           max_items: int = 32) -> Path:
    """Support-set attention map of one training batch (paper Fig. 3) → `report/support_attention.png`.

    Rows are captions, columns the videos they are reconstructed from; the first
    `max_items` pairs of the batch are shown.
    """
    model, _, loader = _supportset_train_batches(run_dir, checkpoint)
    weights = support_attention(model.method, loader.batch(0, batch_index), model.device)[:max_items, :max_items]
    out = Path(out) if out else Path(run_dir) / "report" / "support_attention.png"
    return save_attention_map(weights, out, attention_title(model.method.config))
