"""The interface every method implements (`videotext.models.registry` names them).

A method is an `nn.Module` with four operations:

    encode_text(batch)  -> Embedding        per caption (or paragraph)
    encode_video(batch) -> Embedding        per video (or clip)
    similarity(text, video) -> [n_text, n_video]
    loss(batch) -> {"loss": scalar, <named parts>...}

plus a `Config` dataclass (its defaults from the paper) and two data hooks the shared
loaders call: `prepare_text(list[str])` turns strings into model inputs, and
`video_inputs` says what the video side consumes ("features" from a FeatureStore or
"frames" decoded from pixels). Adding a method never touches the trainer, the metric
or the index.

Evaluation and reports: a method returns data; evaluation measures and draws. It never
imports `videotext.eval` (nor train, inference or search); it declares by name what
evaluation code to run on it:

    protocol        how one split is evaluated, for validation (model selection), the one
                    test evaluation and `videotext eval`: `videotext.eval.protocols.evaluate_split`
                    runs `PROTOCOLS[method.protocol]`. "multi_caption" (default: every caption
                    a query, t2v and v2t); "hierarchy" (COOT: + paragraph↔video and
                    sentence↔clip, `videotext.eval.hierarchy`, which calls the method's
                    `encode_video_hierarchy` / `encode_text_hierarchy` / `text_source`).
    report_section  the method's own part of the run report, or "" for none:
                    `videotext.eval.run_report` calls `SECTIONS[method.report_section]`, which
                    evaluates through the method's hooks and draws ("experts": MMT's
                    per-expert removal and mixture weights, `videotext.eval.mmt_report`;
                    "captioning": Support-set's captioning scores and attention map,
                    `videotext.eval.supportset_report`).

A new protocol or report section is one function in `videotext.eval` and its name in that
table; the method only names it.
"""
from __future__ import annotations

from typing import Any, ClassVar, Iterable

import torch
from torch import nn

from videotext.config import to_plain
from videotext.data.loaders import CaptionVideoBatches, caption_video_batch, video_batches
from videotext.distributed import LossGather

from videotext.embedding import Embedding, concat_embeddings, embedding_to  # noqa: F401  (re-exported)


