"""Action-step localization, CrossTask protocol (Zhukov et al. 2019; ToCo §5.2, Table 3).

Given a video and its task's ordered steps, every step text is scored against every
second of the video (a feature window centred on that second), one time step is
predicted per step, and a step counts as *recalled* when its predicted second lies in a
ground-truth interval of that step. As in CrossTask's ``read_assignment`` the
ground truth of an interval [start, end] is the seconds ⌊start⌋ … ⌈end⌉−1; only steps
with an interval in the video count. Recall is pooled over the steps of a task's
videos, then averaged over tasks (``recall``, the number of Table 3); ``step_recall``
pools every step of every video. A video's task is ``meta["task"]`` (CrossTask) or the
video itself (the synthetic data, where each video has its own ordered steps).

Decoding: ``"ordered"`` (default, CrossTask's evaluation) picks one second per step with
strictly increasing seconds in step order, maximising the summed scores (CrossTask's
dynamic program with ``exactly_one``); ``"argmax"`` takes each step's best second on its
own. Scores are log-softmax-normalised over the steps at each second first, as
CrossTask does with its network's outputs (``normalize="none"`` keeps raw scores).

The scorer is the method's own: `full_similarity` when it has one (ToCo's fusion
encoder f + λ·f^t on every (step, window) pair), else `similarity` (the dual encoder's
dot product). Baselines: ``chance`` = the expected recall of a uniformly random second
per step; ``uniform`` = CrossTask's ``uniform_assignment`` (steps spread evenly in order).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import torch

from videotext.data.loaders import VideoFeatures
from videotext.data.schema import Video, VideoTextDataset
from videotext.errors import VideoTextError
from videotext.encode import encode_texts, encode_videos
from videotext.models.base import Embedding, Method

DECODINGS = ("ordered", "argmax")
NORMALIZATIONS = ("log_softmax", "none")
_SEP = "\x00window:"  # feature keys of windows: "<video key>\x00window:<second>"


# --- ground truth and decoding ---------------------------------------------------------
def video_steps(video: Video) -> list[str]:
    """The ordered step list: the task's (``meta["steps"]``), else the distinct segment sentences in time order."""
    if video.meta.get("steps"):
        return [str(s) for s in video.meta["steps"]]
    steps: list[str] = []
    for segment in video.sorted_segments():
        if segment.sentence not in steps:
            steps.append(segment.sentence)
    return steps


def ground_truth(video: Video, steps: Sequence[str], num_seconds: int) -> np.ndarray:
    """[T, K] bool: second t lies in an interval of step k (CrossTask: ⌊start⌋ ≤ t < ⌈end⌉)."""
    truth = np.zeros((num_seconds, len(steps)), dtype=bool)
    index = {s: k for k, s in enumerate(steps)}
    for segment in video.segments:
        if segment.sentence in index:
            truth[int(math.floor(segment.start)) : int(math.ceil(segment.end)), index[segment.sentence]] = True
    return truth


def decode_argmax(scores: np.ndarray) -> np.ndarray:
    """[T, K] scores → [K] the best second of each step on its own."""
    return np.asarray(scores).argmax(0)


def decode_ordered(scores: np.ndarray) -> np.ndarray:
    """[T, K] scores → [K] seconds t_1 < … < t_K maximising Σ_k scores[t_k, k] (CrossTask's DP).

    Needs T ≥ K; with fewer seconds than steps it falls back to `decode_argmax`.
    """
    scores = np.asarray(scores, dtype=np.float64)
    seconds, steps = scores.shape
    if steps == 0:
        return np.zeros(0, dtype=np.int64)
    if seconds < steps:
        return decode_argmax(scores)
    best = np.full((steps, seconds), -np.inf)  # best[k, t]: steps 0..k placed, step k at t
    back = np.zeros((steps, seconds), dtype=np.int64)  # the second of step k-1 behind best[k, t]
    best[0] = scores[:, 0]
    for k in range(1, steps):
        running, arg = -np.inf, -1
        for t in range(k, seconds):
            if best[k - 1, t - 1] > running:  # prefix maximum over t' < t (first maximum on ties)
                running, arg = best[k - 1, t - 1], t - 1
            best[k, t], back[k, t] = running + scores[t, k], arg
    out = np.zeros(steps, dtype=np.int64)
    out[-1] = int(np.argmax(best[-1]))
    for k in range(steps - 1, 0, -1):
        out[k - 1] = back[k, out[k]]
    return out


