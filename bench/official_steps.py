"""Benchmark: one training step of ours against the official code of Frozen in Time, MMT and COOT.

    python bench/official_steps.py --official /work/official --json bench/results/official_steps.json
    python bench/official_steps.py --device cuda --official DIR --json bench/results/official_steps_cuda.json

DIR holds the three official repositories as fetched (nothing of them is copied into this tree):
DIR/frozen-in-time (m-bain/frozen-in-time), DIR/mmt (gabeur/mmt), DIR/coot-videotext
(gingsi/coot-videotext); a method whose folder is missing is skipped with one line. For each method:

1. the OFFICIAL model is built by its own classes (random weights, paper architecture at CPU sizes),
   its `state_dict()` is converted into ours with the project's converter functions
   (`videotext.convert.<method>`), and one batch is made for both;
2. loss check: two optimisation steps on each side from the same weights, dropout off (p = 0 on both;
   COOT's cycle-consistency loss over every position instead of one sampled per sequence, on both):
   |first-step loss difference| (the target is ≤ 1e-5) and |second-step loss difference| (after one
   optimiser step on each side);
3. timing: the training step (zero_grad, forward, loss, backward, optimiser step, loss read back to
   the host), paper dropout on, ours and theirs alternating, `--repeats` times after warm-up steps, at
   fp32 and under bf16 autocast (`torch.autocast(device, bfloat16)`; on a CPU only when it has
   bf16 instructions): median step time, steps/s and the ratio ours / theirs.

The official step is the official trainer's own sequence (Frozen `trainer/trainer.py` `_train_epoch`,
MMT `trainer/trainer.py` `_train_epoch`, COOT `coot/trainer_retrieval.py` `train_model`), with the
official model, loss and optimiser classes; ours is `method.loss(batch)["loss"]` with the official
optimiser's hyper-parameters in the optimiser `videotext train` builds (`build_optimizer`: Adam and
AdamW fused where torch has the kernel). The official code imports packages that have nothing to do with
these steps (video decoders, loggers, word vectors) or that changed since: they are stubbed or
patched at run time here, in memory, and each stub / patch is named where it is made (`--profile`
prints where each side spends its time).
"""
from __future__ import annotations

import argparse
import collections
import collections.abc
import contextlib
import functools
import importlib
import importlib.util
import io
import json
import math
import os
import platform
import statistics
import sys
import tempfile
import time
import types
from pathlib import Path
from typing import Any, Callable, Iterator

import torch
from torch import nn

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT / "src") not in sys.path:
    sys.path.insert(0, str(ROOT / "src"))

REPOS = {"frozen": "frozen-in-time", "mmt": "mmt", "coot": "coot-videotext"}
CAPTION_WORDS = ("a red circle moves left then a blue square grows while a green star spins and fades "
                 "near the top corner of the frame before two yellow triangles appear and slide right").split()


