"""The checkpoints the authors released with their official code, by name, and how to get one.

`videotext convert --list` prints this table; `videotext convert METHOD NAME` downloads the named
file into the cache (`videotext.download`) and converts it. The URLs are the ones the official
READMEs give (m-bain/frozen-in-time, gabeur/mmt, gingsi/coot-videotext); the figures are the
papers' own numbers for the model each file holds (or the nearest one the paper reports, said so).
No sha256 is recorded: the files could not be fetched where this table was written; give
`--sha256 HEX` to pin one.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from videotext.download import archive_member, check_sha256, download, is_url
from videotext.errors import VideoTextError

PAPERS = {
    "frozen": "Frozen in Time (Bain et al., ICCV 2021) — github.com/m-bain/frozen-in-time",
    "mmt": "MMT: Multi-modal Transformer for Video Retrieval (Gabeur et al., ECCV 2020) — github.com/gabeur/mmt",
    "coot": "COOT: Cooperative Hierarchical Transformer (Ging et al., NeurIPS 2020) — github.com/gingsi/coot-videotext",
}

FROZEN_MODELS = "https://www.robots.ox.ac.uk/~maxbain/frozen-in-time/models"
MMT_CHECKPOINTS = "http://pascal.inrialpes.fr/data2/vgabeur/mmt/data/checkpoints"
COOT_MODELS_ID = "1JPN8v3sz4rRvqo5CB76lrOdCh6kSDkg4"  # Google Drive file of provided_models.tar.gz


@dataclass(frozen=True)
class Released:
    """One released checkpoint: where it is, what it was trained on, what the paper reports for it."""

    name: str
    method: str
    url: str
    data: str  # training data (and the inputs it expects)
    figure: str  # the paper's number for this model, and where it is printed
    source: str  # where the URL is published
    member: str | None = None  # the checkpoint inside the archive at `url`
    filename: str | None = None  # the cache file name, when the URL has none
    page: str | None = None  # the link to open in a browser when the URL needs one
    sha256: str | None = None


RELEASED = (
    Released("frozen-cc-webvid2m-4f", "frozen", f"{FROZEN_MODELS}/cc-webvid2m-4f_stformer_b_16_224.pth.tar",
             "CC3M + WebVid-2M (5.5M pairs), 4 frames, ViT-B/16 224, DistilBERT",
             "MSR-VTT 1k-A text→video zero-shot R@1 23.2, R@5 44.6, R@10 56.6, MdR 7 (Table 4)",
             "README 'Pretrained Weights' (commit e1f13e1)"),
    Released("frozen-cc-webvid2m-coco-4f", "frozen", f"{FROZEN_MODELS}/cc-webvid-2m-coco_stformer_b_16_224.pth.tar",
             "CC3M + WebVid-2M + COCO Captions (6.1M pairs), 4 frames, ViT-B/16 224, DistilBERT",
             "MSR-VTT 1k-A text→video zero-shot R@1 24.7, R@5 46.9, R@10 57.2, MdR 7 (Table 4)",
             "README 'Pretrained Weights' (commits 22a91d7 to caedd76)"),
    Released("frozen-webvid2m-4f", "frozen", f"{FROZEN_MODELS}/webvid2m-4f_stformer_b_16_224.pth.tar",
             "WebVid-2M (2.5M pairs), 4 frames, ViT-B/16 224, DistilBERT",
             "no zero-shot figure for this file; WebVid-2M pre-training then MSR-VTT fine-tuning: "
             "R@1 26.0, R@10 64.9 (Table 2, one epoch of pre-training)",
             "README 'Pretrained Weights' (commits 22a91d7 to caedd76)"),
    Released("mmt-msrvtt", "mmt", f"{MMT_CHECKPOINTS}/MSRVTT_jsfusion_trainval.pth",
             "MSR-VTT 1k-A train+val (9k videos) from scratch, 7 experts",
             "MSR-VTT 1k-A text→video R@1 24.6±0.4, R@5 54.0, R@10 67.1 (Table 7; the README expects "
             "24.1 / 56.4 / 69.6 from this file)", "README 'Download the checkpoints'"),
    Released("mmt-howto100m", "mmt", f"{MMT_CHECKPOINTS}/HowTo100M_full_train.pth",
             "HowTo100M (pre-training only), motion + audio experts",
             "MSR-VTT zero-shot text→video R@5 6.9, MdR 160 (Table 1; R@5 14.4 without stop words)",
             "README 'Download the checkpoints'"),
    Released("mmt-msrvtt-pretrained", "mmt", f"{MMT_CHECKPOINTS}/prtrn_MSRVTT_jsfusion_trainval.pth",
             "HowTo100M pre-training, then MSR-VTT 1k-A train+val, 7 experts",
             "MSR-VTT 1k-A text→video R@1 26.6±1.0, R@5 57.1, R@10 69.6 (Table 7 'Ours-pretrained'; the README "
             "expects 25.8 / 57.2 / 69.3 from this file)", "README 'Download the checkpoints'"),
    *(Released(name, "coot", f"https://drive.google.com/uc?export=download&id={COOT_MODELS_ID}", data, figure,
               "README 'Prepare pretrained models' (Google Drive archive provided_models.tar.gz, ~100 MB)",
               member=f"{member}.pth", filename="provided_models.tar.gz",
               page=f"https://drive.google.com/file/d/{COOT_MODELS_ID}/view?usp=sharing")
      for name, member, data, figure in (
          ("coot-anet", "anet_coot", "ActivityNet Captions train (HSE's ICEP frame features, BERT word features)",
           "ActivityNet val1 paragraph→video R@1 60.8±0.6, R@5 86.6, R@50 98.6 (Table 2)"),
          ("coot-yc2-2d3d", "yc2_2d3d_coot", "YouCook2 train (ResNet / ResNeXt ImageNet + Kinetics features)",
           "YouCook2 val paragraph→video R@1 50.4±2.6, sentence→clip R@1 5.9±0.7 (Table 3)"),
          ("coot-yc2-100m", "yc2_100m_coot", "YouCook2 train (HowTo100M MIL-NCE video features)",
           "YouCook2 val paragraph→video R@1 77.2±1.0, sentence→clip R@1 16.7±0.4 (Table 3)"))),
)


def released(method: str | None = None) -> list[Released]:
    """The released checkpoints (of `method` alone, if given), in table order."""
    return [entry for entry in RELEASED if method in (None, entry.method)]


def find(name: str) -> Released | None:
    return next((entry for entry in RELEASED if entry.name == name), None)


def table_lines(method: str | None = None) -> list[str]:
    """`videotext convert --list`: per paper, each checkpoint's name, training data, figure and URL."""
    if method is not None and method not in PAPERS:
        raise VideoTextError(f"convert --list: no released checkpoints listed for {method!r}; listed: {sorted(PAPERS)}")
    lines: list[str] = []
    for paper in PAPERS if method is None else [method]:
        lines += ["", PAPERS[paper]] if lines else [PAPERS[paper]]
        for entry in released(paper):
            inside = f"  (file {entry.member} inside)" if entry.member else ""
            lines += [f"  {entry.name}", f"    url:      {entry.url}{inside}",
                      *([f"    page:     {entry.page}"] if entry.page else []),
                      f"    data:     {entry.data}", f"    paper:    {entry.figure}",
                      f"    from:     {entry.source}", f"    convert:  videotext convert {paper} {entry.name} -o RUN"]
    return lines


