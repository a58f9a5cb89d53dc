"""Inference-time re-scoring of a similarity matrix: normalisations that later papers report
beside their retrieval figures. Opt-in and always labelled: a re-scored figure is reported
next to the plain one, never in its place, with the information it used.

    dsl     dual softmax (CAMoE, Cheng et al. 2021, "Dual Softmax Loss"; used at inference
            by CLIP2Video and the papers after it). Each target's column is softmax-normalised
            over all test queries, so the score of one query depends on every other test
            query: information a single-query search does not have.
    qbnorm  querybank normalisation with the dynamic inverted softmax (QB-Norm, Bogolin et al.
            2022, "Cross Modal Retrieval with Querybank Normalisation", §3). A bank of
            training queries (never test queries) gives each target a normaliser; a test
            query is re-scored alone, with that bank.

`dual_softmax` and `querybank_norm` are pure functions of score matrices (numpy arrays or
torch tensors; the result is float64 of the same kind). `RESCORERS` names them with what
each needs, for `videotext eval --rescore` and the benchmark's `evals: [{rescore: ...}]`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

import numpy as np
import torch

from videotext.errors import VideoTextError

#: CAMoE's and CLIP2Video's inference temperature: CLIP's logit scale (100) on cosine similarities
DSL_TEMPERATURE = 100.0
#: QB-Norm's inverse temperature β of the inverted softmax (the authors' default)
QB_BETA = 20.0
#: QB-Norm's activation: a target is activated when it is among a bank query's top k (the authors' k = 1)
QB_TOP_K = 1


def _as_float64(sims: Any) -> tuple[torch.Tensor, bool]:
    """(float64 tensor on its device, whether the input was numpy)."""
    if isinstance(sims, torch.Tensor):
        return sims.detach().to(torch.float64), False
    return torch.from_numpy(np.asarray(sims, dtype=np.float64)), True


def _back(x: torch.Tensor, was_numpy: bool) -> Any:
    return x.numpy() if was_numpy else x


def _check_matrix(x: torch.Tensor, name: str) -> None:
    if x.dim() != 2:
        raise ValueError(f"{name}: expected a [queries, targets] matrix, got shape {tuple(x.shape)}")


def dual_softmax(sims: Any, temperature: float = DSL_TEMPERATURE) -> Any:
    """Dual softmax re-scoring (CAMoE, Cheng et al. 2021; CLIP2Video): ``S ⊙ softmax(S·T, axis=queries)``.

    `sims` is ``[n_queries, n_targets]``. Each target's column is softmax-normalised across
    all queries (a prior: a target that many queries score highly, a *hub*, is shared out
    among them), then multiplied element-wise into `sims`; each query then ranks its row.

    Information used: every query of the matrix at once (for a test evaluation, all N test
    queries together), i.e. information a single-query search does not have. A column whose
    scores are all equal gets the uniform weight 1/N (it stays all equal); within a column
    with non-negative scores the order of the queries is kept (s·e^{Ts} grows with s).
    """
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    x, was_numpy = _as_float64(sims)
    _check_matrix(x, "sims")
    return _back(x * torch.softmax(x * temperature, dim=0), was_numpy)


def activated_targets(bank_sims: Any, k: int = QB_TOP_K) -> Any:
    """bool ``[n_targets]``: targets among the top `k` of at least one bank query (QB-Norm's
    activation set; ties resolved as `torch.topk` does)."""
    b, was_numpy = _as_float64(bank_sims)
    _check_matrix(b, "bank_sims")
    activated = torch.zeros(b.shape[1], dtype=torch.bool, device=b.device)
    if b.shape[0]:
        activated[b.topk(min(k, b.shape[1]), dim=1).indices.flatten()] = True
    return _back(activated, was_numpy)


def querybank_norm(sims: Any, bank_sims: Any, beta: float = QB_BETA, dynamic: bool = True,
                   k: int = QB_TOP_K) -> Any:
    """QB-Norm with the (dynamic) inverted softmax (Bogolin et al. 2022, §3).

    `sims` is ``[n_queries, n_targets]`` (test queries × targets), `bank_sims`
    ``[n_bank, n_targets]`` (the querybank × the same targets). The inverted softmax
    re-scores query q and target j as ``exp(β s_qj) / Σ_b exp(β s_bj)``: a target that
    the bank's queries score highly (a hub) is divided down. The *dynamic* inverted softmax
    (the paper's, the default) re-scores only the queries whose top-1 target is *activated*,
    i.e. among the top `k` of some bank query (`activated_targets`); the other queries keep
    their raw scores. `dynamic=False` re-scores every query.

    Information used: the querybank (training queries encoded by the same model) and the one
    query being searched; no other test query. Rows of the result are not on one scale (raw
    and re-scored rows mix), so rank within a row only (query → targets).
    """
    x, was_numpy = _as_float64(sims)
    b, _ = _as_float64(bank_sims)
    _check_matrix(x, "sims")
    _check_matrix(b, "bank_sims")
    if b.shape[1] != x.shape[1]:
        raise ValueError(f"bank_sims has {b.shape[1]} targets, sims {x.shape[1]}: score the bank against the same targets")
    if b.shape[0] == 0:
        raise ValueError("bank_sims: the querybank is empty")
    b = b.to(x.device)
    log_normaliser = torch.logsumexp(beta * b, dim=0)  # [n_targets]: log Σ_b exp(β s_bj)
    normalised = torch.exp(beta * x - log_normaliser)
    if not dynamic:
        return _back(normalised, was_numpy)
    rescored = activated_targets(b, k)[x.argmax(dim=1)]
    return _back(torch.where(rescored[:, None], normalised, x), was_numpy)


def querybank_rescored_queries(sims: Any, bank_sims: Any, k: int = QB_TOP_K) -> Any:
    """bool ``[n_queries]``: the queries the dynamic inverted softmax re-scores (top-1 activated)."""
    x, was_numpy = _as_float64(sims)
    b, _ = _as_float64(bank_sims)
    return _back(activated_targets(b.to(x.device), k)[x.argmax(dim=1)], was_numpy)


# --- the registry ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class Rescorer:
    """One named re-scoring: what it is, what it needs beyond the test matrix, which directions."""

    name: str
    title: str  # e.g. "dual softmax"
    needs: tuple[str, ...]  # "test_queries" (every test query at once) and/or "querybank" (training captions)
    directions: tuple[str, ...]  # the directions it re-scores: t2v (caption queries), v2t (video queries)
    uses: str  # the information used, in words ("{queries}": the test queries, counted where known)
    reference: str

    def uses_for(self, queries: int | None = None, videos: int | None = None) -> str:
        """`uses` with the split's counts: e.g. "uses all 3126 test queries (v2t: all 521 test videos) …"."""
        counted = f"{queries} test queries" if queries else "test queries"
        if queries and videos:
            counted += f" (v2t: all {videos} test videos)"
        return self.uses.format(queries=counted)

    def label(self, direction: str, n_queries: int, bank_size: int | None = None) -> str:
        """The label of a re-scored figure: e.g. "dual softmax over all 3126 test queries"."""
        if self.name == "dsl":
            unit = "queries" if direction == "t2v" else "videos (the v2t queries)"
            return f"{self.title} over all {n_queries} test {unit}"
        return f"{self.title}, bank of {bank_size} training captions"


RESCORERS: dict[str, Rescorer] = {
    "dsl": Rescorer(
        "dsl", "dual softmax", needs=("test_queries",), directions=("t2v", "v2t"),
        uses="uses all {queries} together, i.e. information a single-query search does not have",
        reference="CAMoE, Cheng et al. 2021, as CLIP2Video and later papers report it"),
    "qbnorm": Rescorer(
        "qbnorm", "QB-Norm (dynamic inverted softmax)", needs=("querybank",), directions=("t2v",),
        uses="uses a querybank of the training captions (encoded by the same model) and no test query "
             "beyond the one searched",
        reference="Bogolin et al. 2022, Cross Modal Retrieval with Querybank Normalisation, §3"),
}


def parse_rescore(values: Iterable[str] | str | None) -> list[str]:
    """Names from repeated and/or comma-separated values ("dsl,qbnorm"), in order, once each;
    an unknown name is a VideoTextError naming the known ones."""
    if values is None:
        return []
    if isinstance(values, str):
        values = [values]
    names = [n.strip() for value in values for n in str(value).split(",") if n.strip()]
    unknown = [n for n in names if n not in RESCORERS]
    if unknown:
        raise VideoTextError(f"--rescore {','.join(unknown)}: unknown (known: {', '.join(RESCORERS)})")
    return list(dict.fromkeys(names))


def rescore(name: str, sims: Any, bank_sims: Any = None, **settings: Any) -> Any:
    """`sims` re-scored by the named method (`bank_sims` for QB-Norm)."""
    if name == "dsl":
        return dual_softmax(sims, **settings)
    if name == "qbnorm":
        if bank_sims is None:
            raise VideoTextError("qbnorm: needs the querybank's similarities to the targets (bank_sims)")
        return querybank_norm(sims, bank_sims, **settings)
    raise VideoTextError(f"rescore {name!r}: unknown (known: {', '.join(RESCORERS)})")