# --- run-time shims for importing the official code ------------------------------------
class _Anything:
    """What a stub module hands out for any name: called on one callable it returns it (so it
    works as a decorator, e.g. typeguard's `typechecked`), any other call returns another one."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if len(args) == 1 and not kwargs and callable(args[0]):
            return args[0]
        return _Anything()

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _Anything()


class _StubModule(types.ModuleType):
    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _Anything()


def _installed(name: str) -> bool:
    top = name.split(".")[0]
    return top in sys.modules or importlib.util.find_spec(top) is not None


def _parse_axes(side: str) -> list[list[str]]:
    """'b (f n) d' → [['b'], ['f', 'n'], ['d']]; '()' → []."""
    groups: list[list[str]] = []
    current: list[str] | None = None
    for token in side.replace("(", " ( ").replace(")", " ) ").split():
        if token == "(":
            current = []
        elif token == ")":
            groups.append(current or [])
            current = None
        elif current is not None:
            current.append(token)
        else:
            groups.append([token])
    return groups


@functools.lru_cache(maxsize=256)
def _einops_recipe(pattern: str) -> tuple[list[list[str]], list[list[str]]]:
    left, right = pattern.split("->")
    return _parse_axes(left), _parse_axes(right)


def _axis_sizes(tensor: torch.Tensor, groups: list[list[str]], sizes: dict[str, int]) -> dict[str, int]:
    dims = dict(sizes)
    for group, size in zip(groups, tensor.shape):
        unknown = [a for a in group if a not in dims]
        if len(unknown) == 1:
            dims[unknown[0]] = size // math.prod(dims[a] for a in group if a in dims)
    return dims


def _rearrange(tensor: torch.Tensor, pattern: str, **sizes: int) -> torch.Tensor:
    left, right = _einops_recipe(pattern)
    dims = _axis_sizes(tensor, left, sizes)
    flat_in = [a for g in left for a in g]
    flat_out = [a for g in right for a in g]
    x = tensor.reshape([dims[a] for a in flat_in]).permute([flat_in.index(a) for a in flat_out])
    return x.reshape([math.prod(dims[a] for a in g) for g in right])


def _repeat(tensor: torch.Tensor, pattern: str, **sizes: int) -> torch.Tensor:
    left, right = _einops_recipe(pattern)
    dims = _axis_sizes(tensor, left, sizes)
    flat_in = [a for g in left for a in g]
    flat_out = [a for g in right for a in g]
    x = tensor.reshape([dims[a] for a in flat_in]).permute([flat_in.index(a) for a in flat_out if a in flat_in])
    for position, axis in enumerate(flat_out):
        if axis not in flat_in:
            x = x.unsqueeze(position)
    x = x.expand([dims[a] for a in flat_out])
    return x.reshape([math.prod(dims[a] for a in g) for g in right])


def einops_module() -> types.ModuleType:
    """The real einops when installed; else `rearrange` / `repeat` for the patterns the official
    Frozen code uses, done as einops does them (reshape → permute → reshape, recipes cached)."""
    if _installed("einops"):
        return importlib.import_module("einops")
    module = types.ModuleType("einops")
    module.rearrange, module.repeat = _rearrange, _repeat  # type: ignore[attr-defined]
    module.__videotext_shim__ = True  # type: ignore[attr-defined]
    return module


@contextlib.contextmanager
def official_imports(repo: Path, stubs: tuple[str, ...] = (), extra: dict[str, types.ModuleType] | None = None,
                     pydantic_v1: bool = False) -> Iterator[list[str]]:
    """Import from `repo` (put first on sys.path) with stub modules for `stubs` that are not
    installed and the modules of `extra`; afterwards the repository's own top-level packages
    (the three repositories share names such as `model`, `base`, `utils`), the stubs and
    `extra` leave sys.modules again, so the next repository and our code see none of them.
    Yields the list of names that were stubbed."""
    repo = repo.resolve()  # module __file__s are absolute: a relative --official must match them
    before = set(sys.modules)
    added: dict[str, types.ModuleType] = {}
    stubbed: list[str] = []
    for name in stubs:
        if name.split(".")[0] not in added and _installed(name):
            continue
        stubbed.append(name)
        parts = name.split(".")
        for i in range(1, len(parts) + 1):
            dotted = ".".join(parts[:i])
            if dotted not in sys.modules:
                sys.modules[dotted] = added[dotted] = _StubModule(dotted)
                added[dotted].__path__ = []  # a package, so `import a.b` finds the stub a.b
            if i > 1:
                setattr(sys.modules[".".join(parts[: i - 1])], parts[i - 1], sys.modules[dotted])
    for name, module in (extra or {}).items():
        if name not in sys.modules or name == "einops":
            sys.modules[name] = added[name] = module
    saved_pydantic = sys.modules.get("pydantic")
    if pydantic_v1:  # the official COOT code is written for pydantic 1, which pydantic 2 ships as pydantic.v1
        sys.modules["pydantic"] = importlib.import_module("pydantic.v1")
    sys.path.insert(0, str(repo))
    try:
        yield stubbed
    finally:
        sys.path.remove(str(repo))
        if pydantic_v1:
            if saved_pydantic is not None:
                sys.modules["pydantic"] = saved_pydantic
            else:
                sys.modules.pop("pydantic", None)
        for name in list(sys.modules):
            module = sys.modules[name]
            origin = str(getattr(module, "__file__", "") or "")
            if name in added or (name not in before and origin.startswith(str(repo))):
                del sys.modules[name]


# --- helpers --------------------------------------------------------------------------
def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def cpu_has_bf16() -> bool:
    """True when the CPU runs bf16 matrix products natively (AVX512-BF16 / AMX)."""
    try:
        if torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported():
            return True
    except (AttributeError, RuntimeError):
        pass
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


@contextlib.contextmanager
def dropout_off(*models: nn.Module) -> Iterator[None]:
    """Every dropout at p = 0 (nn.Dropout modules and float `dropout` attributes that feed
    `scaled_dot_product_attention`), restored afterwards; train mode otherwise unchanged."""
    saved: list[tuple[Any, str, float]] = []
    for model in models:
        for module in model.modules():
            if isinstance(module, nn.Dropout):
                saved.append((module, "p", module.p))
                module.p = 0.0
            elif isinstance(getattr(module, "dropout", None), float):
                saved.append((module, "dropout", module.dropout))
                module.dropout = 0.0
    try:
        yield
    finally:
        for module, name, value in saved:
            setattr(module, name, value)


def load_converted(method: nn.Module, state: dict[str, torch.Tensor]) -> None:
    result = method.load_state_dict(state, strict=False)
    if result.missing_keys or result.unexpected_keys:
        raise RuntimeError(f"converted state does not fit: missing {result.missing_keys[:5]}, "
                           f"unexpected {result.unexpected_keys[:5]}")


def captions(count: int, seed: int) -> list[str]:
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(count):
        length = int(torch.randint(6, 14, (1,), generator=g))
        start = int(torch.randint(0, len(CAPTION_WORDS) - length, (1,), generator=g))
        out.append(" ".join(CAPTION_WORDS[start : start + length]))
    return out


def same_optimiser(official: torch.optim.Optimizer, params: Any) -> torch.optim.Optimizer:
    """Ours gets the official optimiser's hyper-parameters, built as `videotext train` builds it
    (`build_optimizer`: Adam / AdamW fused where torch has the kernel); another class as is."""
    import inspect

    from videotext.config import OptimConfig
    from videotext.train.schedules import OPTIMIZERS, build_optimizer

    name = {cls: key for key, cls in OPTIMIZERS.items()}.get(type(official))
    d = official.defaults
    if name is not None:
        return build_optimizer(list(params), OptimConfig(name=name, lr=d["lr"], betas=list(d["betas"]), eps=d["eps"],
                                                         weight_decay=d["weight_decay"]))
    accepted = inspect.signature(type(official)).parameters
    return type(official)(params, **{k: v for k, v in d.items() if k in accepted})


def official_optimiser(official: torch.optim.Optimizer, params: Any) -> torch.optim.Optimizer:
    """The official optimiser's class with its very settings (foreach / fused flags included) over our
    parameters: with it on both sides, the ratio is the model's own speed (`--optimiser`)."""
    import inspect

    accepted = inspect.signature(type(official)).parameters
    return type(official)(params, **{k: v for k, v in official.defaults.items() if k in accepted})


