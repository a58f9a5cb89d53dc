"""`videotext convert coot`: an official-format state dict (key names and shapes of
gingsi/coot-videotext TransformerLegacy) loads with no missing/unexpected keys, and the
converted model equals a hand-written re-computation of the official forward."""
import math

import torch
import torch.nn.functional as F

from videotext.convert.coot import convert
from videotext.inference import load_model

H, HEADS, AF, AF_HEADS, VID, TXT = 8, 2, 16, 2, 6, 5


def official_pe(length, dim):
    pos = torch.arange(length).float().unsqueeze(1)
    div = 10000 ** (2 * torch.arange(dim).float() / dim)  # official: per channel index
    pe = torch.zeros(length, dim)
    pe[:, 0::2] = torch.sin(pos / div[0::2])
    pe[:, 1::2] = torch.cos(pos / div[1::2])
    return pe


def layer_keys(prefix, g):
    out = {}
    for name in ("query", "key", "value", "final"):
        out[f"{prefix}.self_attention_layer.sublayer.{name}_projection.weight"] = torch.randn(H, H, generator=g) * 0.3
        out[f"{prefix}.self_attention_layer.sublayer.{name}_projection.bias"] = torch.randn(H, generator=g) * 0.1
    for sub in ("self_attention_layer", "pointwise_feedforward_layer"):
        out[f"{prefix}.{sub}.layer_normalization.gain"] = 1 + 0.1 * torch.randn(H, generator=g)
        out[f"{prefix}.{sub}.layer_normalization.bias"] = 0.1 * torch.randn(H, generator=g)
    for i in (0, 3):
        out[f"{prefix}.pointwise_feedforward_layer.sublayer.feed_forward.{i}.weight"] = torch.randn(H, H, generator=g) * 0.3
        out[f"{prefix}.pointwise_feedforward_layer.sublayer.feed_forward.{i}.bias"] = torch.randn(H, generator=g) * 0.1
    return out


