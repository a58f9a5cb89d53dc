"""Hierarchical batches for COOT: video → clips and paragraph → sentences.

Video side: the experts of a FeatureStore are put on one timeline (the expert with the
most steps; the others by nearest timestamp) and concatenated per step, so each frame
is one vector. A clip is the frames inside one of `Video.segments`; the whole video is
the global context. Each sequence keeps at most `max_frames` (COOT §4: 80): it is cut
into that many equal intervals and one frame is drawn uniformly per interval in
training, the centre frame in evaluation. ActivityNet clips are first expanded to at
least 10 frames (COOT supp. "Preprocessing").

Text side: the paragraph is fed whole to a frozen BERT-family model; the per-token
outputs of its last two layers are concatenated (COOT §4 "Text encoding") and split
back into sentences. Features are cached per paragraph (the model is frozen), or
precomputed into a FeatureStore expert (`precompute_paragraph_features`, or COOT's
own text h5 through `videotext import-features`) and read by `StoredParagraphFeatures`.

Batches are pure functions of (seed, epoch, index): the order and the frame draws
come from generators seeded with those values.
"""
from __future__ import annotations

import random
import re
from collections import OrderedDict
from typing import Any, Iterator, Sequence

import numpy as np
import torch

from videotext.data.loaders import SeededBatches
from videotext.data.schema import Video, VideoTextDataset
from videotext.errors import VideoTextError
from videotext.text.encoder import HFTextEncoder

_SENTENCE_END = re.compile(r"(?<=[.!?;])\s+")


def split_sentences(text: str) -> list[str]:
    """A free-text query → sentences (split after . ! ? ;); never empty."""
    parts = [p.strip() for p in _SENTENCE_END.split(text.strip()) if p.strip()]
    return parts or [text.strip() or "."]


def paragraph_sentences(video: Video) -> list[str]:
    """The video's segment sentences in time order (its paragraph); without segments,
    its first caption as one sentence (matching the one whole-video clip)."""
    segments = video.sorted_segments()
    if segments:
        return [s.sentence.strip() or "." for s in segments]
    return [video.captions[0].strip() or "."] if video.captions else ["."]


