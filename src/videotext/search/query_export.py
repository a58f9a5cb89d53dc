"""Writes a text encoder as an ONNX graph with its tokenizer (`videotext.search.query_encoder`
reads it): the run's query side into an index folder at build time, and the shipped sentence
encoder of the spoken and written lines beside them.

A method qualifies when its query side is one text model whose tokenizer the `tokenizers`
library reproduces (a Hugging Face fast tokenizer, or open_clip's CLIP BPE) plus layers of its
own: dual, frozen, supportset, conse, clip4clip, and mmt's text side, whose graph also gives the
mixture weights its shortlist is re-scored with (`exported_rescore = "mixture"`). A method that
re-scores candidates with a cross encoder (toco) or reads a sentence hierarchy (coot) is searched
through torch. The graph is checked against the torch
encoder on sample captions before it is written, and not written when they differ.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
import warnings
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np
import torch
from torch import nn

from videotext import digests
from videotext.cache import cache_folder
from videotext.io import write_json
from videotext.openclip.tokenization import fast_bpe_tokenizer
from videotext.search.index import _link_or_copy
from videotext.search.query_encoder import (FORMAT, META_FILE, MODEL_FILE, QUERY_FOLDER, REMEDY, SENTENCE_FOLDER,
                                            TOKENIZER_FILE, ExportedTextEncoder, export_is_current)

MIN_COSINE = 0.9999  # the exported graph against torch on CHECK_TEXTS, else it is not written
CHECK_TEXTS = (
    "a man rides a bike down a street",
    "someone is cooking pasta in a small kitchen and talking",
    "cat",
    "Two DOGS play with a red ball on the beach at sunset!",
    "a person explains how to change a tyre, step by step, while cars pass by on the busy road behind",
)
OPSET = 17


class _TokensToVectors(nn.Module):
    """input_ids, attention_mask [B, L] → `head(batch)`: vectors [B, D], or (vectors, mixture
    weights [B, M]) for a query side that re-scores (the traced function)."""

    def __init__(self, owner: nn.Module, head: Callable[[dict[str, Any]], Any]):
        super().__init__()
        self.owner = owner
        self.head = head

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> Any:
        out = self.head({"input_ids": input_ids, "attention_mask": attention_mask})
        return tuple(o.float() for o in out) if isinstance(out, tuple) else out.float()


def why_not_exportable(method: Any, rescores: bool) -> str | None:
    """Why `method`'s query side cannot be exported (None when it can); `rescores`: search orders a
    shortlist by the method's own score (`LoadedModel.rescores`), which needs the model."""
    if rescores and getattr(method, "exported_rescore", None) != "mixture":
        return "it re-scores a shortlist with its own score"
    encoder = getattr(method, "text_encoder", None)
    if encoder is None or not hasattr(encoder, "token_states") or fast_tokenizer(encoder) is None:
        return "its text side is not one text model whose tokenizer the tokenizers library reproduces"
    batch = method.prepare_text(["a query"])
    if not set(batch) <= {"input_ids", "attention_mask", "texts"}:
        return "its text inputs are more than token ids and a mask"
    return None