def uniform_assignment(num_seconds: int, num_steps: int) -> np.ndarray:
    """[K] CrossTask's uniform baseline: step k at round(T/K · (k + ½))."""
    size = num_seconds / max(num_steps, 1)
    return np.array([min(round(size * (k + 0.5)), num_seconds - 1) for k in range(num_steps)], dtype=np.int64)


# --- the metric --------------------------------------------------------------------------
def step_hits(truth: np.ndarray, predicted: np.ndarray) -> np.ndarray:
    """[K] 1.0 where step k's predicted second is in its ground truth (truth [T, K], predicted [K])."""
    return truth[np.asarray(predicted), np.arange(truth.shape[1])].astype(np.float64)


def chance_hits(truth: np.ndarray) -> np.ndarray:
    """[K] expected hits of a uniformly random second per step: |GT seconds of k| / T."""
    return truth.mean(0) if truth.shape[0] else np.zeros(truth.shape[1])


def average_recall(groups: Sequence[str], hits: Sequence[np.ndarray], truths: Sequence[np.ndarray]) -> dict[str, Any]:
    """CrossTask's recall (percent): per group (task) Σ hits / Σ annotated steps, averaged over groups.

    `hits[i]` [K_i] are a video's (possibly expected) hits, `truths[i]` [T_i, K_i] its
    ground truth; steps without an interval in the video are not counted.
    """
    matched: dict[str, float] = {}
    total: dict[str, int] = {}
    for group, hit, truth in zip(groups, hits, truths):
        counted = truth.any(0)  # [K]
        matched[group] = matched.get(group, 0.0) + float(np.asarray(hit)[counted].sum())
        total[group] = total.get(group, 0) + int(counted.sum())
    per_group = {g: 100.0 * matched[g] / n for g, n in total.items() if n}
    steps = sum(total.values())
    return {
        "recall": float(np.mean(list(per_group.values()))) if per_group else float("nan"),
        "step_recall": 100.0 * sum(matched.values()) / steps if steps else float("nan"),
        "n_steps": steps, "n_videos": len(list(groups)), "n_groups": len(per_group), "per_group": per_group,
    }


# --- per-second windows of a FeatureStore ----------------------------------------------
def window_key(key: str, second: int) -> str:
    return f"{key}{_SEP}{second}"


class WindowStore:
    """A FeatureStore look-alike whose keys are per-second windows of the real store's videos.

    Window t of a video holds the steps whose timestamps fall in
    [t + ½ − w/2, t + ½ + w/2) (w = `window` seconds; CrossTask: one feature per
    second); a window with no step there takes the step nearest to its centre.
    """

    def __init__(self, store: Any, window: float = 1.0):
        if window <= 0:
            raise VideoTextError(f"localization window: expected a positive number of seconds, got {window}")
        self.store, self.window = store, float(window)

    def dim(self, expert: str) -> int:
        return int(self.store.dim(expert))

    def _split(self, key: str) -> tuple[str, int]:
        video_key, second = key.rsplit(_SEP, 1)
        return video_key, int(second)

    def has(self, expert: str, key: str) -> bool:
        return self.store.has(expert, self._split(key)[0])

    def is_missing(self, expert: str, key: str) -> bool:
        return self.store.is_missing(expert, self._split(key)[0])

    def get(self, expert: str, key: str) -> tuple[np.ndarray, np.ndarray]:
        video_key, second = self._split(key)
        values, times = self.store.get(expert, video_key)  # [N, D], [N]
        times = np.asarray(times, dtype=np.float64).reshape(-1)
        if len(times) != len(values) or not len(values):  # no timestamps: nothing to window
            return values, times
        centre = second + 0.5
        keep = np.flatnonzero((times >= centre - self.window / 2) & (times < centre + self.window / 2))
        if not len(keep):
            keep = np.array([int(np.argmin(np.abs(times - centre)))])
        return values[keep], times[keep]

    def num_seconds(self, video: Video, experts: Sequence[str]) -> int:
        """T: ⌈duration⌉ when known, else one past the last feature timestamp's second."""
        if video.duration:
            return max(1, int(math.ceil(video.duration)))
        last = 0.0
        for expert in experts:
            if self.store.has(expert, video.key):
                times = np.asarray(self.store.get(expert, video.key)[1]).reshape(-1)
                last = max(last, float(times.max()) if len(times) else 0.0)
        return int(math.floor(last)) + 1


# --- scoring and the whole protocol ----------------------------------------------------
def _rows(embedding: Embedding, start: int, stop: int) -> Embedding:
    if isinstance(embedding, dict):
        return {k: v[start:stop] for k, v in embedding.items()}
    return embedding[start:stop]