def resolve(method: str, checkpoint: str, sha256: str | None = None, progress: bool = True) -> Path:
    """The local file to convert: a path as given, a URL downloaded into the cache, or a released name's file."""
    if is_url(checkpoint):
        return download(checkpoint, sha256=sha256, progress=progress)
    path = Path(checkpoint)
    entry = find(checkpoint)
    if entry is not None and not path.exists():
        return _fetch_released(method, entry, sha256, progress)
    if method in PAPERS and not path.exists():
        raise VideoTextError(f"{checkpoint}: checkpoint not found (not a file, a URL or a released {method} "
                             f"checkpoint name; `videotext convert {method} --list` lists the names)")
    if sha256 and path.is_file():
        check_sha256(path, sha256, str(path), remove=False)  # the user's own file is never removed
    return path


def _fetch_released(method: str, entry: Released, sha256: str | None, progress: bool) -> Path:
    """Download a released checkpoint (its archive, then the file inside) into the cache."""
    if entry.method != method:
        raise VideoTextError(f"{entry.name} is a released {entry.method} checkpoint, not a {method} one: "
                             f"run `videotext convert {entry.method} {entry.name} ...`")
    try:
        path = download(entry.url, sha256=sha256 or entry.sha256, filename=entry.filename, progress=progress)
    except VideoTextError as exc:
        if entry.page:
            raise VideoTextError(f"{exc}; the file is linked from {entry.page}") from None
        raise
    return archive_member(path, entry.member) if entry.member else path
