"""COOT's protocol (Ging et al. 2020, §4): paragraph↔video and sentence↔clip retrieval.

A hierarchical method (`protocol = "hierarchy"`) encodes each video as a paragraph-level
vector plus one vector per clip (segment) and each paragraph as a vector plus one per
sentence. Its split is evaluated with the multi-caption protocol of every method and, with
the one metric, paragraph→video, video→paragraph, sentence→clip and clip→sentence, plus
COOT's model-selection sums of R@1 (`selection.r1_sum`, `selection.clip_sent_r1_sum`).

Such a method provides `encode_video_hierarchy(batch)` and `encode_text_hierarchy(batch)`
({"paragraph": [B, D], "low": [n_clips or n_sentences, D]}), `video_batches` with
"group_counts" (clips per video) and `text_source(read_features)` (paragraph batches).
"""
from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from videotext.data.hierarchy import paragraph_sentences
from videotext.eval.evaluate import evaluate
from videotext.eval.relevance import clip_sentence_relevance, paragraph_video_relevance
from videotext.eval.retrieval import retrieval_metrics
from videotext.runtime import to_device


def evaluate_with_hierarchy(method: Any, dataset: Any, read_features: Any, device: Any = "cpu") -> dict[str, Any]:
    """Multi-caption t2v/v2t + paragraph↔video and sentence↔clip (§4) + the selection sums.

    "selection.r1_sum" is the official criterion (`det_best_field: val_score_at_1`):
    R@1 video→paragraph + R@1 paragraph→video; "selection.clip_sent_r1_sum" is the
    clip↔sentence one (`val_clip_sent_score_at_1`)."""
    out = evaluate(method, dataset, read_features, device=device)
    hierarchy = evaluate_hierarchy(method, dataset, read_features, device=device)
    out.update(hierarchy)
    out["n_videos"] = hierarchy["n_videos"]
    out["selection"] = selection_scores(hierarchy)
    return out


def selection_scores(hierarchy: dict[str, Any]) -> dict[str, float]:
    """COOT's model-selection sums of validation R@1 (official trainer, `validate_epoch`)."""
    return {"r1_sum": float(hierarchy["par2vid"]["R1"] + hierarchy["vid2par"]["R1"]),
            "clip_sent_r1_sum": float(hierarchy["sent2clip"]["R1"] + hierarchy["clip2sent"]["R1"])}


@torch.inference_mode()
def evaluate_hierarchy(method: Any, dataset: Any, read_features: Any, batch_size: int = 64,
                       device: Any = "cpu") -> dict[str, Any]:
    """Paragraph↔video and sentence↔clip retrieval (COOT §4) with the one metric.

    Paragraphs are the videos' segment sentences; clips and sentences are keyed by
    (video_id, segment index). Returns {"par2vid", "vid2par", "sent2clip", "clip2sent", ...}.
    """
    was_training = method.training
    method.eval()
    try:
        video_ids, videos, clips, clip_keys = [], [], [], []
        for batch in method.video_batches(dataset, read_features, batch_size):
            out = method.encode_video_hierarchy(to_device(batch, device))
            videos.append(F.normalize(out["paragraph"], dim=-1).cpu())
            clips.append(F.normalize(out["low"], dim=-1).cpu())
            for vid, count in zip(batch["video_ids"], batch["group_counts"].tolist()):
                video_ids.append(vid)
                clip_keys.extend((vid, i) for i in range(count))
        paragraphs, sentences, sentence_keys = [], [], []
        items = [(v.id, paragraph_sentences(v)) for v in dataset]
        keys = [v.key for v in dataset]
        source = method.text_source(read_features)
        for start in range(0, len(items), batch_size):
            chunk = items[start : start + batch_size]
            text_batch = to_device(source.batch([s for _, s in chunk], keys=keys[start : start + batch_size]), device)
            out = method.encode_text_hierarchy(text_batch)
            paragraphs.append(F.normalize(out["paragraph"], dim=-1).cpu())
            sentences.append(F.normalize(out["low"], dim=-1).cpu())
            for vid, sents in chunk:
                sentence_keys.extend((vid, i) for i in range(len(sents)))
    finally:
        method.train(was_training)
    video_emb, par_emb = torch.cat(videos), torch.cat(paragraphs)
    clip_emb, sent_emb = torch.cat(clips), torch.cat(sentences)
    par_sims = par_emb @ video_emb.T  # [n_paragraphs, n_videos]
    par_rel = paragraph_video_relevance([i for i, _ in items], video_ids)
    # sentences and clips pair up only where both exist (videos without segments have one of each)
    clip_pos = {k: i for i, k in enumerate(clip_keys)}
    keep = np.array([k in clip_pos for k in sentence_keys])
    sent_keys_kept = [k for k, ok in zip(sentence_keys, keep) if ok]
    sent_sims = sent_emb[torch.from_numpy(keep)] @ clip_emb.T  # [n_sentences, n_clips]
    sent_rel = clip_sentence_relevance(sent_keys_kept, clip_keys)
    clip_back = {k: i for i, k in enumerate(sent_keys_kept)}
    clip_keep = np.array([k in clip_back for k in clip_keys])
    return {
        "par2vid": retrieval_metrics(par_sims, par_rel),
        "vid2par": retrieval_metrics(par_sims.T, paragraph_video_relevance(video_ids, [i for i, _ in items])),
        "sent2clip": retrieval_metrics(sent_sims, sent_rel),
        "clip2sent": retrieval_metrics(sent_sims.T[torch.from_numpy(clip_keep)],
                                       clip_sentence_relevance([k for k, ok in zip(clip_keys, clip_keep) if ok],
                                                               sent_keys_kept)),
        "n_videos": len(video_ids), "n_clips": len(clip_keys), "n_sentences": int(keep.sum()),
    }
