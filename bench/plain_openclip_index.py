"""The plain script a practitioner writes to embed a folder of videos with open_clip: the
reference `bench/index_build.py` times `videotext index build` against.

    python bench/plain_openclip_index.py FOLDER OUT.npz [--model ViT-B-32]

PyAV decodes each file once, front to back; one frame per second goes through open_clip's
own `preprocess` (PIL); `encode_image` runs in batches of 32 under bf16 autocast; a video's
vector is the mean of its frames' unit vectors. Random weights (no CLIP weights ship here;
the speed does not depend on them).
"""
import sys
from pathlib import Path

import av
import numpy as np
import open_clip
import torch
import torch.nn.functional as F

folder, out = Path(sys.argv[1]), Path(sys.argv[2])
model_name = sys.argv[sys.argv.index("--model") + 1] if "--model" in sys.argv else "ViT-B-32"
torch.manual_seed(0)
model, _, preprocess = open_clip.create_model_and_transforms(model_name, pretrained=None)
model.eval()
vectors = {}
for path in sorted(p for p in folder.iterdir() if p.suffix in (".mp4", ".avi", ".mkv", ".mov", ".webm")):
    frames, next_time = [], 0.0
    with av.open(str(path)) as container:
        for frame in container.decode(video=0):
            if frame.time is not None and frame.time >= next_time:
                frames.append(preprocess(frame.to_image()))
                next_time += 1.0
    embedded = []
    with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16):
        for start in range(0, len(frames), 32):
            embedded.append(model.encode_image(torch.stack(frames[start : start + 32])).float())
    video = F.normalize(torch.cat(embedded), dim=-1).mean(0)
    vectors[path.stem] = F.normalize(video, dim=0).numpy()
np.savez(out, **vectors)
print(f"embedded {len(vectors)} videos")
