"""Captioning metrics (BLEU-4, METEOR, ROUGE-L, CIDEr) through `pycocoevalcap`, and a split evaluator.

Support-set §6.5 reports these four (SPICE needs a model download and is left out).
Sentences are tokenised in Python the way the COCO PTB tokenizer ends up (lower case,
its punctuation removed), so only METEOR starts a JVM (≈7 s): score a whole split in
one call, and pass `meteor=False` where time matters. Scores are in percent, as in the
paper's tables.
"""
from __future__ import annotations

import re
from typing import Any, Mapping, Sequence

import torch

from videotext.runtime import to_device

_PUNCTUATION = {"''", "'", "``", "`", "-LRB-", "-RRB-", "-LCB-", "-RCB-", ".", "?", "!", ",", ":", "-", "--",
                "...", ";"}  # pycocoevalcap.tokenizer.ptbtokenizer.PUNCTUATIONS
_TOKEN = re.compile(r"\w+(?:'\w+)?|[^\w\s]+")


def tokenize_caption(text: str) -> str:
    """Lower-case, split off punctuation, drop the PTB punctuation set: 'A ball, rolling.' → 'a ball rolling'."""
    return " ".join(t for t in _TOKEN.findall(text.lower()) if t not in _PUNCTUATION)


def caption_metrics(predictions: Mapping[str, str], references: Mapping[str, Sequence[str]],
                    meteor: bool = True) -> dict[str, float]:
    """Corpus scores of one predicted caption per id against that id's reference captions.

    Returns {"bleu1".."bleu4", "rouge_l", "cider"[, "meteor"]} in percent (× 100).
    """
    from pycocoevalcap.bleu.bleu import Bleu
    from pycocoevalcap.cider.cider import Cider
    from pycocoevalcap.rouge.rouge import Rouge

    ids = sorted(predictions)
    missing = [i for i in ids if not references.get(i)]
    if missing:
        raise ValueError(f"caption_metrics: no reference caption for id(s) {missing[:5]}")
    if not ids:
        raise ValueError("caption_metrics: no predictions to score")
    res = {i: [tokenize_caption(predictions[i]) or "empty"] for i in ids}
    gts = {i: [tokenize_caption(r) for r in references[i]] for i in ids}
    bleu, _ = Bleu(4).compute_score(gts, res, verbose=0)
    out = {f"bleu{n + 1}": 100.0 * float(b) for n, b in enumerate(bleu)}
    out["rouge_l"] = 100.0 * float(Rouge().compute_score(gts, res)[0])
    out["cider"] = 100.0 * float(Cider().compute_score(gts, res)[0])
    if meteor:
        from pycocoevalcap.meteor.meteor import Meteor

        scorer = Meteor()
        try:
            out["meteor"] = 100.0 * float(scorer.compute_score(gts, res)[0])
        finally:
            _close_meteor(scorer)
    return out


def _close_meteor(scorer: Any) -> None:
    process = getattr(scorer, "meteor_p", None)
    if process is not None and process.poll() is None:
        with getattr(scorer, "lock"):
            process.stdin.close()
            process.kill()
            process.wait()


@torch.inference_mode()
def generate_captions(method: Any, dataset: Any, read_features: Any, beam_size: int = 1,
                      batch_size: int = 64, device: Any = "cpu") -> dict[str, str]:
    """{video id: generated caption} for every video of `dataset` (a method with `caption`)."""
    was_training = method.training
    method.eval()
    try:
        out: dict[str, str] = {}
        for batch in method.video_batches(dataset, read_features, batch_size):
            batch = to_device(batch, device)
            out.update(zip(batch["video_ids"], method.caption(batch, beam_size=beam_size)))
    finally:
        method.train(was_training)
    return out


def evaluate_captioning(method: Any, dataset: Any, read_features: Any, beam_size: int = 1,
                        meteor: bool = True, device: Any = "cpu") -> dict[str, Any]:
    """Caption every video of a split and score it against all of its captions.

    Returns {"metrics": {...}, "predictions": {id: caption}, "n_videos", "beam_size"}.
    """
    predictions = generate_captions(method, dataset, read_features, beam_size, device=device)
    references = {v.id: list(v.captions) for v in dataset if v.captions}
    predictions = {k: p for k, p in predictions.items() if k in references}
    metrics = caption_metrics(predictions, references, meteor=meteor)
    return {"metrics": metrics, "predictions": predictions, "n_videos": len(predictions), "beam_size": beam_size}