# --- video ------------------------------------------------------------------------
def frame_features(store: Any, experts: Sequence[str], dims: dict[str, int], key: str,
                   standardise: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """All experts of one video on one timeline: ([T, ΣD] float32, [T] seconds).

    `standardise` z-scores each expert's block per step, so experts on different scales
    (1280 logits vs. 80 flow values) weigh alike after the concatenation."""
    loaded = {}
    for expert in experts:
        if store.has(expert, key):
            values, times = store.get(expert, key)
            values = np.asarray(values, dtype=np.float32).reshape(-1, dims[expert])
            times = np.asarray(times, dtype=np.float64).reshape(-1)
            if len(times) != len(values):
                times = np.arange(len(values), dtype=np.float64)
            loaded[expert] = (values, times)
    if not loaded:
        return np.zeros((1, sum(dims[e] for e in experts)), np.float32), np.zeros(1)
    reference = max(loaded, key=lambda e: len(loaded[e][0]))
    timeline = loaded[reference][1]
    columns = []
    for expert in experts:
        if expert not in loaded or len(loaded[expert][0]) == 0:
            columns.append(np.zeros((len(timeline), dims[expert]), np.float32))
            continue
        values, times = loaded[expert]
        values = values[nearest_index(times, timeline)]
        if standardise:
            values = (values - values.mean(1, keepdims=True)) / (values.std(1, keepdims=True) + 1e-6)
        columns.append(values)
    return np.concatenate(columns, axis=1), timeline


def nearest_index(times: np.ndarray, queries: np.ndarray) -> np.ndarray:
    """Index of the entry of sorted `times` nearest to each query time."""
    right = np.clip(np.searchsorted(times, queries), 0, len(times) - 1)
    left = np.clip(right - 1, 0, len(times) - 1)
    return np.where(np.abs(times[left] - queries) <= np.abs(times[right] - queries), left, right)


def clip_frame_range(times: np.ndarray, start: float, end: float, min_frames: int = 1) -> tuple[int, int]:
    """[first, last) frame indices of a segment, expanded to `min_frames` by adding frames
    alternately at the start and the end (COOT supp. "Preprocessing")."""
    inside = np.flatnonzero((times >= start) & (times <= end))
    if len(inside):
        first, last = int(inside[0]), int(inside[-1]) + 1
    else:
        first = int(nearest_index(times, np.array([(start + end) / 2]))[0])
        last = first + 1
    total = len(times)
    grow_start = True
    while last - first < min(min_frames, total):
        if grow_start and first > 0:
            first -= 1
        elif last < total:
            last += 1
        elif first > 0:
            first -= 1
        grow_start = not grow_start
    return first, last


def sample_frames(length: int, max_frames: int, rng: np.random.Generator | None) -> np.ndarray:
    """≤ max_frames indices: one per equal interval, random (training) or centre (rng=None)."""
    if length <= max_frames:
        return np.arange(length)
    edges = np.linspace(0, length, max_frames + 1)
    if rng is None:
        picks = (edges[:-1] + edges[1:]) / 2
    else:
        picks = edges[:-1] + rng.random(max_frames) * (edges[1:] - edges[:-1])
    return np.clip(np.floor(picks).astype(np.int64), 0, length - 1)


def video_hierarchy(frames: np.ndarray, times: np.ndarray, video: Video, max_frames: int,
                    min_clip_frames: int, rng: np.random.Generator | None) -> tuple[np.ndarray, list[np.ndarray]]:
    """(whole-video frames [≤max, D], per-clip frames [≤max, D] for each segment in order)."""
    whole = frames[sample_frames(len(frames), max_frames, rng)]
    segments = video.sorted_segments()
    if not segments:  # no timed events: the whole video is its one clip
        return whole, [whole]
    clips = []
    for seg in segments:
        first, last = clip_frame_range(times, seg.start, seg.end, min_clip_frames)
        clip = frames[first:last]
        clips.append(clip[sample_frames(len(clip), max_frames, rng)])
    return whole, clips


def pad_sequences(seqs: Sequence[np.ndarray], dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """[N, L_i, D] arrays → ([N, L, D] float, [N, L] bool True = real)."""
    length = max(1, max((len(s) for s in seqs), default=1))
    out = np.zeros((len(seqs), length, dim), np.float32)
    mask = np.zeros((len(seqs), length), bool)
    for i, seq in enumerate(seqs):
        out[i, : len(seq)] = seq
        mask[i, : len(seq)] = True
    return torch.from_numpy(out), torch.from_numpy(mask)


def collate_hierarchy(items: Sequence[tuple[np.ndarray, list[np.ndarray]]], dim: int,
                      prefix: str = "frame") -> dict[str, torch.Tensor]:
    """Whole sequences + flattened sub-sequences (clips or sentences) of a batch.

    Returns {"<p>s" [B, T, D], "<p>_mask" [B, T], "group_<p>s" [C, L, D],
    "group_<p>_mask" [C, L], "group_counts" [B]} with the C groups in batch order.
    """
    whole, whole_mask = pad_sequences([w for w, _ in items], dim)
    groups = [g for _, gs in items for g in gs]
    grouped, grouped_mask = pad_sequences(groups, dim)
    counts = torch.tensor([len(gs) for _, gs in items], dtype=torch.long)
    return {f"{prefix}s": whole, f"{prefix}_mask": whole_mask, f"group_{prefix}s": grouped,
            f"group_{prefix}_mask": grouped_mask, "group_counts": counts}


class HierarchyVideoReader:
    """Reads a video's frame timeline from the run's feature reader (`VideoFeatures`)."""

    def __init__(self, read_features: Any, max_frames: int = 80, min_clip_frames: int = 1, cache_size: int = 2048,
                 standardise_experts: bool = False):
        self.store, self.experts = read_features.store, list(read_features.experts)
        self.dims = dict(read_features.dims)
        self.dim = sum(self.dims[e] for e in self.experts)
        self.max_frames, self.min_clip_frames = max_frames, min_clip_frames
        self.cache: OrderedDict[str, tuple[np.ndarray, np.ndarray]] = OrderedDict()  # LRU of timelines
        self.cache_size, self.standardise_experts = cache_size, standardise_experts

    def timeline(self, key: str) -> tuple[np.ndarray, np.ndarray]:
        if key in self.cache:
            self.cache.move_to_end(key)
            return self.cache[key]
        value = frame_features(self.store, self.experts, self.dims, key, self.standardise_experts)
        if self.cache_size > 0:
            self.cache[key] = value
            while len(self.cache) > self.cache_size:
                self.cache.popitem(last=False)
        return value

    def __call__(self, video: Video, rng: np.random.Generator | None = None) -> tuple[np.ndarray, list[np.ndarray]]:
        frames, times = self.timeline(video.key)
        return video_hierarchy(frames, times, video, self.max_frames, self.min_clip_frames, rng)

    def batch(self, videos: Sequence[Video], rngs: Sequence[np.random.Generator | None]) -> dict[str, Any]:
        out: dict[str, Any] = collate_hierarchy([self(v, r) for v, r in zip(videos, rngs)], self.dim)
        out["video_ids"] = [v.id for v in videos]
        return out


# --- text -------------------------------------------------------------------------
class ParagraphTokenFeatures:
    """Per-token features of a frozen BERT-family model over whole paragraphs, split back
    into sentences: the last `layers` hidden states concatenated (COOT §4: last 2)."""

    def __init__(self, model_path: str = "", layers: int = 2, max_tokens: int = 512, batch_size: int = 32):
        self.encoder = HFTextEncoder(model_path, freeze=True, max_tokens=max_tokens).eval()
        self.path, self.tokenizer, self.model = self.encoder.path, self.encoder.tokenizer, self.encoder.model
        self.layers, self.max_tokens, self.batch_size = layers, max_tokens, batch_size
        self.dim = layers * self.encoder.hidden_size
        self.cache: dict[tuple[str, ...], list[np.ndarray]] = {}

    def _ids(self, sentences: Sequence[str]) -> tuple[list[int], list[tuple[int, int]]]:
        """[CLS] s1 … sn [SEP] token ids and each sentence's token span (≥ 1 token)."""
        tok = self.tokenizer
        ids, spans = [tok.cls_token_id], []
        budget = self.max_tokens - 2
        for sentence in sentences:
            pieces = tok(sentence, add_special_tokens=False)["input_ids"] or [tok.unk_token_id]
            room = max(1, min(len(pieces), budget - (len(ids) - 1)))
            start = len(ids)
            ids.extend(pieces[:room])
            spans.append((start, len(ids)))
        ids.append(tok.sep_token_id)
        return ids, spans

    @torch.no_grad()
    def __call__(self, paragraphs: Sequence[Sequence[str]]) -> list[list[np.ndarray]]:
        """Each paragraph (a list of sentences) → one [L_i, dim] array per sentence."""
        keys = [tuple(p) for p in paragraphs]
        missing = list(dict.fromkeys(k for k in keys if k not in self.cache))
        for start in range(0, len(missing), self.batch_size):
            chunk = missing[start : start + self.batch_size]
            encoded = [self._ids(p) for p in chunk]
            width = max(len(ids) for ids, _ in encoded)
            input_ids = torch.full((len(chunk), width), self.tokenizer.pad_token_id or 0, dtype=torch.long)
            mask = torch.zeros((len(chunk), width), dtype=torch.long)
            for i, (ids, _) in enumerate(encoded):
                input_ids[i, : len(ids)] = torch.tensor(ids)
                mask[i, : len(ids)] = 1
            layers = tuple(range(-self.layers, 0))  # e.g. (-2, -1): the last two, concatenated
            states = self.encoder.hidden_states({"input_ids": input_ids, "attention_mask": mask}, layers)
            states = states.float().numpy()  # [b, L, dim]
            for i, (key, (_, spans)) in enumerate(zip(chunk, encoded)):
                self.cache[key] = [states[i, a:b].copy() for a, b in spans]
        return [self.cache[k] for k in keys]

    def batch(self, paragraphs: Sequence[Sequence[str]], keys: Sequence[str] | None = None) -> dict[str, Any]:
        """Paragraphs → {"words" [B, L, D] (all sentence tokens), "word_mask", "group_words",
        "group_word_mask", "group_counts", "sentences"}. `keys` (video keys) are unused here."""
        items = [(np.concatenate(sents, 0), sents) for sents in self(paragraphs)]
        out: dict[str, Any] = collate_hierarchy(items, self.dim, prefix="word")
        out["sentences"] = [list(p) for p in paragraphs]
        return out


class StoredParagraphFeatures:
    """Paragraph token features precomputed into a FeatureStore expert, one entry per video
    key: features [T, D] with timestamps = the sentence index of each token (the layout of
    `precompute_paragraph_features` and of COOT's imported text h5 + sentence splits).

    Paragraphs without a stored entry (free-text queries) go through `fallback`
    (a `ParagraphTokenFeatures` of the same model), when given."""

    def __init__(self, store: Any, expert: str, fallback: Any = None):
        self.store, self.expert, self.fallback = store, expert, fallback
        if expert not in store.experts:
            raise VideoTextError(f"model.text_features: no expert {expert!r} in {store.root} (have {store.experts}); "
                                 f"write it with videotext.data.hierarchy.precompute_paragraph_features or "
                                 f"`videotext import-features` of COOT's text h5")
        self.dim = int(store.dim(expert))

    def sentences(self, key: str, count: int) -> list[np.ndarray]:
        features, index = self.store.get(self.expert, key)
        index = np.asarray(index).astype(np.int64)
        parts = [features[index == i] for i in range(int(index.max()) + 1)] if len(index) else []
        if len(parts) != count or any(len(p) == 0 for p in parts):
            raise VideoTextError(f"{self.store.path(self.expert)}: {key!r} has {len(parts)} stored sentences, "
                                 f"its paragraph has {count}")
        return parts

    def batch(self, paragraphs: Sequence[Sequence[str]], keys: Sequence[str] | None = None) -> dict[str, Any]:
        """Same output as `ParagraphTokenFeatures.batch`, read from the store by video key."""
        keys = list(keys) if keys is not None else [None] * len(paragraphs)
        todo = [i for i, k in enumerate(keys) if k is None or not self.store.has(self.expert, k)]
        if todo and self.fallback is None:
            raise VideoTextError(f"model.text_features={self.expert!r}: no stored features for {keys[todo[0]]!r}")
        computed = dict(zip(todo, self.fallback([paragraphs[i] for i in todo]))) if todo else {}
        items = []
        for i, (paragraph, key) in enumerate(zip(paragraphs, keys)):
            sents = computed[i] if i in computed else self.sentences(key, len(paragraph))
            items.append((np.concatenate(sents, 0), sents))
        out: dict[str, Any] = collate_hierarchy(items, self.dim, prefix="word")
        out["sentences"] = [list(p) for p in paragraphs]
        return out


def precompute_paragraph_features(dataset: VideoTextDataset, store: Any, expert: str = "text_paragraph",
                                  model_path: str = "", layers: int = 2, max_tokens: int = 512,
                                  overwrite: bool = False) -> int:
    """Run the frozen text model once over every video's paragraph (its segment sentences)
    and write the per-token features (last `layers` hidden layers concatenated, COOT §4)
    into `store` as `expert`; returns the number of videos written."""
    features = ParagraphTokenFeatures(model_path, layers, max_tokens)
    writer = store.writer(expert, features.dim, {"text_model": features.path, "layers": layers,
                                                  "timestamps": "sentence index of each token"},
                          dtype="float32", overwrite=overwrite)
    done = writer.done_keys()
    count = 0
    for video in dataset:
        if video.key in done:
            continue
        sents = features([paragraph_sentences(video)])[0]
        index = np.repeat(np.arange(len(sents), dtype=np.float64), [len(x) for x in sents])
        writer.add(video.key, np.concatenate(sents, 0), index)
        count += 1
    writer.commit()
    return count


# --- batches ----------------------------------------------------------------------
def _rng(seed: int, epoch: int, video_id: str) -> np.random.Generator:
    return np.random.default_rng(random.Random(f"coot/{seed}/{epoch}/{video_id}").getrandbits(64))


class HierarchyBatches(SeededBatches):
    """Training batches of (video hierarchy, paragraph hierarchy) pairs of one split.

    The video order is a seeded permutation per epoch, and frame draws are seeded per
    (seed, epoch, video): a batch is a pure function of (seed, epoch, index).
    """

    def __init__(self, dataset: VideoTextDataset, video_reader: HierarchyVideoReader,
                 text_features: Any, batch_size: int, seed: int, drop_last: bool = True):
        self.videos = [v for v in dataset if v.segments or v.captions]
        if not self.videos:
            raise ValueError(f"{dataset.name}: no video has segments or captions to train on")
        self.video_reader, self.text_features = video_reader, text_features
        super().__init__(len(self.videos), batch_size, seed, drop_last)

    def batch(self, epoch: int, index: int) -> dict[str, Any]:
        videos = [self.videos[i] for i in self.positions(epoch, index)]
        video = self.video_reader.batch(videos, [_rng(self.seed, epoch, v.id) for v in videos])
        text = self.text_features.batch([paragraph_sentences(v) for v in videos], keys=[v.key for v in videos])
        return {"video": video, "text": text, "video_ids": [v.id for v in videos]}


def hierarchy_video_batches(dataset: VideoTextDataset, video_reader: HierarchyVideoReader,
                            batch_size: int) -> Iterator[dict[str, Any]]:
    """Every video once, in order, with centre-frame sampling (evaluation)."""
    videos = list(dataset)
    for start in range(0, len(videos), batch_size):
        chunk = videos[start : start + batch_size]
        yield video_reader.batch(chunk, [None] * len(chunk))