COMPILE: list[bool] = []  # --compile: our loss through torch.compile (inductor)
_COMPILED: dict[int, Callable] = {}


def our_step(ours: nn.Module, optimiser: torch.optim.Optimizer, batch: dict[str, Any]) -> Callable[[], float]:
    """Our training step on `batch`: the method's own loss, its backward, the optimiser; returns the loss.
    With `--compile` the loss runs through `torch.compile` (one compiled function per model)."""
    if COMPILE and id(ours) not in _COMPILED:
        _COMPILED[id(ours)] = torch.compile(ours.loss)
    loss_of = _COMPILED.get(id(ours), ours.loss)

    def step() -> float:
        optimiser.zero_grad()
        loss = loss_of(batch)["loss"]
        loss.backward()
        optimiser.step()
        return loss.detach().item()

    return step


class Pair:
    """Ours and theirs for one method: `step_*` run one training step and return the loss."""

    def __init__(self, name: str, sizes: dict[str, Any], ours: nn.Module, theirs: nn.Module,
                 step_ours: Callable[[], float], step_theirs: Callable[[], float],
                 exact: Callable[[], contextlib.AbstractContextManager] | None = None, notes: list[str] | None = None,
                 step_ours_official_optimiser: Callable[[], float] | None = None):
        self.name, self.sizes, self.ours, self.theirs = name, sizes, ours, theirs
        self.step_ours, self.step_theirs = step_ours, step_theirs
        # ours with the official optimiser (its class and settings): the model's own speed against theirs
        self.step_ours_official_optimiser = step_ours_official_optimiser
        self.exact = exact or contextlib.nullcontext  # what else the loss check switches (besides dropout)
        self.notes = notes or []


OPTIMISER: list[str] = ["both"]  # --optimiser: fused (ours as `videotext train` builds it) | official | both
PAPER_SIZE: list[bool] = []  # --paper-size: Frozen at the paper's ViT-B/16 and DistilBERT-base (a GPU's size)
TEXT_MODEL: list[Path] = []  # --text-model: a MiniLM config + tokenizer folder in place of the bundled package


def minilm_path() -> Path:
    """The bundled MiniLM's folder, or `--text-model`'s (its seeded random weights written once: a
    machine where the weight package does not travel; step times depend on shapes, not values)."""
    if not TEXT_MODEL:
        from videotext.text.encoder import default_text_model_path

        return Path(default_text_model_path())
    folder = TEXT_MODEL[0]
    if not any(folder.glob("*.safetensors")):
        from transformers import AutoConfig, AutoModel

        torch.manual_seed(0)
        AutoModel.from_config(AutoConfig.from_pretrained(folder)).save_pretrained(folder)
    return folder


# --- Frozen in Time ---------------------------------------------------------------------
def frozen_text_folder(work: Path, dim: int, layers: int, heads: int) -> Path:
    """A DistilBERT (the paper's text model) with random weights and the bundled MiniLM's uncased
    BERT vocabulary, saved as an HF folder both sides load."""
    import shutil

    from transformers import DistilBertConfig, DistilBertModel

    minilm = minilm_path()
    folder = work / "distilbert"
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        if (minilm / name).exists():
            shutil.copy(minilm / name, folder / name)
    vocab = sum(1 for _ in (minilm / "vocab.txt").open(encoding="utf8"))
    torch.manual_seed(0)
    config = DistilBertConfig(vocab_size=vocab, dim=dim, n_layers=layers, n_heads=heads, hidden_dim=4 * dim,
                              max_position_embeddings=64)
    DistilBertModel(config).save_pretrained(folder)
    return folder


