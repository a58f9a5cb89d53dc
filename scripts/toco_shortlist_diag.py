"""ToCo: which score picks the right video inside each test query's top-k shortlist?

    python scripts/toco_shortlist_diag.py RUN_DIR [--split test]

For a trained `toco` run (its validation-selected checkpoint): the share of captions whose
video is in the cheap scorer's top-k, and R@1 inside that shortlist of the cheap score, the
cross encoder's f (eq. 1 head), f + λ f^t (§3.4 inference score), f^t alone and cheap/σ + f.
For video-to-text it compares the two-stage matrix's columns with the cheap scorer's, and
measures how much of the fused score is a per-caption offset: the cross encoder is trained
with a softmax over videos for one caption (eq. 2), never over captions for one video.
Writes RUN_DIR/shortlist_diag.json. Used for the ToCo page of the guide.
"""
import argparse
import json

import torch
from videotext.inference import load_model
from videotext.data.run_data import RunData
from videotext.embedding import concat_embeddings
parser = argparse.ArgumentParser(description="ToCo shortlist diagnostic")
parser.add_argument("run")
parser.add_argument("--split", default="test")
args = parser.parse_args()
run = args.run
model = load_model(run, "best"); m = model.method; m.eval()
data = RunData(model.config); test = data.split(args.split)
videos = [v for v in test]
vid_index = {v.id: i for i, v in enumerate(videos)}
texts, owner = [], []
for v in videos:
    for c in v.captions:
        texts.append(c); owner.append(vid_index[v.id])
owner = torch.tensor(owner)
with torch.no_grad():
    t_parts = [m.encode_text(m.prepare_text(texts[i:i+256])) for i in range(0, len(texts), 256)]
    text = concat_embeddings(t_parts)
    v_parts = [m.encode_video({k: b[k] for k in ("features", "masks")}) for b in m.video_batches(test, data.read_features, 64)]
    video = concat_embeddings(v_parts)
    cheap = m.cheap_similarity(text, video)
    k = m.config.rerank_top_k
    top = cheap.topk(k, dim=1).indices  # [T, k]
    t_idx = torch.arange(len(texts)).repeat_interleave(k)
    f_all, ft_all = [], []
    for s in range(0, t_idx.numel(), 512):
        f, ft = m.fuse(text, video, t_idx[s:s+512], top.flatten()[s:s+512])
        w = text["weights"][t_idx[s:s+512], : ft.shape[1]]
        f_all.append(f); ft_all.append((ft * w).sum(1))
    f = torch.cat(f_all).view(-1, k); ft = torch.cat(ft_all).view(-1, k)
hit = top == owner[:, None]
inside = hit.any(1)
def r1(scores):
    return float((hit.gather(1, scores.argmax(1, keepdim=True)).squeeze(1)).float().mean() * 100)
lam = m.config.token_weight
out = {"in_shortlist_pct": float(inside.float().mean() * 100), "k": k,
       "cheap_R1": r1(cheap.gather(1, top)), "f_R1": r1(f), "f_plus_lambda_ft_R1": r1(f + lam * ft),
       "ft_R1": r1(ft), "cheap_plus_f_R1": r1(cheap.gather(1, top) / m.config.cheap_temperature + f)}
# video-to-text: each column of the two-stage matrix mixes fused scores of different captions
fused = f + lam * ft  # [T, k]
def v2t_r1(matrix):  # [T, V] -> R@1 of each video's best caption
    best = matrix.argmax(0)  # [V]
    return float((owner[best] == torch.arange(matrix.shape[1])).float().mean() * 100)
shift = cheap.max() + 1.0 - fused.min()
centred = fused - fused.mean(1, keepdim=True)  # remove each caption's offset over its shortlist
out.update({"v2t_cheap_R1": v2t_r1(cheap), "v2t_two_stage_R1": v2t_r1(cheap.scatter(1, top, fused + shift)),
            "v2t_two_stage_row_centred_R1": v2t_r1(cheap.scatter(1, top, centred + cheap.max() + 1.0 - centred.min())),
            "fused_std_of_caption_means": float(fused.mean(1).std()),
            "fused_mean_std_within_caption": float(fused.std(1).mean())})
print(json.dumps(out, indent=1), flush=True)
json.dump(out, open(f"{run}/shortlist_diag.json", "w"), indent=1)
