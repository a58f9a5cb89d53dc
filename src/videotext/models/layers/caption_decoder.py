"""Autoregressive caption decoders p(t | e): the captioner of Support-set (§3.1.2, eq. 2-3).

The paper decodes with "a pre-trained T-5 decoder" (T5-base). Three decoders share one
interface (`forward` → next-token logits, `nll`, `generate`):

- `HFCaptionDecoder` over a pre-trained HF model by path: a T5's decoder and LM head
  cross-attending to the (projected) memory, as in the paper; or a BERT used as a decoder,
  causal self-attention plus new cross-attention layers (Rothe et al. 2020, "Leveraging
  pre-trained checkpoints for sequence generation"; HF `is_decoder=True,
  add_cross_attention=True`), which warm-starts from the bundled MiniLM where no T5
  weights exist;
- `CaptionDecoder`, a small pre-norm transformer decoder trained from scratch on the text
  encoder's WordPiece vocabulary ([CLS] = begin, [SEP] = end), output tied to its token
  embedding: the earlier default, kept as `decoder: scratch`.

Generation is greedy (`beam_size=1`) or beam search with length penalty.
"""
from __future__ import annotations

import torch
from torch import nn

from videotext.hub import real_tokenizer
from videotext.losses.captioning import caption_loss


class AutoregressiveDecoder(nn.Module):
    """Teacher-forced NLL and greedy / beam generation over `forward(tokens, memory, memory_mask)`.

    Subclasses set `bos_id`, `eos_id`, `pad_id`, `max_len` and return next-token logits
    [B, L, V] from tokens [B, L] (starting with BOS) and memory [B, M, D_mem] (mask True = real).
    """

    bos_id: int
    eos_id: int
    pad_id: int
    max_len: int

    def nll(self, targets: torch.Tensor, memory: torch.Tensor, memory_mask: torch.Tensor) -> torch.Tensor:
        """Mean token negative log-likelihood of `targets` [B, L] = BOS w_1 … w_n EOS PAD…
        (teacher forcing: input = targets[:, :-1], label = targets[:, 1:])."""
        targets = targets[:, : self.max_len + 1]
        logits = self(targets[:, :-1], memory, memory_mask)  # [B, L-1, V]
        return caption_loss(logits, targets[:, 1:], self.pad_id)

    @torch.no_grad()
    def generate(self, memory: torch.Tensor, memory_mask: torch.Tensor, beam_size: int = 1,
                 max_len: int | None = None, length_penalty: float = 0.6) -> list[list[int]]:
        """Token ids (without BOS/EOS) per video: greedy for `beam_size=1`, else beam search whose
        finished hypotheses are ranked by Σ log p / length**length_penalty (0.6: GNMT's α; with 1.0
        the synthetic test captions degenerate into long repetitions, CIDEr 48 vs 164)."""
        max_len = min(max_len or self.max_len, self.max_len)
        batch = memory.shape[0]
        if beam_size <= 1:
            tokens = torch.full((batch, 1), self.bos_id, dtype=torch.long, device=memory.device)
            done = torch.zeros(batch, dtype=torch.bool, device=memory.device)
            for _ in range(max_len - 1):
                next_token = self(tokens, memory, memory_mask)[:, -1].argmax(-1)  # [B]
                next_token = torch.where(done, torch.full_like(next_token, self.eos_id), next_token)
                tokens = torch.cat([tokens, next_token[:, None]], 1)
                done |= next_token == self.eos_id
                if done.all():
                    break
            return [_strip(row.tolist()[1:], self.eos_id) for row in tokens]
        return [self._beam_one(memory[i : i + 1], memory_mask[i : i + 1], beam_size, max_len, length_penalty)
                for i in range(batch)]

    def _beam_one(self, memory: torch.Tensor, memory_mask: torch.Tensor, beam_size: int, max_len: int,
                  length_penalty: float) -> list[int]:
        """Beam search for one video: memory [1, M, D]."""
        beams = [([self.bos_id], 0.0)]
        finished: list[tuple[list[int], float]] = []
        for _ in range(max_len - 1):
            tokens = torch.tensor([b[0] for b in beams], device=memory.device)  # [K, t]
            k = tokens.shape[0]
            logp = self(tokens, memory.expand(k, -1, -1), memory_mask.expand(k, -1))[:, -1].log_softmax(-1)
            scores = torch.tensor([b[1] for b in beams], device=memory.device)[:, None] + logp  # [K, V]
            top = scores.flatten().topk(min(beam_size * 2, scores.numel()))
            beams = []
            for score, flat in zip(top.values.tolist(), top.indices.tolist()):
                parent, token = divmod(flat, scores.shape[1])
                seq = tokens[parent].tolist() + [token]
                if token == self.eos_id:
                    finished.append((seq, score))
                else:
                    beams.append((seq, score))
                if len(beams) == beam_size:
                    break
            if not beams:
                break
        finished.extend(beams)  # unfinished hypotheses compete at max_len
        best = max(finished, key=lambda f: _normalised(f, length_penalty))
        return _strip(best[0][1:], self.eos_id)