def build_frozen(repo: Path, device: torch.device, work: Path, batch_size: int) -> Pair:
    """Official `model/model.py` FrozenInTime (+ `video_transformer.py` SpaceTimeTransformer),
    `model/loss.py` NormSoftmaxLoss, `model/model.py` sim_matrix, AdamW(lr 3e-5) as the configs."""
    import timm
    import transformers

    from videotext.convert.frozen import infer_model_config, map_keys
    from videotext.models.registry import build_method

    if PAPER_SIZE:  # §3.2 / §4.3: ViT-B/16 at 224 px, 4 frames, DistilBERT-base, a 256-d space
        sizes = {"img_size": 224, "patch_size": 16, "video_dim": 768, "depth": 12, "heads": 12, "frames": 4,
                 "text": "DistilBERT dim 768, 6 layers, 12 heads, MiniLM vocabulary", "embed_dim": 256,
                 "batch": batch_size}
        text_folder = frozen_text_folder(work, 768, 6, 12)
    else:
        sizes = {"img_size": 112, "patch_size": 16, "video_dim": 192, "depth": 4, "heads": 3, "frames": 4,
                 "text": "DistilBERT dim 256, 2 layers, 4 heads, MiniLM vocabulary", "embed_dim": 256,
                 "batch": batch_size}
        text_folder = frozen_text_folder(work, 256, 2, 4)
    einops = einops_module()
    notes = []
    if getattr(einops, "__videotext_shim__", False):
        notes.append("einops is not installed: its rearrange/repeat are replaced by an in-memory equivalent "
                     "(reshape → permute → reshape)")
    stubs = ("humanize", "psutil", "cv2", "decord")
    with official_imports(repo, stubs, {"einops": einops}) as stubbed, contextlib.redirect_stdout(io.StringIO()):
        official = importlib.import_module("model.model")
        vt = importlib.import_module("model.video_transformer")
        official_loss = importlib.import_module("model.loss")
        # FrozenInTime.__init__ hard-codes a ViT-B/16 and a hub text model: point both at the small
        # sizes here (a timm ViT of the same small shape as the spatial init, loaded strict=False as
        # officially; the DistilBERT folder above); the model code itself runs unchanged.
        official.SpaceTimeTransformer = functools.partial(
            vt.SpaceTimeTransformer, img_size=sizes["img_size"], patch_size=sizes["patch_size"],
            embed_dim=sizes["video_dim"], depth=sizes["depth"], num_heads=sizes["heads"])
        small_vit = functools.partial(timm.models.vision_transformer.VisionTransformer, img_size=sizes["img_size"],
                                      patch_size=sizes["patch_size"], embed_dim=sizes["video_dim"],
                                      depth=sizes["depth"], num_heads=sizes["heads"])
        official.timm = types.SimpleNamespace(models=types.SimpleNamespace(vision_transformer=types.SimpleNamespace(
            vit_base_patch16_224=lambda pretrained=False: small_vit())))
        official.AutoModel = types.SimpleNamespace(
            from_pretrained=lambda name, **kw: transformers.AutoModel.from_pretrained(text_folder, **kw))
        torch.manual_seed(1)
        theirs = official.FrozenInTime(
            video_params={"model": "SpaceTimeTransformer", "arch_config": "base_patch16_224",
                          "num_frames": sizes["frames"], "pretrained": False, "time_init": "zeros"},
            text_params={"model": "distilbert-base-uncased", "pretrained": True, "input": "text"},
            projection_dim=sizes["embed_dim"], projection="minimal", load_checkpoint="")
        sim_matrix, loss_fn = official.sim_matrix, official_loss.NormSoftmaxLoss()
    notes += [f"stubbed (not installed, unused by the step): {', '.join(stubbed)}"] if stubbed else []
    with torch.no_grad():  # time attention off its zero init, so the check covers it from step 1
        for block in theirs.video_model.blocks:
            for param in block.timeattn.parameters():
                param.normal_(0.0, 0.02)
    state = {k: v.detach().clone() for k, v in theirs.state_dict().items()}
    config = infer_model_config(state, heads=sizes["heads"], text_model=str(text_folder), num_frames=sizes["frames"])
    ours = build_method("frozen", config)
    mapped = map_keys(state)
    mapped["trained_frames"] = torch.tensor(sizes["frames"], dtype=torch.long)
    load_converted(ours, mapped)
    theirs.to(device).train()
    ours.to(device).train()

    torch.manual_seed(2)
    frames = torch.randn(batch_size, sizes["frames"], 3, sizes["img_size"], sizes["img_size"], device=device)
    text = ours.prepare_text(captions(batch_size, 3))
    text = {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in text.items()}
    their_text = {"input_ids": text["input_ids"], "attention_mask": text["attention_mask"]}
    batch = {"text": text, "video": {"frames": frames}}
    opt_theirs = torch.optim.AdamW(theirs.parameters(), lr=3e-5)  # configs/*.json "optimizer"
    opt_ours = same_optimiser(opt_theirs, ours.parameters())

    def step_theirs() -> float:  # trainer/trainer.py _train_epoch l.83-90
        opt_theirs.zero_grad()
        text_embeds, video_embeds = theirs({"text": their_text, "video": frames})
        loss = loss_fn(sim_matrix(text_embeds, video_embeds))
        loss.backward()
        opt_theirs.step()
        return loss.detach().item()

    step_ours = our_step(ours, opt_ours, batch)
    step_same = our_step(ours, official_optimiser(opt_theirs, ours.parameters()), batch)

    return Pair("frozen", sizes, ours, theirs, step_ours, step_theirs, notes=notes, step_ours_official_optimiser=step_same)


# --- MMT --------------------------------------------------------------------------------
MMT_DIMS = {"face": 512, "s3d": 1024, "speech": 300, "vggish": 128}  # the official experts' feature sizes


