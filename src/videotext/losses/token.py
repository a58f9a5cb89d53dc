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


def sample_negatives(scores: Tensor, positives: Tensor, count: int, hard: bool | int = True,
                     generator: torch.Generator | None = None) -> Tensor:
    """Indices [B, count] of negative videos per text (§3.3 "Hard-negative mining").

    ``scores`` [B_text, B_video] from the cheap scorer; ``positives`` [B_text, B_video]
    marks pairs that must never be negatives. ``hard`` True: the highest-scoring
    negatives; False: uniformly drawn ones (the paper's "random sampling", §4.3); an int h
    (0 ≤ h ≤ count): the h hardest plus count − h drawn uniformly from the rest (a mix,
    not in the paper: a cross-encoder from scratch never learns from hardest-only
    negatives on distractor-heavy data). ``count`` must not exceed the fewest negatives
    of any row.
    """
    available = int((~positives).sum(1).min())
    if count > available:
        raise ValueError(f"cannot sample {count} negatives: a text has only {available} in the batch")
    n_hard = count if hard is True else 0 if hard is False else int(hard)
    if not 0 <= n_hard <= count:
        raise ValueError(f"hard: expected 0..{count} hard negatives, got {hard}")
    chosen = scores.new_zeros(scores.shape[0], 0, dtype=torch.long)
    if n_hard:
        masked = scores.detach().float().masked_fill(positives, float("-inf"))
        chosen = masked.topk(n_hard, dim=1).indices  # [B, h]
    if n_hard < count:
        noise = torch.rand(scores.shape, generator=generator).to(scores.device)  # CPU RNG: saved on resume
        taken = positives.clone()
        taken.scatter_(1, chosen, True)  # the hard ones are not drawn twice
        chosen = torch.cat([chosen, noise.masked_fill(taken, float("-inf")).topk(count - n_hard, dim=1).indices], 1)
    return chosen  # [B, count]