def _take(embedding: Embedding, index: Sequence[int]) -> Embedding:
    index_t = torch.as_tensor(list(index), dtype=torch.long)
    if isinstance(embedding, dict):
        return {k: v[index_t] for k, v in embedding.items()}
    return embedding[index_t]


@torch.inference_mode()
def pair_scores(method: Method, text: Embedding, video: Embedding) -> torch.Tensor:
    """[n_text, n_video] scores of every pair by the method's exact scorer (see module docstring)."""
    scorer = getattr(method, "full_similarity", None) or method.similarity
    return scorer(text, video).float()


@dataclass
class VideoLocalization:
    """One video's steps, scores [T, K], ground truth [T, K] and predicted second per step [K]."""

    video_id: str
    group: str
    steps: list[str]
    scores: np.ndarray
    truth: np.ndarray
    predicted: np.ndarray


def localize(
    method: Method, dataset: VideoTextDataset, store: Any, experts: Sequence[str], max_steps: int = 48,
    window: float = 1.0, decoding: str = "ordered", normalize: str = "log_softmax",
    batch_size: int = 256, device: Any = "cpu",
) -> tuple[dict[str, Any], list[VideoLocalization]]:
    """Localize every video's steps; returns (metrics with baselines, per-video results).

    Videos without steps are skipped. `store` is the run's FeatureStore; `max_steps`
    caps the steps per window (the run's ``data.max_steps_per_expert``).
    """
    if decoding not in DECODINGS:
        raise VideoTextError(f"localization decoding: expected one of {DECODINGS}, got {decoding!r}")
    if normalize not in NORMALIZATIONS:
        raise VideoTextError(f"localization normalize: expected one of {NORMALIZATIONS}, got {normalize!r}")
    if method.video_inputs != "features" or store is None:
        raise VideoTextError(f"localization scores feature windows; method {method.name!r} reads "
                             f"{method.video_inputs} (use a method trained on expert features)")
    windows = WindowStore(store, window)
    videos = [v for v in dataset if video_steps(v)]
    if not videos:
        raise VideoTextError(f"{dataset.name}: no video has steps (timed segments) to localize")
    seconds = [windows.num_seconds(v, experts) for v in videos]
    window_videos = [Video(id=window_key(v.id, t), feature_key=window_key(v.key, t))
                     for v, n in zip(videos, seconds) for t in range(n)]
    window_set = VideoTextDataset(f"{dataset.name}:windows", window_videos)
    texts = sorted({s for v in videos for s in video_steps(v)})
    text_row = {s: i for i, s in enumerate(texts)}
    was_training = method.training
    method.eval()
    try:
        reader = VideoFeatures(windows, experts, max_steps)
        video_emb = encode_videos(method, window_set, reader, batch_size, device)
        text_emb = encode_texts(method, texts, batch_size, device)
        results, offset = [], 0
        for video, n in zip(videos, seconds):
            steps = video_steps(video)
            scores = pair_scores(method, _take(text_emb, [text_row[s] for s in steps]),
                                 _rows(video_emb, offset, offset + n)).T  # [T, K]
            offset += n
            if normalize == "log_softmax":
                scores = torch.log_softmax(scores, dim=1)
            scores_np = scores.cpu().numpy()
            predicted = decode_ordered(scores_np) if decoding == "ordered" else decode_argmax(scores_np)
            results.append(VideoLocalization(video.id, str(video.meta.get("task", video.id)), steps, scores_np,
                                             ground_truth(video, steps, n), predicted))
    finally:
        method.train(was_training)
    return summarize(results, decoding, normalize, window), results


def summarize(results: Sequence[VideoLocalization], decoding: str = "ordered", normalize: str = "log_softmax",
              window: float = 1.0) -> dict[str, Any]:
    """Recall of the predictions and of the two baselines, plus the protocol settings."""
    groups = [r.group for r in results]
    truths = [r.truth for r in results]
    model = average_recall(groups, [step_hits(r.truth, r.predicted) for r in results], truths)
    chance = average_recall(groups, [chance_hits(r.truth) for r in results], truths)
    uniform = average_recall(groups, [step_hits(r.truth, uniform_assignment(*r.truth.shape)) for r in results],
                             truths)
    per_group = model.pop("per_group")
    return {"localization": model, "chance": {k: v for k, v in chance.items() if k != "per_group"},
            "uniform": {k: v for k, v in uniform.items() if k != "per_group"}, "per_group": per_group,
            "decoding": decoding, "normalize": normalize, "window": window}