def build_mmt(repo: Path, device: torch.device, batch_size: int) -> Pair:
    """Official `model/model.py` CENet (vid_cont bert → `model/bert.py` BertModel, txt_agg bertftn,
    txt_pro gbn, txt_wgh emb, pos_enc tint, out_tok mxp: configs_pub/eccv20/MSRVTT_jsfusion_trainval.json),
    `model/loss.py` MaxMarginRankingLoss(margin 0.05, fix_norm), Adam(lr 5e-5) as that config."""
    import transformers

    from videotext.convert.mmt import OFFICIAL_TYPES, infer_model_config, map_keys
    from videotext.models.registry import build_method

    steps = 10
    sizes = {"d_model": 512, "layers": 4, "heads": 4, "intermediate": 3072, "experts": dict(MMT_DIMS),
             "steps_per_expert": steps, "text": "bundled MiniLM (BERT, 6 layers, width 384), max 30 tokens",
             "batch": batch_size}
    minilm = str(minilm_path())

    class TxtBert:  # transformers 3's `transformers.modeling_bert.BertModel`, loading the local BERT
        @staticmethod
        def from_pretrained(name: str, **kwargs: Any) -> nn.Module:
            return transformers.BertModel.from_pretrained(minilm, **kwargs)

    modeling_bert = types.ModuleType("transformers.modeling_bert")
    modeling_bert.BertModel = TxtBert  # type: ignore[attr-defined]
    vid_bert_params = {"vocab_size_or_config_json_file": 10, "hidden_size": 512, "num_hidden_layers": 4,
                       "num_attention_heads": 4, "intermediate_size": 3072, "hidden_act": "gelu",
                       "hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1,
                       "max_position_embeddings": 32, "type_vocab_size": 19, "initializer_range": 0.02,
                       "layer_norm_eps": 1e-12}
    stubs = ("tensorboardX", "ipdb", "gensim.models.keyedvectors", "gensim.scripts.glove2word2vec", "typeguard")
    with official_imports(repo, stubs, {"transformers.modeling_bert": modeling_bert}) as stubbed:
        official = importlib.import_module("model.model")
        official_loss = importlib.import_module("model.loss")
        experts = sorted(MMT_DIMS)  # compute_dims: experts in sorted order
        torch.manual_seed(1)
        theirs = official.CENet(
            l2renorm=False, expert_dims=collections.OrderedDict(
                (e, {"dim": MMT_DIMS[e], "idx": OFFICIAL_TYPES[e]}) for e in experts),
            tokenizer=None, keep_missing_modalities=True, test_caption_mode="indep", txt_inp="bertftn",
            txt_agg="bertftn", txt_wgh="emb", vid_wgh="none", vid_cont="bert", vid_inp="both", pos_enc="tint",
            out_tok="mxp", vid_bert_params=vid_bert_params, txt_pro="gbn",
            txt_bert_params={"hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1}, same_dim=512)
        loss_fn = official_loss.MaxMarginRankingLoss(margin=0.05, fix_norm=True)
    notes = [f"stubbed (not installed, unused by the step): {', '.join(stubbed)}"] if stubbed else []
    notes.append("transformers.modeling_bert (transformers 3) → a module whose BertModel.from_pretrained "
                 "loads the bundled MiniLM with the official dropout arguments")
    state = {k: v.detach().clone() for k, v in theirs.state_dict().items()}
    args = {"vid_cont": "bert", "vid_bert_params": vid_bert_params, "keep_missing_modalities": True}
    config, expert_dims = infer_model_config(state, args, minilm, 4)
    ours = build_method("mmt", config, expert_dims=expert_dims)
    load_converted(ours, map_keys(state, ours.experts))
    theirs.to(device).train()
    ours.to(device).train()

    # one batch: variable lengths (padding) and two videos lacking an expert
    g = torch.Generator().manual_seed(2)
    b = batch_size
    features, masks, times, maxpool, avgpool = {}, {}, {}, {}, {}
    lengths = torch.tensor([steps - (i % 4) for i in range(b)])
    for e in experts:
        mask = torch.arange(steps)[None, :] < lengths[:, None]  # [B, T]
        if e == "face":
            mask[1] = False
        if e == "speech":
            mask[2] = False
        feats = torch.randn(b, steps, MMT_DIMS[e], generator=g) * mask[..., None]
        features[e], masks[e] = feats, mask
        times[e] = torch.arange(steps, dtype=torch.float32)[None].expand(b, steps) * 1.5  # seconds
        maxpool[e] = torch.where(mask[..., None], feats, torch.full_like(feats, -math.inf)).amax(1)
        maxpool[e] = torch.where(mask.any(1, keepdim=True), maxpool[e], torch.zeros_like(maxpool[e]))
        avgpool[e] = feats.sum(1) / mask.sum(1, keepdim=True).clamp_min(1)
    to = lambda d: {k: v.to(device) for k, v in d.items()}  # noqa: E731
    features, masks, times, maxpool, avgpool = map(to, (features, masks, times, maxpool, avgpool))
    text = ours.prepare_text(captions(b, 3))
    text = {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in text.items()}
    batch = {"text": text, "video": {"features": features, "masks": masks, "times": times, "pooled_max": maxpool}}
    token_ids = torch.stack([text["input_ids"], text["attention_mask"]], -1)[:, None]  # [B, captions 1, L, 2]
    # the official dataset's timestamps: t / window + 2, padding 1 (base_dataset); indicators 1 = real
    official_t = {e: torch.where(masks[e], times[e] + 2, torch.ones_like(times[e])) for e in experts}
    indicators = {e: masks[e].long() for e in experts}
    opt_theirs = torch.optim.Adam(theirs.parameters(), lr=5e-5, weight_decay=0)
    opt_ours = same_optimiser(opt_theirs, ours.parameters())

    def step_theirs() -> float:  # trainer/trainer.py _train_epoch l.175-206 (out 'conf')
        # CENet.forward replaces entries of `features` and clamps `features_t` in place: fresh containers
        minibatch = {"token_ids": token_ids, "features": dict(features),
                     "features_t": {e: t.clone() for e, t in official_t.items()}, "features_ind": indicators,
                     "features_avgpool": avgpool, "features_maxpool": maxpool, "query_masks": None}
        opt_theirs.zero_grad()
        output = theirs(**minibatch, out="conf", device=device, debug=False)
        loss = loss_fn(output["cross_view_conf_matrix"])
        loss.backward()
        opt_theirs.step()
        return loss.detach().item()

    step_ours = our_step(ours, opt_ours, batch)
    step_same = our_step(ours, official_optimiser(opt_theirs, ours.parameters()), batch)

    return Pair("mmt", sizes, ours, theirs, step_ours, step_theirs, notes=notes, step_ours_official_optimiser=step_same)


# --- COOT -------------------------------------------------------------------------------
def build_coot(repo: Path, device: torch.device, batch_size: int) -> Pair:
    """Official `coot/model_retrieval.py` RetrievalModelManager (4 × `nntrainer/models/transformer_legacy.py`
    TransformerLegacy) from `config/retrieval/paper2020/anet_coot.yaml`, the losses of
    `coot/trainer_retrieval.py` RetrievalTrainer (compute_total_constrastive_loss, compute_cyclecons_loss:
    `coot/loss_fn.py` ContrastiveLoss, CycleConsistencyLoss) and `nntrainer/optimization.py` make_optimizer."""
    import numpy as np

    from videotext.config import to_plain
    from videotext.convert.coot import NETS, convert_state, official_config
    from videotext.data.hierarchy import collate_hierarchy
    from videotext.models.registry import build_method

    use_cuda = device.type == "cuda"
    config_file = repo / "config" / "retrieval" / "paper2020" / "anet_coot.yaml"
    video_dim, text_dim = 2048, 1536  # anet_coot.yaml dataset_train vid_feat_dim / text_feat_dim
    sizes = {"hidden": 384, "heads": 8, "ff": 384, "af": "768, 2 heads", "video_features": video_dim,
             "text_features": text_dim, "batch": batch_size, "clips_per_video": "2-5", "frames_per_clip": "4-12",
             "words_per_sentence": "6-16", "config": "anet_coot.yaml (the paper's ActivityNet network)"}
    # `from collections import Iterable, Mapping` (nntrainer/typext.py) predates Python 3.10
    for name in ("Iterable", "Mapping"):
        if not hasattr(collections, name):
            setattr(collections, name, getattr(collections.abc, name))
    stubs = ("pathspec", "GPUtil", "psutil")
    with official_imports(repo, stubs, pydantic_v1=True) as stubbed:
        configs = importlib.import_module("coot.configs_retrieval")
        manager_module = importlib.import_module("coot.model_retrieval")
        trainer_module = importlib.import_module("coot.trainer_retrieval")
        loss_module = importlib.import_module("coot.loss_fn")
        optimization = importlib.import_module("nntrainer.optimization")
        raw = importlib.import_module("nntrainer.utils_yaml").load_yaml_config_file(config_file)
        raw["use_cuda"] = use_cuda
        raw["use_multi_gpu"] = False
        raw["fp16_train"] = raw["fp16_val"] = False  # precision comes from outside (bf16 autocast), as for ours
        assert (raw["dataset_train"]["vid_feat_dim"], raw["dataset_train"]["text_feat_dim"]) == (video_dim, text_dim)
        cfg = configs.RetrievalConfig(raw)
        torch.manual_seed(1)
        manager = manager_module.RetrievalModelManager(cfg)
    notes = [f"stubbed (not installed, unused by the step): {', '.join(stubbed)}"] if stubbed else []
    notes += ["collections.Iterable / Mapping aliased to collections.abc (removed in Python 3.10)",
              "pydantic → pydantic.v1 while importing (the code is pydantic-1)",
              "coot.model_retrieval.autocast (torch.cuda.amp.autocast(enabled=cfg.fp16)) → no-op, so the "
              "outer autocast applies to both sides"]
    manager_module.autocast = lambda enabled=True: contextlib.nullcontext()
    theirs = nn.ModuleDict({name: manager.model_dict[name] for name in NETS})
    # the trainer's loss methods read only cfg and the two loss modules
    trainer = object.__new__(trainer_module.RetrievalTrainer)
    trainer.cfg = cfg
    trainer.loss_contr = loss_module.ContrastiveLoss(cfg.train.contrastive_loss_config.margin, use_cuda=use_cuda)
    trainer.loss_cycle_cons = loss_module.CycleConsistencyLoss(use_cuda=use_cuda)

    state = {name: {k: v.detach().clone() for k, v in net.state_dict().items()} for name, net in theirs.items()}
    config, feature_dim = official_config(state, num_heads=8, cmc_weight=cfg.train.loss_cycle_cons)
    ours = build_method("coot", to_plain(config), expert_dims={"video": feature_dim})
    load_converted(ours, convert_state(state))
    theirs.to(device).train()
    ours.to(device).train()

    g = torch.Generator().manual_seed(2)
    counts = [2 + i % 4 for i in range(batch_size)]
    video_items, text_items = [], []
    for count in counts:
        clips = [torch.randn(int(torch.randint(4, 13, (1,), generator=g)), video_dim, generator=g).numpy()
                 for _ in range(count)]
        sentences = [torch.randn(int(torch.randint(6, 17, (1,), generator=g)), text_dim, generator=g).numpy()
                     for _ in range(count)]
        video_items.append((np.concatenate(clips), clips))
        text_items.append((np.concatenate(sentences), sentences))
    video = {k: v.to(device) for k, v in collate_hierarchy(video_items, video_dim, "frame").items()}
    text = {k: v.to(device) for k, v in collate_hierarchy(text_items, text_dim, "word").items()}
    batch = {"video": video, "text": text}
    # the official batch (RetrievalDataBatchTuple fields the step reads; masks True = padding)
    official = types.SimpleNamespace(
        vid_feat=video["frames"], vid_feat_mask=~video["frame_mask"], vid_feat_len=video["frame_mask"].sum(1),
        clip_feat=video["group_frames"], clip_feat_mask=~video["group_frame_mask"],
        clip_feat_len=video["group_frame_mask"].sum(1), clip_num=video["group_counts"],
        par_feat=text["words"], par_feat_mask=~text["word_mask"], par_feat_len=text["word_mask"].sum(1),
        sent_feat=text["group_words"], sent_feat_mask=~text["group_word_mask"],
        sent_feat_len=text["group_word_mask"].sum(1), sent_num=text["group_counts"])
    params, _names, _flat = manager.get_all_params()
    opt_theirs = optimization.make_optimizer(cfg.optimizer, params)
    opt_ours = same_optimiser(opt_theirs, ours.parameters())

    def step_theirs() -> float:  # coot/trainer_retrieval.py train_model, fp32 branch
        opt_theirs.zero_grad()
        visual_data = manager.encode_visual(official)
        text_data = manager.encode_text(official)
        contr_loss = trainer.compute_total_constrastive_loss(visual_data, text_data)
        cc_loss = trainer.compute_cyclecons_loss(visual_data, text_data)
        loss = contr_loss + cc_loss
        loss.backward()
        opt_theirs.step()
        return loss.detach().item()

    step_ours = our_step(ours, opt_ours, batch)
    step_same = our_step(ours, official_optimiser(opt_theirs, ours.parameters()), batch)

    @contextlib.contextmanager
    def every_position() -> Iterator[None]:
        """Cycle consistency over every position on both sides (official num_samples -1, ours
        cmc_samples 0): the paper's one random position per sequence draws differently."""
        trainer.loss_cycle_cons.num_samples, ours.config.cmc_samples = -1, 0
        try:
            yield
        finally:
            trainer.loss_cycle_cons.num_samples, ours.config.cmc_samples = 1, 1

    return Pair("coot", sizes, ours, theirs, step_ours, step_theirs, exact=every_position, notes=notes,
                step_ours_official_optimiser=step_same)


BUILDERS = {"frozen": build_frozen, "mmt": build_mmt, "coot": build_coot}


# --- measuring ---------------------------------------------------------------------------
def autocast(device: torch.device, precision: str) -> contextlib.AbstractContextManager:
    if precision == "bf16":
        return torch.autocast(device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


def loss_check(pair: Pair, device: torch.device, precision: str) -> dict[str, float]:
    """Two steps each from the same weights, dropout off: the losses and their differences.
    (Call on fresh models: the two sides' weights must still be equal.)"""
    losses: dict[str, list[float]] = {"ours": [], "theirs": []}
    with dropout_off(pair.ours, pair.theirs), pair.exact():
        for side, step in (("theirs", pair.step_theirs), ("ours", pair.step_ours)):
            torch.manual_seed(7)
            for _ in range(2):
                with autocast(device, precision):
                    losses[side].append(step())
    return {"loss_ours": losses["ours"][0], "loss_theirs": losses["theirs"][0],
            "first_step_abs_diff": abs(losses["ours"][0] - losses["theirs"][0]),
            "second_step_abs_diff": abs(losses["ours"][1] - losses["theirs"][1])}


def time_steps(pair: Pair, device: torch.device, precision: str, repeats: int, warmup: int) -> dict[str, Any]:
    """Alternate one step of each side (the order turned every repeat); medians. Sides: ours (the
    optimiser `videotext train` builds: fused Adam / AdamW), theirs, and, with `--optimiser both` or
    `official`, ours with the official optimiser (`official_optimiser`)."""
    sides = {"ours": pair.step_ours, "theirs": pair.step_theirs}
    if OPTIMISER[0] in ("both", "official") and pair.step_ours_official_optimiser is not None:
        sides["ours_official_optimiser"] = pair.step_ours_official_optimiser
    if OPTIMISER[0] == "official" and "ours_official_optimiser" in sides:
        del sides["ours"]
    times: dict[str, list[float]] = {side: [] for side in sides}
    for _ in range(warmup):
        for step in sides.values():
            with autocast(device, precision):
                step()
    names = list(sides)
    for i in range(repeats):
        order = names[i % len(names):] + names[: i % len(names)]
        for side in order:
            sync(device)
            started = time.perf_counter()
            with autocast(device, precision):
                sides[side]()
            sync(device)
            times[side].append(time.perf_counter() - started)
    out: dict[str, Any] = {}
    theirs = statistics.median(times["theirs"])
    for side in names:
        median = statistics.median(times[side])
        out[f"{side}_s"], out[f"{side}_steps_per_s"], out[f"{side}_all_s"] = median, 1 / median, times[side]
        if side != "theirs":
            suffix = "" if side == "ours" else "_official_optimiser"
            out[f"ratio{suffix}"] = theirs / median
            out[f"ratio{suffix}_median_of_pairs"] = statistics.median(
                t / o for o, t in zip(times[side], times["theirs"]))
    return out


def profile(pair: Pair, device: torch.device, precision: str, rows: int = 18) -> dict[str, str]:
    from torch.profiler import ProfilerActivity, profile as torch_profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    tables = {}
    for side, step in (("ours", pair.step_ours), ("theirs", pair.step_theirs)):
        with autocast(device, precision):
            step()
        with torch_profile(activities=activities) as prof:
            with autocast(device, precision):
                step()
        key = "self_cuda_time_total" if device.type == "cuda" else "self_cpu_time_total"
        tables[side] = prof.key_averages().table(sort_by=key, row_limit=rows)
    return tables


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--methods", default="frozen,mmt,coot")
    parser.add_argument("--official", type=Path, default=Path("/work/official"),
                        help="folder holding frozen-in-time/, mmt/ and coot-videotext/")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=0, help="0 = per method: frozen 8, mmt 16, coot 16 "
                        "(x4 on cuda)")
    parser.add_argument("--precisions", default="", help="comma list of fp32,bf16; default fp32 plus bf16 "
                        "where the device has it")
    parser.add_argument("--profile", action="store_true", help="print torch.profiler tables of one step each")
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (0 = torch's default)")
    parser.add_argument("--paper-size", action="store_true", help="Frozen at the paper's ViT-B/16 224 px and DistilBERT-base")
    parser.add_argument("--text-model", type=Path, default=None,
                        help="a MiniLM config + tokenizer folder (random weights) in place of the bundled MiniLM")
    parser.add_argument("--optimiser", choices=["fused", "official", "both"], default="both",
                        help="ours with the optimiser `videotext train` builds (fused Adam / AdamW), with the official "
                             "optimiser's class and settings (the model's own speed), or both, each timed against theirs")
    parser.add_argument("--compile", action="store_true", help="our loss through torch.compile (compiled in the warm-up)")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    OPTIMISER[0] = args.optimiser
    if args.compile:
        COMPILE.append(True)
    if args.text_model:
        TEXT_MODEL.append(args.text_model.resolve())
    if args.paper_size:
        PAPER_SIZE.append(True)

    device = torch.device(args.device)
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    # load transformers' lazy modules now: with stub modules around, its availability probes
    # (importlib.util.find_spec) would trip on them
    from transformers import AutoModel, BertModel, DistilBertModel  # noqa: F401
    if device.type == "cuda" and not torch.cuda.is_available():
        sys.exit("--device cuda: no CUDA device")
    if args.threads:
        torch.set_num_threads(args.threads)
    bf16 = (torch.cuda.is_bf16_supported() if device.type == "cuda" else cpu_has_bf16())
    precisions = [p for p in args.precisions.split(",") if p] or (["fp32", "bf16"] if bf16 else ["fp32"])
    default_batch = {"frozen": 8, "mmt": 16, "coot": 16}
    scale = 4 if device.type == "cuda" else 1
    hardware = torch.cuda.get_device_name(device) if device.type == "cuda" else cpu_model()
    print(f"device: {device} ({hardware}), torch {torch.__version__}, {torch.get_num_threads()} CPU threads, "
          f"precisions {precisions}, {args.repeats} repeats")
    results: dict[str, Any] = {"device": str(device), "hardware": hardware, "torch": torch.__version__,
                               "threads": torch.get_num_threads(), "repeats": args.repeats,
                               "optimiser": args.optimiser, "compile": args.compile,
                               "load_average_before": os.getloadavg(), "methods": {}}
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    unknown = [m for m in methods if m not in BUILDERS]
    if unknown:
        sys.exit(f"--methods: unknown {', '.join(unknown)} (known: {', '.join(BUILDERS)})")
    with tempfile.TemporaryDirectory() as tmp:
        for method in methods:
            repo = args.official / REPOS[method]
            if not repo.is_dir():
                print(f"{method}: skipped, official repository not found at {repo}")
                results["methods"][method] = {"skipped": f"no {repo}"}
                continue
            batch_size = args.batch_size or default_batch[method] * scale
            entry: dict[str, Any] = {"precisions": {}}
            started = time.perf_counter()
            for precision in precisions:
                # fresh models per precision: the loss check needs both sides at the same weights
                kwargs = {"work": Path(tmp)} if method == "frozen" else {}
                pair = BUILDERS[method](repo, device, batch_size=batch_size, **kwargs)
                entry["sizes"], entry["notes"] = pair.sizes, pair.notes
                check = loss_check(pair, device, precision)
                timing = time_steps(pair, device, precision, args.repeats, args.warmup)
                entry["precisions"][precision] = {**check, **timing}
                same = (f"; with the official optimiser on both sides ours {timing['ours_official_optimiser_steps_per_s']:.2f}"
                        f" steps/s, ratio {timing['ratio_official_optimiser']:.2f}x"
                        if "ratio_official_optimiser" in timing else "")
                fused = (f"steps/s ours (fused optimiser) {timing['ours_steps_per_s']:.2f} theirs "
                         f"{timing['theirs_steps_per_s']:.2f}, ratio {timing['ratio']:.2f}x" if "ratio" in timing
                         else f"steps/s theirs {timing['theirs_steps_per_s']:.2f}")
                print(f"{method:6s} {precision}: first-step loss ours {check['loss_ours']:.6f} theirs "
                      f"{check['loss_theirs']:.6f} |diff| {check['first_step_abs_diff']:.2e}, second step "
                      f"|diff| {check['second_step_abs_diff']:.2e}; {fused}{same}")
                if args.profile:
                    for side, table in profile(pair, device, precision).items():
                        print(f"--- {method} {precision} {side}\n{table}")
                del pair
            entry["seconds"] = time.perf_counter() - started
            for note in entry.get("notes", []):
                print(f"  note: {note}")
            results["methods"][method] = entry
    results["load_average_after"] = os.getloadavg()
    print(f"load average (1, 5, 15 min) before {results['load_average_before']}, after {results['load_average_after']}"
          " (other processes on the machine slow both sides; the ratio is measured step by step alternating)")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        tmp_json = args.json.with_suffix(args.json.suffix + ".tmp")
        tmp_json.write_text(json.dumps(results, indent=2))
        tmp_json.replace(args.json)
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
