"""`videotext convert mmt`: an official-format MMT state dict (gabeur/mmt key names and
shapes, built here) loads with no missing/unexpected keys, and the converted model
reproduces a hand-written forward of the official formulas to 1e-5."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from tests.models.test_mmt import tiny_bert
from videotext.convert import convert
from videotext.errors import VideoTextError
from videotext.inference import load_model

DIMS = {"s3d": 6, "vggish": 4, "face": 5}  # official names; token types s3d 1, vggish 2, face 3
TYPES = {"s3d": 1, "vggish": 2, "face": 3}
D, LAYERS, HEADS, INTER, MAX_POS, N_TYPES = 16, 2, 2, 32, 8, 10


def official_state(text_model: str) -> dict[str, torch.Tensor]:
    """Random weights under the official CENet names (vid_cont bert, txt_pro gbn, txt_wgh emb)."""
    from transformers import BertModel

    g = torch.Generator().manual_seed(0)
    rand = lambda *shape: torch.randn(*shape, generator=g) * 0.3  # noqa: E731
    sd: dict[str, torch.Tensor] = {}
    for e, dim in DIMS.items():
        sd[f"video_dim_reduce.{e}.fc.weight"], sd[f"video_dim_reduce.{e}.fc.bias"] = rand(D, dim), rand(D)
    emb = "vid_bert.embeddings."
    sd[emb + "position_embeddings.weight"], sd[emb + "token_type_embeddings.weight"] = rand(MAX_POS, D), rand(N_TYPES, D)
    sd[emb + "layer_norm.weight"], sd[emb + "layer_norm.bias"] = 1 + rand(D), rand(D)
    for i in range(LAYERS):
        p = f"vid_bert.encoder.layer.{i}."
        for name, (out_dim, in_dim) in {"attention.self.query": (D, D), "attention.self.key": (D, D),
                                        "attention.self.value": (D, D), "attention.output.dense": (D, D),
                                        "intermediate.dense": (INTER, D), "output.dense": (D, INTER)}.items():
            sd[p + name + ".weight"], sd[p + name + ".bias"] = rand(out_dim, in_dim), rand(out_dim)
        for name in ("attention.output.layer_norm", "output.layer_norm"):
            sd[p + name + ".weight"], sd[p + name + ".bias"] = 1 + rand(D), rand(D)
    sd["vid_bert.pooler.dense.weight"], sd["vid_bert.pooler.dense.bias"] = rand(D, D), rand(D)
    bert = BertModel.from_pretrained(text_model)
    for key, value in bert.state_dict().items():
        sd[f"txt_bert.{key}"] = value + (rand(*value.shape) * 0.1 if value.is_floating_point() else 0)
    sd["txt_bert.embeddings.position_ids"] = torch.arange(40)[None]  # transformers-3 era files keep it
    hidden = bert.config.hidden_size
    for e in DIMS:
        p = f"text_GU.{e}."
        sd[p + "fc.weight"], sd[p + "fc.bias"] = rand(D, hidden), rand(D)
        sd[p + "cg.fc.weight"], sd[p + "cg.fc.bias"] = rand(D, D), rand(D)
        sd[p + "cg.batch_norm.weight"], sd[p + "cg.batch_norm.bias"] = 1 + rand(D), rand(D)
        sd[p + "cg.batch_norm.running_mean"], sd[p + "cg.batch_norm.running_var"] = rand(D), 0.5 + rand(D).abs()
        sd[p + "cg.batch_norm.num_batches_tracked"] = torch.tensor(100)
        sd[f"moe_fc_txt.{e}.weight"], sd[f"moe_fc_txt.{e}.bias"] = rand(1, hidden), rand(1)
    return sd


def reference_video(sd, features, times, masks=None):
    """Official CENet video path (model.py l.437-623, bert.py) written out with plain ops.

    masks (per expert [B, T], 1 = real; default all real) are key masks: [CLS] 1, [AGG]
    max over the expert's steps (l.541), additive (1 - mask) * -10000 (bert.py l.395)."""
    b = next(iter(features.values())).shape[0]
    masks = masks or {e: torch.ones(f.shape[:2]) for e, f in features.items()}
    feats, types, pos, agg_idx = [torch.zeros(b, D)], [0], [torch.zeros(b, dtype=torch.long)], {}
    keys = [torch.ones(b)]
    reduce = lambda e, x: F.normalize(x @ sd[f"video_dim_reduce.{e}.fc.weight"].T + sd[f"video_dim_reduce.{e}.fc.bias"], dim=-1)  # noqa: E731
    for e in sorted(DIMS):
        agg_idx[e] = len(feats)
        feats.append(reduce(e, features[e].amax(1))), types.append(TYPES[e]), pos.append(torch.zeros(b, dtype=torch.long))
        keys.append(masks[e].float().amax(1))
        for t in range(features[e].shape[1]):  # features_t = t/window + 2, clamped to max_pos - 1
            feats.append(reduce(e, features[e][:, t])), types.append(TYPES[e]), keys.append(masks[e][:, t].float())
            pos.append((times[e][:, t] + 2).clamp(0, MAX_POS - 1).long())
    x = torch.stack(feats, 1)
    x = x + sd["vid_bert.embeddings.token_type_embeddings.weight"][torch.tensor(types)] \
        + sd["vid_bert.embeddings.position_embeddings.weight"][torch.stack(pos, 1)]
    ln = lambda y, p: F.layer_norm(y, (D,), sd[p + ".weight"], sd[p + ".bias"], eps=1e-12)  # noqa: E731
    lin = lambda y, p: y @ sd[p + ".weight"].T + sd[p + ".bias"]  # noqa: E731
    x = ln(x, "vid_bert.embeddings.layer_norm")
    key_bias = (1.0 - torch.stack(keys, 1))[:, None, None, :] * -10000.0  # [B, 1, 1, L]
    for i in range(LAYERS):
        p = f"vid_bert.encoder.layer.{i}."
        heads = lambda y: y.view(b, -1, HEADS, D // HEADS).transpose(1, 2)  # noqa: E731
        q, k, v = (heads(lin(x, p + f"attention.self.{n}")) for n in ("query", "key", "value"))
        probs = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(D // HEADS) + key_bias, -1)
        ctx = (probs @ v).transpose(1, 2).reshape(b, -1, D)
        attn = ln(lin(ctx, p + "attention.output.dense") + x, p + "attention.output.layer_norm")
        inter = lin(attn, p + "intermediate.dense")
        inter = inter * 0.5 * (1.0 + torch.erf(inter / math.sqrt(2.0)))  # bert.py gelu
        x = ln(lin(inter, p + "output.dense") + attn, p + "output.layer_norm")
    return {e: F.normalize(x[:, agg_idx[e]], dim=-1) for e in sorted(DIMS)}


def reference_text(sd, text_model, batch):
    from transformers import BertModel

    bert = BertModel.from_pretrained(text_model).eval()
    bert.load_state_dict({k[9:]: v for k, v in sd.items() if k.startswith("txt_bert.") and "position_ids" not in k},
                         strict=False)
    h = bert(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).last_hidden_state[:, 0]
    out = {}
    for e in sorted(DIMS):
        p = f"text_GU.{e}."
        x = h @ sd[p + "fc.weight"].T + sd[p + "fc.bias"]
        x1 = x @ sd[p + "cg.fc.weight"].T + sd[p + "cg.fc.bias"]
        x1 = (x1 - sd[p + "cg.batch_norm.running_mean"]) / torch.sqrt(sd[p + "cg.batch_norm.running_var"] + 1e-5) \
            * sd[p + "cg.batch_norm.weight"] + sd[p + "cg.batch_norm.bias"]
        out[e] = F.normalize(F.glu(torch.cat([x, x1], 1), 1), dim=-1)
    logits = torch.cat([h @ sd[f"moe_fc_txt.{e}.weight"].T + sd[f"moe_fc_txt.{e}.bias"] for e in sorted(DIMS)], 1)
    return out, torch.softmax(logits, 1)


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    root = tmp_path_factory.mktemp("mmt_convert")
    text_model = tiny_bert(root / "bert")
    sd = official_state(text_model)
    checkpoint = root / "trained_model.pth"
    torch.save({"arch": "CENet", "epoch": 3, "state_dict": sd, "monitor_best": 0.5, "n_samples": 96,
                "n_steps": 3}, checkpoint)
    run = convert("mmt", checkpoint, root / "run", text_model=text_model, heads=HEADS)
    return sd, text_model, load_model(run, device="cpu").method.eval(), root


def test_converted_run_reproduces_official_outputs(converted):
    sd, text_model, model, _ = converted
    assert model.experts == ["face", "s3d", "vggish"] and model.type_ids == TYPES and model.config.cls_token
    g = torch.Generator().manual_seed(1)
    features = {e: torch.randn(3, 4, d, generator=g) for e, d in DIMS.items()}
    times = {e: torch.tensor([0.0, 1.0, 2.5, 9.0]).repeat(3, 1) for e in DIMS}  # 9 s: clamped to the last row
    batch = {"features": features, "masks": {e: torch.ones(3, 4, dtype=torch.bool) for e in DIMS}, "times": times}
    texts = model.prepare_text(["a red circle moves left", "blue circle then right"])
    with torch.no_grad():
        video, text = model.encode_video(batch), model.encode_text(texts)
        ref_video = reference_video(sd, features, times)
        ref_text, ref_weights = reference_text(sd, text_model, texts)
    for i, e in enumerate(model.experts):
        torch.testing.assert_close(video["experts"][:, i], ref_video[e], rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(text["experts"][:, i], ref_text[e], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(text["weights"], ref_weights, rtol=1e-5, atol=1e-6)
    ref_sims = sum(ref_weights[:, i, None] * ref_text[e] @ ref_video[e].T for i, e in enumerate(model.experts))
    torch.testing.assert_close(model.similarity(text, video), ref_sims, rtol=1e-5, atol=1e-5)  # model.py l.823


def test_converted_run_scores_missing_experts_as_the_released_models(converted):
    """keep_missing_modalities true (released configs): video 0 lacks face, video 1 lacks vggish;
    their features and max-pool are zeros, so the [AGG] input is ReduceDim(0) = the normalised
    bias, masked as a key, its output the expert embedding; vid weights 1/M (l.594, l.816)."""
    sd, text_model, model, _ = converted
    assert model.config.missing_agg == "bias" and model.config.keep_missing_experts
    g = torch.Generator().manual_seed(2)
    features = {e: torch.randn(3, 4, d, generator=g) for e, d in DIMS.items()}
    masks = {e: torch.ones(3, 4, dtype=torch.bool) for e in DIMS}
    for video, expert in ((0, "face"), (1, "vggish")):
        features[expert][video], masks[expert][video] = 0.0, False
    times = {e: torch.tensor([0.0, 1.0, 2.0, 3.0]).repeat(3, 1) for e in DIMS}
    texts = model.prepare_text(["a red circle moves left", "blue circle then right"])
    with torch.no_grad():
        video = model.encode_video({"features": features, "masks": masks, "times": times})
        text = model.encode_text(texts)
        ref_video = reference_video(sd, features, times, masks)
        ref_text, ref_weights = reference_text(sd, text_model, texts)
    for i, e in enumerate(model.experts):
        torch.testing.assert_close(video["experts"][:, i], ref_video[e], rtol=1e-5, atol=1e-5)
    moe = ref_weights[:, None, :] * torch.full((1, 3, 3), 1 / 3)  # [captions, videos, M]: text × vid weights
    moe = moe / moe.sum(-1, keepdim=True)
    ref_sims = sum(moe[:, :, i] * (ref_text[e] @ ref_video[e].T) for i, e in enumerate(model.experts))
    torch.testing.assert_close(model.similarity(text, video), ref_sims, rtol=1e-5, atol=1e-5)


def test_converted_keys_and_errors(converted):
    sd, text_model, model, root = converted
    own = set(model.state_dict())
    assert "mixture.weight" in own and model.state_dict()["mixture.weight"].shape == (3, 16)
    assert not any(k.startswith("video_bert.pooler") for k in own)
    broken = dict(sd)
    broken["vid_bert.surprise.weight"] = torch.zeros(1)
    torch.save({"state_dict": broken}, root / "broken.pth")
    with pytest.raises(VideoTextError, match="does not match"):
        convert("mmt", root / "broken.pth", root / "run2", text_model=text_model, heads=HEADS)
    with pytest.raises(VideoTextError, match="not found"):
        convert("mmt", root / "absent.pth", root / "run3", text_model=text_model)
