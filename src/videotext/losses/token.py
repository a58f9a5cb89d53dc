"""ToCo's losses over sampled candidate videos (ToCo §3.2 eq. 1, §3.3 eq. 2, "Hard-negative mining").

A cross-encoder cannot score every (text, video) pair of a batch, so each text i is
scored against its own video and k sampled negatives: the candidate logits are
``[B, 1 + k]`` with the positive in column 0. Eq. 1 and eq. 2 are both the softmax
cross-entropy of column 0 (text → video, conditioned on the text); eq. 2 has one such
term per token of interest, weighted by the token's TF-IDF (normalised per text).
The cheap dual scorer that picks the hard negatives trains with the shared symmetric
InfoNCE (`videotext.losses.info_nce`).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor


def global_contrast(logits: Tensor) -> Tensor:
    """Eq. 1: mean over texts of −log softmax(f(x_j, y_i))_{j = i}; logits [B, 1+k], positive first."""
    return -F.log_softmax(logits.float(), dim=1)[:, 0].mean()


def token_contrast(logits: Tensor, weights: Tensor) -> Tensor:
    """Eq. 2 on token scores f^t [B, 1+k, L] (positive first) with token weights [B, L].

    Each token's term −log softmax over the candidates is weighted by `weights` (zero
    outside K_i; rows sum to 1 where a text has tokens of interest). The result is the
    mean over the texts that have at least one token of interest (0 if none has).
    """
    per_token = -F.log_softmax(logits.float(), dim=1)[:, 0]  # [B, L]
    per_text = (per_token * weights.float()).sum(1)  # [B]
    has_tokens = weights.sum(1) > 0  # [B]
    if not bool(has_tokens.any()):
        return per_text.sum() * 0.0
    return per_text[has_tokens].mean()


def sample_negatives(scores: Tensor, positives: Tensor, count: int, hard: bool = True,
                     generator: torch.Generator | None = None) -> Tensor:
    """Indices [B, count] of negative videos per text (§3.3 "Hard-negative mining").

    ``scores`` [B_text, B_video] from the cheap scorer; ``positives`` [B_text, B_video]
    marks pairs that must never be negatives. Hard: the highest-scoring negatives.
    Random: uniformly drawn negatives (the paper's "random sampling" alternative, §4.3).
    ``count`` must not exceed the fewest negatives of any row.
    """
    available = int((~positives).sum(1).min())
    if count > available:
        raise ValueError(f"cannot sample {count} negatives: a text has only {available} in the batch")
    if hard:
        masked = scores.detach().float().masked_fill(positives, float("-inf"))
    else:
        noise = torch.rand(scores.shape, generator=generator).to(scores.device)  # CPU RNG: saved on resume
        masked = noise.masked_fill(positives, float("-inf"))
    return masked.topk(count, dim=1).indices  # [B, count]