def official_state(seed=0):
    g = torch.Generator().manual_seed(seed)
    state = {}
    for branch, dim in (("video", VID), ("text", TXT)):
        local = {"norm_input.gain": 1 + 0.1 * torch.randn(dim, generator=g), "norm_input.bias": 0.1 * torch.randn(dim, generator=g),
                 "input_fc.mlp.0.weight": torch.randn(H, dim, generator=g) * 0.4, "input_fc.mlp.0.bias": torch.randn(H, generator=g) * 0.1,
                 "embedding.pe": official_pe(1000, H),
                 "pooler.pools.0.genpool_w1_head": torch.randn(AF_HEADS, H, AF // AF_HEADS, generator=g) * 0.4,
                 "pooler.pools.0.genpool_b1_head": torch.randn(AF_HEADS, AF // AF_HEADS, generator=g) * 0.1,
                 "pooler.pools.0.genpool_w2_head": torch.randn(AF_HEADS, AF // AF_HEADS, H // AF_HEADS, generator=g) * 0.4,
                 "pooler.pools.0.genpool_b2_head": torch.randn(AF_HEADS, H // AF_HEADS, generator=g) * 0.1,
                 "pooler.pools.0.genpool_one": torch.ones(1), **layer_keys("tf.encoder_layers.0", g)}
        glob = {"norm_input.gain": 1 + 0.1 * torch.randn(H, generator=g), "norm_input.bias": 0.1 * torch.randn(H, generator=g),
                "embedding.pe": official_pe(1000, H), **layer_keys("tf.encoder_layers.0", g),
                **layer_keys("tf_context.encoder_layers.0", g)}
        state[f"net_{branch}_local"], state[f"net_{branch}_global"] = local, glob
    return state


# --- the official forward, re-computed from the notes (True = padding in the official masks) ---
def ln_coot(x, p, name):
    return p[f"{name}.gain"] * (x - x.mean(-1, keepdim=True)) / (x.std(-1, keepdim=True) + 1e-6) + p[f"{name}.bias"]


def ref_layer(p, pre, q, kv, pad):
    lin = lambda n, x: x @ p[f"{pre}.self_attention_layer.sublayer.{n}_projection.weight"].T + p[f"{pre}.self_attention_layer.sublayer.{n}_projection.bias"]  # noqa: E731
    b, lq, _ = q.shape
    heads = lambda x: x.view(b, x.shape[1], HEADS, H // HEADS).transpose(1, 2)  # noqa: E731
    scores = heads(lin("query", q)) @ heads(lin("key", kv)).transpose(2, 3) / math.sqrt(H // HEADS)
    scores = scores.masked_fill(pad[:, None, None, :], -32752.0)
    ctx = (scores.softmax(-1) @ heads(lin("value", kv))).transpose(1, 2).reshape(b, lq, H)
    x = ln_coot(lin("final", ctx) + q, p, f"{pre}.self_attention_layer.layer_normalization")
    ff = f"{pre}.pointwise_feedforward_layer.sublayer.feed_forward"
    y = F.gelu(x @ p[f"{ff}.0.weight"].T + p[f"{ff}.0.bias"]) @ p[f"{ff}.3.weight"].T + p[f"{ff}.3.bias"]
    return ln_coot(y + x, p, f"{pre}.pointwise_feedforward_layer.layer_normalization")


def ref_local(p, x, pad):
    x = F.gelu(ln_coot(x, p, "norm_input") @ p["input_fc.mlp.0.weight"].T + p["input_fc.mlp.0.bias"])
    x = x + p["embedding.pe"][: x.shape[1]]
    h = ref_layer(p, "tf.encoder_layers.0", x, x, pad)
    pooled = []
    for head in range(AF_HEADS):
        a = F.gelu(h @ p["pooler.pools.0.genpool_w1_head"][head] + p["pooler.pools.0.genpool_b1_head"][head])
        a = a @ p["pooler.pools.0.genpool_w2_head"][head] + p["pooler.pools.0.genpool_b2_head"][head]
        w = a.masked_fill(pad.unsqueeze(-1), -32752.0).softmax(1)
        sl = slice(head * H // AF_HEADS, (head + 1) * H // AF_HEADS)
        pooled.append((h[..., sl] * w).sum(1))
    return torch.cat(pooled, -1)


def ref_global(p, clips, pad, context):
    x = ln_coot(clips, p, "norm_input") + p["embedding.pe"][: clips.shape[1]]
    h = ref_layer(p, "tf.encoder_layers.0", x, x, pad)
    avg = h.sum(1) / (~pad).sum(1, keepdim=True)  # avg_special: padding included in the sum
    ctx = ref_layer(p, "tf_context.encoder_layers.0", context.unsqueeze(1), h, pad).squeeze(1)
    return torch.cat([avg, ctx], -1)


def ref_branch(state, branch, batch, prefix):
    loc, glo = state[f"net_{branch}_local"], state[f"net_{branch}_global"]
    context = ref_local(loc, batch[f"{prefix}s"], ~batch[f"{prefix}_mask"])
    clips = ref_local(loc, batch[f"group_{prefix}s"], ~batch[f"group_{prefix}_mask"])
    counts = batch["group_counts"].tolist()
    grouped = torch.zeros(len(counts), max(counts), H)
    pad = torch.ones(len(counts), max(counts), dtype=torch.bool)
    start = 0
    for i, c in enumerate(counts):
        grouped[i, :c], pad[i, :c] = clips[start : start + c], False
        start += c
    return ref_global(glo, grouped, pad, context), clips


def random_hierarchy(dim, counts, prefix, seed):
    from videotext.data.hierarchy import collate_hierarchy

    g = torch.Generator().manual_seed(seed)
    items = [(torch.randn(3 + 2 * k, dim, generator=g).numpy(),
              [torch.randn(1 + (i + k) % 3, dim, generator=g).numpy() for i in range(c)]) for k, c in enumerate(counts)]
    return collate_hierarchy(items, dim, prefix)


def test_convert_matches_official_forward(tmp_path):
    state = official_state()
    ckpt = tmp_path / "model_10.pth"
    torch.save(state, ckpt)
    run = convert(ckpt, tmp_path / "run", num_heads=HEADS)
    model = load_model(run, device="cpu").method  # strict load: no missing / unexpected keys
    assert model.config.layer_norm == "coot" and model.config.global_pooling == "avg_special"
    video = random_hierarchy(VID, [2, 3, 1], "frame", 1)
    text = random_hierarchy(TXT, [2, 3, 1], "word", 2)
    with torch.no_grad():
        ours_v, ours_t = model.encode_video_hierarchy(video), model.encode_text_hierarchy(text)
        ref_v, ref_clips = ref_branch(state, "video", video, "frame")
        ref_t, ref_sents = ref_branch(state, "text", text, "word")
    assert torch.allclose(ours_v["paragraph"], ref_v, atol=1e-5)
    assert torch.allclose(ours_t["paragraph"], ref_t, atol=1e-5)
    assert torch.allclose(ours_v["low"], ref_clips, atol=1e-5)
    assert torch.allclose(ours_t["low"], ref_sents, atol=1e-5)
    sims = model.similarity(model.encode_text(text), model.encode_video(video))
    assert torch.allclose(sims, F.normalize(ref_t, dim=-1) @ F.normalize(ref_v, dim=-1).T, atol=1e-5)


def test_convert_old_list_format(tmp_path):
    state = official_state(3)
    old = []
    for net in ("net_video_local", "net_video_global", "net_text_local", "net_text_global"):
        sub = {}
        for k, v in state[net].items():
            k = k.replace("norm_input.", "input_norm.").replace("input_fc.mlp.", "input_fc.")
            sub[k.replace("pooler.pools.0.genpool", "pooler.genpool")] = v
        old.append(sub)
    torch.save(old, tmp_path / "old.pth")
    model = load_model(convert(tmp_path / "old.pth", tmp_path / "run", num_heads=HEADS), device="cpu").method
    ref = load_model(convert(_save(state, tmp_path / "new.pth"), tmp_path / "run2", num_heads=HEADS), device="cpu").method
    video = random_hierarchy(VID, [2], "frame", 4)
    with torch.no_grad():
        assert torch.equal(model.encode_video(video), ref.encode_video(video))


def _save(state, path):
    torch.save(state, path)
    return path