class Method(nn.Module):
    """Base class of every method (see the module docstring for the contract)."""

    name: ClassVar[str] = ""
    Config: ClassVar[type]
    video_inputs: ClassVar[str] = "features"  # "features" | "frames"
    # "retrieval": ranks videos for a text (the four operations below); "moments": finds the spans of a
    # given video for a text and is evaluated by the "moments" protocol (it has no video embedding)
    task: ClassVar[str] = "retrieval"
    # Evaluation and reports are declared, not implemented, here (see the module docstring):
    protocol: ClassVar[str] = "multi_caption"  # a name in videotext.eval.protocols.PROTOCOLS
    report_section: ClassVar[str] = ""  # "" or a name in videotext.eval.run_report.SECTIONS
    gather: LossGather = LossGather()  # what the losses see of other ranks (set by build_method)

    def __init__(self, config: Any):
        super().__init__()
        self.config = config

    # --- the four operations -----------------------------------------------------------
    def encode_text(self, batch: dict[str, Any]) -> Embedding:
        raise NotImplementedError

    def encode_video(self, batch: dict[str, Any]) -> Embedding:
        raise NotImplementedError

    def similarity(self, text: Embedding, video: Embedding, chunk_size: int = 4096) -> torch.Tensor:
        """[n_text, n_video] scores, higher = closer; default: chunked dot products."""
        if not isinstance(text, torch.Tensor) or not isinstance(video, torch.Tensor):
            raise NotImplementedError(f"{type(self).__name__} must define similarity for its embeddings")
        rows = [text[i : i + chunk_size] @ video.T for i in range(0, text.shape[0], chunk_size)]
        return torch.cat(rows) if rows else text.new_zeros((0, video.shape[0]))

    def loss(self, batch: dict[str, Any]) -> dict[str, torch.Tensor]:
        raise NotImplementedError

    # --- the chunked contrastive step (`train.chunk`, videotext.train.grad_cache) ---------
    def chunk_inputs(self, batch: dict[str, Any]) -> tuple[Any, Any]:
        """(the text tower's inputs, the video tower's inputs) of a training batch, for a method
        whose loss sees the batch's rows only through `encode_text` / `encode_video` and takes
        them in `loss_from_embeddings`; both are sliced by rows. Other methods do not chunk."""
        raise NotImplementedError(f"{type(self).__name__} has no chunked contrastive step")

    def loss_from_embeddings(self, text: Embedding, video: Embedding, batch: dict[str, Any]) -> dict[str, torch.Tensor]:
        """`loss(batch)` given the batch's text and video embeddings (see `chunk_inputs`)."""
        raise NotImplementedError(f"{type(self).__name__} has no chunked contrastive step")

    @property
    def chunks_contrastive_step(self) -> bool:
        """True when the method's towers can run `train.chunk` rows at a time (Gradient Cache)."""
        return type(self).chunk_inputs is not Method.chunk_inputs

    # --- index hooks: one vector per video / query for a dot-product index --------------
    def index_vectors(self, video: Embedding) -> torch.Tensor:
        """[N, D] vectors whose dot product with `query_vectors` ranks like `similarity`."""
        if not isinstance(video, torch.Tensor):
            raise NotImplementedError(f"{type(self).__name__} must define index_vectors for its embeddings")
        return video

    def query_vectors(self, text: Embedding) -> torch.Tensor:
        if not isinstance(text, torch.Tensor):
            raise NotImplementedError(f"{type(self).__name__} must define query_vectors for its embeddings")
        return text

    # --- data hooks --------------------------------------------------------------------
    def prepare_text(self, texts: list[str]) -> dict[str, Any]:
        """Strings → the inputs `encode_text` takes (token ids, masks …)."""
        raise NotImplementedError

    def train_batches(self, dataset: Any, read_features: Any, batch_size: int, seed: int) -> Any:
        """Training batches for one split: an object with `len()` and `batch(epoch, index)`.

        The default draws one caption per video with its expert features; methods with
        other inputs (frames, clip/sentence hierarchies) override this and the next hook.
        Batches must be pure functions of (seed, epoch, index) so resume stays exact.
        """
        return CaptionVideoBatches(dataset, read_features, self.prepare_text, batch_size, seed)

    # Training from WebDataset shards of expert features (`data.shards`): the default caption-video
    # batches stream; methods whose batches are frames or hierarchies say False, or (frames) declare
    # the clips they read with `shard_clips(config)` (`videotext.data.streaming.ClipShards`).
    streams_shards: ClassVar[bool] = True

    def stream_batch(self, videos: list[Any], read_features: Any, epoch: int, seed: int) -> dict[str, Any]:
        """The training batch of `videos` (streamed from shards), built as `train_batches` builds it."""
        return caption_video_batch(videos, read_features, self.prepare_text, seed, epoch)

    def video_batches(self, dataset: Any, read_features: Any, batch_size: int) -> Iterable[dict[str, Any]]:
        """Every video of `dataset` once, in order, as `encode_video` inputs (with "video_ids")."""
        return video_batches(dataset, read_features, batch_size)

    @property
    def reads_subsampled_steps(self) -> bool:
        """True when the video side reads each expert only through `VideoFeatures`: at most
        `data.max_steps_per_expert` steps, chosen by `subsample_steps`. An index of whole videos
        then extracts only those steps of its frame networks (`max_steps`), with the same result."""
        return type(self).video_batches is Method.video_batches

    def cast_for_inference(self, dtype: torch.dtype) -> None:
        """Store the weights of networks that run faster without autocast's per-op casts in
        `dtype` (bf16), for a model that only encodes from now on. Default: nothing; under
        bf16 autocast the other methods' matrix products already run in bf16."""

    def expert_options(self) -> dict[str, dict[str, Any]]:
        """Extraction options per expert that this method's weights require (e.g. the CLIP image
        tower matching its text tower); `index build` uses them for new videos. Default: none."""
        return {}

    def config_dict(self) -> dict[str, Any]:
        return to_plain(self.config)