@contextlib.contextmanager
def _replacing(folder: Path) -> Iterator[Path]:
    """A new folder to fill, put in place of `folder` (atomically) when the block ends without error."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", suffix=".tmp", dir=folder.parent))
    try:
        yield tmp
        tmp.chmod(0o755)  # mkdtemp's folder is private; the index folder's files are not
        if folder.exists():
            shutil.rmtree(folder)
        os.replace(tmp, folder)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def fast_tokenizer(encoder: Any) -> tuple[Any, int, str, str] | None:
    """(a `tokenizers.Tokenizer`, pad id, pad token, `clean`) giving the ids `encoder.tokenize` gives:
    a Hugging Face fast tokenizer's own backend, or open_clip's CLIP BPE rebuilt
    (`openclip.fast_bpe_tokenizer`, with open_clip's text cleaning); None for any other."""
    tokenizer = getattr(encoder, "tokenizer", None)
    if getattr(tokenizer, "is_fast", False):
        return tokenizer.backend_tokenizer, int(tokenizer.pad_token_id), str(tokenizer.pad_token), ""
    if getattr(encoder, "hf", True):  # not open_clip's own text transformer
        return None
    backend = fast_bpe_tokenizer(tokenizer)
    return (backend, 0, backend.id_to_token(0), "clip") if backend is not None else None  # open_clip pads with 0


def _write(folder: Path, module: nn.Module, encoder: Any, dim: int, source: str, rescore: str | None = None) -> Path:
    """The three files of an exported encoder into `folder` (replaced atomically); the graph is run
    on `encoder.tokenize`'s inputs for the reference it is checked against."""
    outputs = ["vectors", "weights"] if rescore else ["vectors"]
    backend, pad_id, pad_token, clean = fast_tokenizer(encoder)
    with _replacing(folder) as tmp:
        # open_clip's attention traces its batch size and length as constants: one text a run, padded to
        # max_tokens (with the causal mask and pooling at the end token, padding changes no state it reads)
        one_by_one = clean == "clip"
        sample = encoder.tokenize(list(CHECK_TEXTS))
        with torch.inference_mode():
            reference = module(sample["input_ids"], sample["attention_mask"])
        reference = [r.numpy() for r in (reference if isinstance(reference, tuple) else (reference,))]  # [N, ·] each
        if one_by_one:
            one = encoder.tokenize(list(CHECK_TEXTS[-1:]))
            sample = {key: nn.functional.pad(one[key], (0, encoder.max_tokens - one[key].shape[1]))
                      for key in ("input_ids", "attention_mask")}
        inputs = (sample["input_ids"], sample["attention_mask"])
        axes = {"input_ids": {0: "batch", 1: "tokens"}, "attention_mask": {0: "batch", 1: "tokens"},
                **{name: {0: "batch"} for name in outputs}}
        with warnings.catch_warnings():  # the tracer's notes on shapes it records as constants
            warnings.simplefilter("ignore")
            torch.onnx.export(module, inputs, str(tmp / MODEL_FILE), input_names=["input_ids", "attention_mask"],
                              output_names=outputs, dynamic_axes=axes, opset_version=OPSET, dynamo=False)
        backend.save(str(tmp / TOKENIZER_FILE))
        (tmp / META_FILE).write_text(json.dumps({
            "format": FORMAT, "version": 1, "source": source, "dim": int(dim), "max_tokens": int(encoder.max_tokens),
            "pad_id": pad_id, "pad_token": pad_token, "inputs": ["input_ids", "attention_mask"], "outputs": outputs,
            "model_bytes": (tmp / MODEL_FILE).stat().st_size,
            **({"clean": clean} if clean else {}), **({"rescore": rescore} if rescore else {}),
            **({"batch": 1, "length": int(encoder.max_tokens)} if one_by_one else {}),
        }, indent=1), encoding="utf-8")
        for name in (MODEL_FILE, TOKENIZER_FILE, META_FILE):  # checked as the folder is read (`videotext.digests`)
            digests.record(tmp / name, REMEDY)
        exported = ExportedTextEncoder(tmp).outputs(list(CHECK_TEXTS))
        for name, expected in zip(outputs, reference):
            got = exported[name]
            cosine = (got * expected).sum(1) / np.maximum(np.linalg.norm(got, axis=1) * np.linalg.norm(expected, axis=1),
                                                        1e-12)
            if float(cosine.min()) < MIN_COSINE:
                raise RuntimeError(f"the exported graph's {name} give cosine {float(cosine.min()):.6f} with torch")
    return folder


def export_query_encoder(method: Any, index_folder: str | os.PathLike | None, rescores: bool = False,
                         source: str = "", cache: str | os.PathLike | None = None) -> Path | None:
    """`method`'s query side into `index_folder/query_encoder`; None (and nothing written, an older
    export removed) when the method does not qualify (`why_not_exportable`). With `cache` (a folder
    beside the weights) and a `source` naming them, the export is made there once and linked into
    each index built from the same weights; without `index_folder`, only made there (a run prepared
    before any index is built from it)."""
    folder = Path(index_folder) / QUERY_FOLDER if index_folder is not None else None
    if why_not_exportable(method, rescores) is not None:
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)  # never a stale encoder of another run
        return None
    encoder = method.text_encoder

    def make(target: Path) -> Path:
        was_training = method.training
        method.eval()  # the graph's inputs carry no strings, so no per-caption cache is read or filled
        encoder.packed_inference = False  # open_clip's tower through its modules: oneDNN's packed weights do not trace
        try:
            rescore = "mixture" if rescores else None  # `why_not_exportable`: the only re-scoring exported

            def head(batch: dict[str, Any]) -> Any:
                text = method.encode_text(batch)
                return (method.query_vectors(text), text["weights"]) if rescore else method.query_vectors(text)

            module = _TokensToVectors(method, head)
            with torch.inference_mode():
                probe = module(*_one(encoder))
            dim = int((probe[0] if rescore else probe).shape[-1])
            return _write(target, module, encoder, dim, source, rescore)
        finally:
            method.train(was_training)
            vars(encoder).pop("packed_inference", None)

    if folder is None:
        return _cached_at(Path(cache), source, make)  # type: ignore[arg-type]
    if cache is not None and source:
        try:
            return _link_tree(_cached_at(Path(cache), source, make), folder)
        except OSError:  # a read-only run folder: this index's own export
            pass
    return make(folder)


