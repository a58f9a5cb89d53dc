"""`videotext convert frozen`: an official-format checkpoint (official key names and shapes,
built here with random weights) loads with no missing/unexpected keys, and the converted
model reproduces a hand-written forward of the official formulas (the official video_transformer.py and model.py: modified residual, [CLS]
handling, token layout, final norm, text projection, no normalisation inside) to 1e-5."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

D, DEPTH, HEADS, P, IMG, FRAMES, EMBED = 32, 2, 2, 8, 32, 3, 16


VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "red", "blue", "square", "circle", "moves", "left"]


@pytest.fixture(scope="module")
def text_folder(tmp_path_factory):
    """A tiny DistilBERT folder (config + tokenizer); the checkpoint supplies its weights."""
    from transformers import DistilBertConfig, DistilBertModel, DistilBertTokenizerFast

    folder = tmp_path_factory.mktemp("distilbert")
    (folder / "vocab.txt").write_text("\n".join(VOCAB) + "\n")
    tokenizer = DistilBertTokenizerFast.from_pretrained(folder)  # reads vocab.txt (vocab_file= alone gives a 5-token vocabulary)
    assert tokenizer.unk_token_id not in tokenizer("red circle")["input_ids"]  # the words are known
    tokenizer.save_pretrained(folder)
    torch.manual_seed(0)
    config = DistilBertConfig(vocab_size=len(VOCAB), dim=16, n_layers=1, n_heads=2, hidden_dim=32,
                              max_position_embeddings=32)
    DistilBertModel(config).save_pretrained(folder)
    return folder


def official_state_dict(text_folder) -> dict[str, torch.Tensor]:
    """`FrozenInTime.state_dict()` key names and shapes (m-bain/frozen-in-time model/model.py,
    model/video_transformer.py), random values, DataParallel `module.` prefix."""
    from transformers import DistilBertModel

    g = torch.Generator().manual_seed(1)

    def r(*shape, scale=0.2):
        return torch.randn(*shape, generator=g) * scale

    n = (IMG // P) ** 2
    sd = {"video_model.cls_token": r(1, 1, D), "video_model.pos_embed": r(1, n + 1, D),
          "video_model.temporal_embed": r(1, FRAMES, D),
          "video_model.patch_embed.proj.weight": r(D, 3, P, P), "video_model.patch_embed.proj.bias": r(D)}
    for i in range(DEPTH):
        b = f"video_model.blocks.{i}."
        for norm in ("norm1", "norm2", "norm3"):
            sd[b + norm + ".weight"], sd[b + norm + ".bias"] = 1 + r(D), r(D)
        for attn in ("attn", "timeattn"):
            sd[b + attn + ".qkv.weight"], sd[b + attn + ".qkv.bias"] = r(3 * D, D), r(3 * D)
            sd[b + attn + ".proj.weight"], sd[b + attn + ".proj.bias"] = r(D, D), r(D)
        sd[b + "mlp.fc1.weight"], sd[b + "mlp.fc1.bias"] = r(4 * D, D), r(4 * D)
        sd[b + "mlp.fc2.weight"], sd[b + "mlp.fc2.bias"] = r(D, 4 * D), r(D)
    sd["video_model.norm.weight"], sd["video_model.norm.bias"] = 1 + r(D), r(D)
    text = DistilBertModel.from_pretrained(text_folder).state_dict()
    sd.update({f"text_model.{k}": v + r(*v.shape, scale=0.05) for k, v in text.items()})
    sd["txt_proj.1.weight"], sd["txt_proj.1.bias"] = r(EMBED, 16), r(EMBED)
    sd["vid_proj.0.weight"], sd["vid_proj.0.bias"] = r(EMBED, D), r(EMBED)
    return {"module." + k: v for k, v in sd.items()}


def reference_video(sd: dict[str, torch.Tensor], frames: torch.Tensor) -> torch.Tensor:
    """The official video forward, from the notes: full attention with explicit group masks."""
    p = {k[len("module.video_model."):]: v for k, v in sd.items() if k.startswith("module.video_model.")}
    b, f = frames.shape[:2]
    x = F.conv2d(frames.flatten(0, 1), p["patch_embed.proj.weight"], p["patch_embed.proj.bias"], stride=P)
    x = x.flatten(2).transpose(1, 2).reshape(b, -1, D)  # frame-major b (f n) d
    n = x.shape[1] // f
    x = torch.cat([p["cls_token"].expand(b, -1, -1), x], 1)
    tiled = p["pos_embed"][:, 1:].repeat(1, FRAMES, 1) + p["temporal_embed"].repeat_interleave(n, 1)
    x = x + torch.cat([p["pos_embed"][:, :1], tiled], 1)[:, : x.shape[1]]  # truncated to 1 + f*n
    idx = torch.arange(f * n)
    masks = {}
    for name, group in (("time", idx % n), ("space", idx // n)):
        allowed = torch.ones(1 + f * n, 1 + f * n, dtype=torch.bool)
        allowed[1:, 1:] = group[:, None] == group[None, :]
        masks[name] = allowed

    def ln(t, name):
        return F.layer_norm(t, (D,), p[name + ".weight"], p[name + ".bias"], eps=1e-6)

    def attention(t, prefix, mask):
        q, k, v = F.linear(t, p[prefix + ".qkv.weight"], p[prefix + ".qkv.bias"]).chunk(3, -1)
        q, k, v = (z.view(b, -1, HEADS, D // HEADS).transpose(1, 2) for z in (q, k, v))
        w = ((q * (D // HEADS) ** -0.5) @ k.transpose(-1, -2)).masked_fill(~mask, float("-inf")).softmax(-1)
        return F.linear((w @ v).transpose(1, 2).reshape(b, -1, D), p[prefix + ".proj.weight"], p[prefix + ".proj.bias"])

    for i in range(DEPTH):
        blk = f"blocks.{i}"
        t = attention(ln(x, blk + ".norm3"), blk + ".timeattn", masks["time"])
        x = x + attention(ln(x + t, blk + ".norm1"), blk + ".attn", masks["space"])  # modified residual
        h = F.gelu(F.linear(ln(x, blk + ".norm2"), p[blk + ".mlp.fc1.weight"], p[blk + ".mlp.fc1.bias"]))
        x = x + F.linear(h, p[blk + ".mlp.fc2.weight"], p[blk + ".mlp.fc2.bias"])
    cls = ln(x, "norm")[:, 0]
    return F.linear(cls, sd["module.vid_proj.0.weight"], sd["module.vid_proj.0.bias"])


def sim_matrix(a, b, eps=1e-8):
    a = a / a.norm(dim=1, keepdim=True).clamp_min(eps)
    b = b / b.norm(dim=1, keepdim=True).clamp_min(eps)
    return a @ b.T


def test_converted_checkpoint_reproduces_the_official_forward(tmp_path, text_folder):
    from transformers import DistilBertModel

    from videotext.convert import convert
    from videotext.inference import load_model
    from videotext.train.checkpoint import load_weights

    sd = official_state_dict(text_folder)
    ckpt = tmp_path / "frozen_official.pth"
    torch.save({"arch": "FrozenInTime", "epoch": 3, "state_dict": sd, "monitor_best": 0.5}, ckpt)
    run = convert("frozen", ckpt, tmp_path / "run", text_model=str(text_folder), heads=HEADS)
    model = load_model(run, device="cpu", precision="fp32")  # the 1e-5 check is against fp32
    method = model.method
    assert load_weights(run / "checkpoints" / "best", method) == {"missing": [], "unexpected": []}
    cfg = method.config
    assert (cfg.video_dim, cfg.depth, cfg.patch_size, cfg.img_size, cfg.num_frames, cfg.embed_dim) == (
        D, DEPTH, P, IMG, FRAMES, EMBED)
    assert cfg.text_relu and cfg.cls_attention == "shared" and cfg.residual == "frozen"

    torch.manual_seed(2)
    frames = torch.randn(2, FRAMES, 3, IMG, IMG)
    with torch.no_grad():
        ours_raw = method.vid_proj(method.video_model(frames))
        torch.testing.assert_close(ours_raw, reference_video(sd, frames), atol=1e-5, rtol=1e-5)
        two = frames[:, :2]  # fewer frames than trained: embeddings truncated as officially
        torch.testing.assert_close(method.vid_proj(method.video_model(two)), reference_video(sd, two),
                                   atol=1e-5, rtol=1e-5)
        # text: DistilBERT [CLS] of the last layer → ReLU → Linear
        texts = ["a red square moves left", "a blue circle"]
        batch = method.prepare_text(texts)
        bert = DistilBertModel.from_pretrained(text_folder)
        bert.load_state_dict({k[len("module.text_model."):]: v for k, v in sd.items()
                              if k.startswith("module.text_model.")})
        bert.eval()
        cls = bert(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).last_hidden_state[:, 0]
        ref_text = F.linear(F.relu(cls), sd["module.txt_proj.1.weight"], sd["module.txt_proj.1.bias"])
        ours_text = method.encode_text(batch)
        torch.testing.assert_close(ours_text, F.normalize(ref_text, dim=-1), atol=1e-5, rtol=1e-5)
        sims = method.similarity(ours_text, method.encode_video({"frames": frames}))
        torch.testing.assert_close(sims, sim_matrix(ref_text, reference_video(sd, frames)), atol=1e-5, rtol=1e-5)


def test_converter_expands_frames_and_rejects_foreign_files(tmp_path, text_folder):
    from videotext.convert import convert
    from videotext.convert.frozen import map_keys
    from videotext.errors import VideoTextError
    from videotext.train.checkpoint import load_weights
    from videotext.models import build_method
    from videotext.config import load_config

    sd = official_state_dict(text_folder)
    ckpt = tmp_path / "official.pth"
    torch.save({"state_dict": sd}, ckpt)
    run = convert("frozen", ckpt, tmp_path / "run8", text_model=str(text_folder), heads=HEADS,
                  num_frames=5, temporal_expansion="zeros")
    config = load_config(run / "config.yaml")
    method = build_method("frozen", config.model)
    load_weights(run / "checkpoints" / "best", method)
    temporal = method.video_model.temporal_embed.detach()
    torch.testing.assert_close(temporal[:, :FRAMES], sd["module.video_model.temporal_embed"])
    assert temporal.shape == (1, 5, D) and temporal[:, FRAMES:].abs().max() == 0
    assert int(method.trained_frames) == 5
    with pytest.raises(VideoTextError, match="unexpected key"):
        map_keys({"head.weight": torch.zeros(1)})