class CaptionDecoder(AutoregressiveDecoder):
    """Transformer decoder over a conditioning sequence `memory` [B, M, D_mem], trained from scratch."""

    def __init__(self, vocab_size: int, memory_dim: int, bos_id: int, eos_id: int, pad_id: int,
                 dim: int = 256, layers: int = 2, heads: int = 4, ffn_dim: int = 1024,
                 dropout: float = 0.1, max_len: int = 32):
        super().__init__()
        self.bos_id, self.eos_id, self.pad_id, self.max_len = bos_id, eos_id, pad_id, max_len
        self.memory_proj = nn.Linear(memory_dim, dim)
        self.token_embedding = nn.Embedding(vocab_size, dim)
        self.position_embedding = nn.Embedding(max_len, dim)
        layer = nn.TransformerDecoderLayer(dim, heads, ffn_dim, dropout, batch_first=True, norm_first=True)
        self.decoder = nn.TransformerDecoder(layer, layers)
        self.norm = nn.LayerNorm(dim)
        self.output_bias = nn.Parameter(torch.zeros(vocab_size))
        nn.init.normal_(self.token_embedding.weight, std=dim ** -0.5)
        nn.init.normal_(self.position_embedding.weight, std=0.02)

    def forward(self, tokens: torch.Tensor, memory: torch.Tensor, memory_mask: torch.Tensor) -> torch.Tensor:
        """tokens [B, L] (starting with BOS), memory [B, M, D_mem], memory_mask [B, M] (True = real)
        → next-token logits [B, L, V]."""
        length = tokens.shape[1]
        if length > self.max_len:
            raise ValueError(f"CaptionDecoder: {length} tokens exceed max_len={self.max_len}")
        positions = torch.arange(length, device=tokens.device)
        x = self.token_embedding(tokens) + self.position_embedding(positions)  # [B, L, D]
        causal = torch.triu(torch.ones(length, length, dtype=torch.bool, device=tokens.device), 1)
        # padding after EOS needs no key mask: the causal mask already hides it from real tokens
        h = self.decoder(x, self.memory_proj(memory), tgt_mask=causal, memory_key_padding_mask=~memory_mask)
        return self.norm(h) @ self.token_embedding.weight.T + self.output_bias  # [B, L, V]

def _normalised(hypothesis: tuple[list[int], float], length_penalty: float) -> float:
    seq, score = hypothesis
    return score / (max(len(seq) - 1, 1) ** length_penalty)


def _strip(ids: list[int], eos_id: int) -> list[int]:
    return ids[: ids.index(eos_id)] if eos_id in ids else ids


class HFCaptionDecoder(AutoregressiveDecoder):
    """A pre-trained HF model as the caption decoder: T5 (encoder-decoder; its decoder and LM head)
    or a BERT-family encoder turned decoder (causal self-attention + new cross-attention).

    The memory [B, M, D_mem] is projected to the model's width and read by cross-attention
    (T5: as `encoder_outputs`; BERT: as `encoder_hidden_states`). Its own tokenizer gives
    the targets: T5 starts from `decoder_start_token_id` (the pad id) and ends with </s>;
    BERT from [CLS] to [SEP].
    """

    def __init__(self, path: str, memory_dim: int, max_len: int = 32, dropout: float | None = None):
        super().__init__()
        from transformers import AutoConfig, AutoTokenizer

        config = AutoConfig.from_pretrained(path)
        self.kind = "t5" if getattr(config, "model_type", "") in ("t5", "mt5", "umt5") else "bert"
        self.tokenizer = real_tokenizer(AutoTokenizer.from_pretrained(path))  # not a vocabulary-less one from a partial cache
        extra = {} if dropout is None else ({"dropout_rate": dropout} if self.kind == "t5" else
                                            {"hidden_dropout_prob": dropout, "attention_probs_dropout_prob": dropout})
        if self.kind == "t5":
            from transformers import T5ForConditionalGeneration

            model = T5ForConditionalGeneration.from_pretrained(path, **extra)
            model.encoder = None  # only the decoder reads our memory: drop the text encoder stack
            self.bos_id = int(model.config.decoder_start_token_id)
            self.eos_id = int(model.config.eos_token_id)
            width = int(model.config.d_model)
        else:
            from transformers import AutoModelForCausalLM

            # Rothe et al. 2020: the encoder's weights initialise a decoder; cross-attention is new
            model = AutoModelForCausalLM.from_pretrained(path, is_decoder=True, add_cross_attention=True, **extra)
            self.bos_id = int(self.tokenizer.cls_token_id)
            self.eos_id = int(self.tokenizer.sep_token_id)
            width = int(model.config.hidden_size)
            max_len = min(max_len, int(model.config.max_position_embeddings))
        self.pad_id = int(self.tokenizer.pad_token_id)
        self.model, self.max_len, self.path = model, max_len, path
        self.memory_proj = nn.Linear(memory_dim, width)

    def tokenize(self, texts: list[str]) -> torch.Tensor:
        """Targets [B, L] = BOS w_1 … w_n EOS PAD… in this decoder's vocabulary (L ≤ max_len + 1)."""
        ids = self.tokenizer(list(texts), padding=True, truncation=True, max_length=self.max_len,
                             return_tensors="pt")["input_ids"]
        if self.kind == "t5":  # T5 tokenizers add no begin token: w… </s> → <pad> w… </s>
            ids = torch.nn.functional.pad(ids, (1, 0), value=self.bos_id)
        return ids

    def forward(self, tokens: torch.Tensor, memory: torch.Tensor, memory_mask: torch.Tensor) -> torch.Tensor:
        """tokens [B, L] (BOS first), memory [B, M, D_mem], memory_mask [B, M] → logits [B, L, V]."""
        if tokens.shape[1] > self.max_len:
            raise ValueError(f"HFCaptionDecoder: {tokens.shape[1]} tokens exceed max_len={self.max_len}")
        states = self.memory_proj(memory)  # [B, M, width]
        mask = memory_mask.long()
        if self.kind == "t5":
            from transformers.modeling_outputs import BaseModelOutput

            return self.model(encoder_outputs=BaseModelOutput(last_hidden_state=states), attention_mask=mask,
                              decoder_input_ids=tokens, use_cache=False).logits
        # padding after EOS needs no key mask: the causal mask already hides it from real tokens
        return self.model(input_ids=tokens, encoder_hidden_states=states, encoder_attention_mask=mask,
                          use_cache=False).logits