def export_sentence_encoder(index_folder: str | os.PathLike, encoder: Any) -> Path:
    """`encoder`, the sentence encoder of the spoken and written lines (`spoken.sentence_vectors`:
    mean-pooled, L2-normalised), into `index_folder/sentence_encoder`, unless it is already there."""
    folder = Path(index_folder) / SENTENCE_FOLDER
    if (folder / META_FILE).is_file():
        return folder

    def make(target: Path) -> Path:
        def head(batch: dict[str, Any]) -> torch.Tensor:
            pooled = encoder.pool(encoder.token_states(batch), batch["attention_mask"])
            return nn.functional.normalize(pooled.float(), dim=-1)

        return _write(target, _TokensToVectors(encoder, head), encoder, encoder.hidden_size, encoder.path)

    files = sorted(Path(encoder.path).glob("*")) if Path(encoder.path).is_dir() else []
    stamp = json.dumps([encoder.path, encoder.max_tokens, [(f.name, f.stat().st_size) for f in files if f.is_file()]])
    return _link_tree(_cached("sentence", stamp, make), folder)


def _cached(kind: str, stamp: str, make: Callable[[Path], Path]) -> Path:
    """The export identified by `stamp` in the videotext cache (`exported/KIND-HASH`), made by
    `make(folder)` the first time: an index built again from the same weights reuses it."""
    return _cached_at(cache_folder("exported") / f"{kind}-{hashlib.sha256(stamp.encode()).hexdigest()[:16]}",
                      stamp, make)


def _cached_at(folder: Path, stamp: str, make: Callable[[Path], Path]) -> Path:
    """`folder`, made by `make(folder)` unless it already holds the export identified by `stamp`."""
    meta = folder / META_FILE
    if not export_is_current(folder, stamp):
        make(folder)
        written = json.loads(meta.read_text(encoding="utf-8"))
        written["source"] = stamp
        write_json(meta, written, way_back=REMEDY)
    return folder


def _link_tree(source: Path, target: Path) -> Path:
    """`source`'s files at `target` (hard links; copies across file systems), replacing it atomically."""
    with _replacing(target) as tmp:
        shutil.copytree(source, tmp, dirs_exist_ok=True, copy_function=_link_or_copy)
    return target


def _one(encoder: Any) -> tuple[torch.Tensor, torch.Tensor]:
    tokens = encoder.tokenize(["a query"])
    return tokens["input_ids"], tokens["attention_mask"]
