"""A text encoder as an ONNX graph with its tokenizer, run without torch or transformers.

`index build` writes the run's query side (tokens → the vector the index is searched with:
`Method.query_vectors(Method.encode_text(...))`) into the index folder as `query_encoder/`:
`model.onnx`, `tokenizer.json` (the Hugging Face fast tokenizer's own file) and `encoder.json`
(inputs, token limit, padding, dimension). `videotext search INDEX "text"` then encodes its
query with onnxruntime and the `tokenizers` library, so a cold command imports neither torch
nor transformers. The lines of what is said and written are ranked against a query by the
shipped sentence encoder, exported the same way as `sentence_encoder/`.

This module is the reading side and imports neither; `videotext.search.query_export` writes
the folders (with torch).
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from videotext.digests import DamagedFile, problem_of, read_verified
from videotext.errors import DataFormatError
from videotext.search.shortlist import ranked

QUERY_FOLDER = "query_encoder"  # the run's query side, in an index folder
SENTENCE_FOLDER = "sentence_encoder"  # the sentence encoder of the spoken and written lines
FORMAT = "videotext-text-encoder"
# what a user does about a damaged export: the index itself is intact
REMEDY = "build the index again (`videotext index build ... --update` writes it anew), or delete this folder to search through torch"
MODEL_FILE, TOKENIZER_FILE, META_FILE = "model.onnx", "tokenizer.json", "encoder.json"


def clip_clean(text: str) -> str:
    """open_clip's `lower` cleaning (ftfy, HTML entities undone twice, whitespace collapsed, lower
    case), what its CLIP BPE tokenizer does before splitting words (`openclip.fast_bpe_tokenizer`)."""
    import html

    try:
        import ftfy

        text = ftfy.fix_text(text)
    except ImportError:  # open_clip requires ftfy; without it only mojibake would differ
        pass
    return " ".join(html.unescape(html.unescape(text)).strip().split()).lower()


CLEANERS = {"clip": clip_clean}  # encoder.json's `clean`: applied to each text before tokenizing


class ExportedTextEncoder:
    """Texts → vectors [B, D] (float32) through an exported folder (see the module docstring)."""

    def __init__(self, folder: str | os.PathLike, threads: int = 1):
        import onnxruntime
        from tokenizers import Tokenizer

        self.folder = Path(folder)
        meta_path = self.folder / META_FILE
        try:
            self.meta: dict[str, Any] = json.loads(read_verified(meta_path, REMEDY).decode("utf-8"))
        except DamagedFile:
            raise
        except (OSError, ValueError) as exc:
            raise DataFormatError(meta_path, None, f"cannot be read ({exc}); {REMEDY}") from None
        if not isinstance(self.meta, dict) or self.meta.get("format") != FORMAT:
            raise DataFormatError(meta_path, "format", f"is not a {FORMAT} description; {REMEDY}")
        try:  # each file checked against its digest as it is read (`videotext.digests`)
            tokenizer, graph = (read_verified(self.folder / name, REMEDY) for name in (TOKENIZER_FILE, MODEL_FILE))
        except OSError as exc:
            raise DataFormatError(self.folder, None, f"exported text encoder cannot be read ({exc}); {REMEDY}") from None
        try:
            self.tokenizer = Tokenizer.from_str(tokenizer.decode("utf-8"))
            options = onnxruntime.SessionOptions()
            options.intra_op_num_threads = max(1, int(threads))  # a query is a few tokens: one thread
            options.inter_op_num_threads = 1
            self.session = onnxruntime.InferenceSession(graph, options, providers=["CPUExecutionProvider"])
        except Exception as exc:  # onnxruntime and tokenizers raise their own types for bad files
            raise DataFormatError(self.folder, None, f"exported text encoder cannot be loaded "
                                                     f"({' '.join(str(exc).split())[:200]}); {REMEDY}") from None
        self.tokenizer.enable_truncation(int(self.meta["max_tokens"]))
        self.tokenizer.enable_padding(pad_id=int(self.meta["pad_id"]), pad_token=str(self.meta["pad_token"]),
                                      length=self.meta.get("length"))  # a graph of fixed length: padded to it
        self.dim = int(self.meta["dim"])
        self.clean = CLEANERS[self.meta["clean"]] if self.meta.get("clean") else None
        self.inputs = {i.name for i in self.session.get_inputs()}  # a graph may not read the mask (CLIP's causal tower)

    def tokens(self, texts: Sequence[str]) -> dict[str, np.ndarray]:
        """The graph's inputs for `texts`: input_ids and attention_mask [B, L] (int64), those it reads."""
        encodings = self.tokenizer.encode_batch([self.clean(t) for t in texts] if self.clean else list(texts))
        tokens = {"input_ids": np.asarray([e.ids for e in encodings], np.int64),
                  "attention_mask": np.asarray([e.attention_mask for e in encodings], np.int64)}
        return {name: value for name, value in tokens.items() if name in self.inputs}

    def outputs(self, texts: Sequence[str]) -> dict[str, np.ndarray]:
        """Every output of the graph for `texts` by name: `vectors` [B, D], and the mixture
        `weights` [B, M] of a query side that re-scores (`rescore` in encoder.json)."""
        names = [o.name for o in self.session.get_outputs()]
        if self.meta.get("batch") == 1 and len(texts) > 1:  # a graph traced for one text at a time
            runs = [self.outputs([text]) for text in texts]
            return {name: np.concatenate([run[name] for run in runs]) for name in names}
        return {name: np.asarray(value, np.float32) for name, value in zip(names, self.session.run(None, self.tokens(texts)))}

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Vectors [B, D] of `texts`, as the exported torch encoder gives them."""
        if not len(texts):
            return np.zeros((0, self.dim), np.float32)
        return self.outputs(texts)["vectors"]


def export_is_current(folder: str | os.PathLike, source: str) -> bool:
    """Whether `folder` holds a whole export of the weights `source` names: its description
    readable, made from them, its graph as many bytes as were written, no file damaged."""
    folder = Path(folder)
    try:
        meta = json.loads((folder / META_FILE).read_text(encoding="utf-8"))
        size = (folder / MODEL_FILE).stat().st_size
    except (OSError, ValueError):
        return False
    return (isinstance(meta, dict) and meta.get("source") == source and meta.get("model_bytes") == size
            and not any(problem_of(folder / name) for name in (META_FILE, TOKENIZER_FILE, MODEL_FILE)))


def exported_encoder(folder: str | os.PathLike, name: str = QUERY_FOLDER) -> ExportedTextEncoder | None:
    """The encoder exported into the index folder `folder` as `name`; None when there is none."""
    path = Path(folder) / name
    return ExportedTextEncoder(path) if (path / META_FILE).is_file() else None


def mixture_scores(query: np.ndarray, weights: np.ndarray, experts: np.ndarray, available: np.ndarray) -> np.ndarray:
    """MMT's eq. 6 for one query against stored candidates [C]: Σ_m w_cm a_vm ⟨φ_cm, ψ_vm⟩ / Σ_m w_cm a_vm.

    query [M·D]: concat_m w_cm φ_cm (the exported `vectors`); weights [M]: its mixture weights;
    experts [C, M, D] and available [C, M] (0/1): the candidates' stored parts. The numpy form of
    `videotext.models.mmt.mixture_similarity`: a candidate with no expert the query weighs scores 0."""
    available = available.astype(np.float32)
    numerator = (experts * available[..., None]).reshape(len(experts), -1) @ query.astype(np.float32)  # [C]
    denominator = available @ weights.astype(np.float32)  # [C]
    return numerator / np.where(denominator == 0, np.float32(1e-5), denominator)


class ExportedQuerySearcher:
    """Searches an index with queries encoded by its exported query side: what the run's model
    does (`RunModel.search`), without the model. A query side exported with `rescore: mixture`
    (MMT) orders a shortlist of the index by `mixture_scores`, as the model orders it by the
    method's similarity (`search.shortlist.ranked`, the one rule of both)."""

    def __init__(self, encoder: ExportedTextEncoder):
        self.encoder = encoder
        self.rescore = encoder.meta.get("rescore")

    def query_vectors(self, texts: Sequence[str]) -> np.ndarray:
        """The vectors [B, D] the index is searched with (a search for moments scores steps with them)."""
        return self.encoder.encode(list(texts))

    def search(self, query: str | Sequence[str], index: Any, k: int = 10, where: str | None = None,
               shortlist: int | None = None) -> Any:
        single = isinstance(query, str)
        outputs = self.encoder.outputs([query] if single else list(query))
        rescore = None
        if self.rescore == "mixture" and index.part_names:
            def rescore(i: int, candidates: Sequence[Any]) -> np.ndarray:
                parts = index.parts_for([h.id for h in candidates])
                return mixture_scores(outputs["vectors"][i], outputs["weights"][i], parts["experts"],
                                      parts["available"])

        hits = ranked(index, outputs["vectors"], k, where, rescore, shortlist)
        return hits[0] if single else hits


def exported_searcher(folder: str | os.PathLike) -> ExportedQuerySearcher | None:
    """A searcher through the query side exported into the index folder `folder`; None when the
    index has none (built before the export, or by a method that searches through torch)."""
    encoder = exported_encoder(folder, QUERY_FOLDER)
    return ExportedQuerySearcher(encoder) if encoder is not None else None
