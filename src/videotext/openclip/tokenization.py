"""open_clip's tokenizers by model name (open_clip's `tokenizer.py`), and its CLIP BPE tokenizer as a
`tokenizers.Tokenizer` for the torch-free query path."""
from __future__ import annotations

from typing import Any

from videotext.errors import VideoTextError
from videotext.hub import real_tokenizer
from videotext.openclip.factory import _open_clip, architecture, hf_tokenizer_name, through_hub


def tokenizer(name: str) -> Any:
    """open_clip's tokenizer of `name`: its BPE vocabulary ships in the wheel; an HF tokenizer
    (`xlm-roberta-base`, an `hf-hub:` model's) comes through the hub cache."""
    open_clip = _open_clip()
    arch = architecture(name)
    hf_name = hf_tokenizer_name(arch)
    what = f"open_clip {arch} tokenizer" + (f" {hf_name!r}" if hf_name else "")
    try:
        return through_hub(what, bool(hf_name) or ":" in arch, lambda: _real_tokenizer(open_clip.get_tokenizer(arch)))
    except (RuntimeError, OSError, ValueError) as exc:
        raise VideoTextError(f"{what}: cannot load ({' '.join(str(exc).split())[:400]})") from None


# open_clip's `SimpleTokenizer` splits the cleaned text into words with this pattern before BPE
CLIP_WORDS = r"""<start_of_text>|<end_of_text>|'s|'t|'re|'ve|'m|'ll|'d|[\p{L}]+|[\p{N}]|[^\s\p{L}\p{N}]+"""


def fast_bpe_tokenizer(clip_tokenizer: Any) -> Any | None:
    """open_clip's own CLIP BPE tokenizer (`SimpleTokenizer` with its default `lower` cleaning) as a
    `tokenizers.Tokenizer` that gives the same ids for text cleaned as `query_encoder.clip_clean`
    cleans it: start and end tokens, and with truncation the end token kept last, as open_clip
    cuts. None for any other tokenizer (an HF tokenizer, another cleaning, extra special tokens)."""
    from open_clip.tokenizer import SimpleTokenizer, _clean_lower
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers, processors

    if type(clip_tokenizer) is not SimpleTokenizer or clip_tokenizer.clean_fn is not _clean_lower or \
            getattr(clip_tokenizer, "reduction_fn", None) is not None or len(clip_tokenizer.all_special_ids) != 2:
        return None
    merges = sorted(clip_tokenizer.bpe_ranks, key=clip_tokenizer.bpe_ranks.get)
    fast = Tokenizer(models.BPE(vocab=dict(clip_tokenizer.encoder), merges=[tuple(m) for m in merges],
                                end_of_word_suffix="</w>"))
    fast.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(CLIP_WORDS), behavior="removed", invert=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    start, end = clip_tokenizer.sot_token_id, clip_tokenizer.eot_token_id
    fast.post_processor = processors.TemplateProcessing(
        single="<start_of_text> $A <end_of_text>", special_tokens=[("<start_of_text>", start), ("<end_of_text>", end)])
    fast.add_special_tokens(["<start_of_text>", "<end_of_text>"])
    return fast


def _real_tokenizer(tokenizer: Any) -> Any:
    """open_clip's tokenizer, refused (so `from_hub` downloads) when its HF tokenizer came from a
    cache without the tokenizer files (`videotext.hub.real_tokenizer`)."""
    hf = getattr(tokenizer, "tokenizer", None)
    if hf is not None:
        real_tokenizer(hf)
    return tokenizer
