"""OCR engines behind one call: `engine.read(frame RGB uint8 [H, W, 3]) -> [TextBox]`, one box per line.

- `rapidocr` (the default, docs/text.md): RapidOCR 1.4.4 (`rapidocr-onnxruntime`), PaddleOCR's
  PP-OCRv4 detector (DB) and recogniser (SVTR, CTC) with the text-direction classifier, run by
  onnxruntime. The three ONNX files ship inside the package; each file's sha256 is checked against
  the pinned release before the first session opens (`videotext.weights`).
- `tesseract`: Debian's `tesseract-ocr` 5 with `tesseract-ocr-eng` (LSTM engine), run as a process on
  a PNG of the frame; its words are joined into lines by (block, paragraph, line).

Boxes are pixel corners `[x0, y0, x1, y1]` of the frame read; confidence is in [0, 1].
"""
from __future__ import annotations

import csv
import io
import os
import shutil
import subprocess
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from videotext.data.ocr.spacing import SPACE_GAP, respace
from videotext.errors import VideoTextError
from videotext.weights import verified_folder

ENGINES = ("rapidocr", "tesseract")
DEFAULT_ENGINE = "rapidocr"


class OcrError(VideoTextError):
    """An OCR engine that cannot be loaded or run."""


@dataclass
class TextBox:
    """One line of text read from a frame: its text, pixel box [x0, y0, x1, y1] and confidence."""

    text: str
    box: list[float]
    confidence: float


class OcrEngine(Protocol):
    source: str  # "ocr:ENGINE:MODEL", what the stored segments name

    def read(self, frame: np.ndarray) -> list[TextBox]: ...


def _check_frame(frame: Any) -> np.ndarray:
    frame = np.asarray(frame)
    if frame.ndim != 3 or frame.shape[2] != 3 or frame.dtype != np.uint8:
        raise OcrError(f"frame: expected RGB uint8 [H, W, 3], got {frame.dtype} {list(frame.shape)}")
    return frame


class RapidOcrEngine:
    """PP-OCRv4 through RapidOCR on onnxruntime, `threads` intra-op threads per session; spaces the
    recogniser dropped are put back from its character positions and by splitting runs that are not
    words (`data.ocr.spacing`; `split_words=False` keeps them)."""

    source = "ocr:rapidocr:pp-ocrv4"

    def __init__(self, threads: int = 1, min_confidence: float = 0.5, space_gap: float = SPACE_GAP,
                 split_words: bool = True):
        self.space_gap, self.split_words = float(space_gap), bool(split_words)

        folder = verified_folder("rapidocr")  # checks the sha256 of the three ONNX files
        try:
            from rapidocr_onnxruntime import RapidOCR
        except ImportError as exc:
            raise OcrError(f"RapidOCR cannot be imported ({exc}): pip install 'videotext[ocr]' and "
                           "pip install --no-deps rapidocr-onnxruntime==1.4.4") from None
        self.engine = RapidOCR(det_model_path=str(folder / "ch_PP-OCRv4_det_infer.onnx"),
                               rec_model_path=str(folder / "ch_PP-OCRv4_rec_infer.onnx"),
                               cls_model_path=str(folder / "ch_ppocr_mobile_v2.0_cls_infer.onnx"),
                               intra_op_num_threads=int(threads), inter_op_num_threads=1,
                               text_score=float(min_confidence), print_verbose=False)

    def read(self, frame: np.ndarray) -> list[TextBox]:
        frame = _check_frame(frame)
        result, _ = self.engine(np.ascontiguousarray(frame[:, :, ::-1]),  # it reads BGR, as OpenCV does
                                return_word_box=self.space_gap > 0)
        out = []
        for corners, text, score, *characters in result or []:
            if self.split_words:
                text = respace(str(text), characters[0] if characters else None, self.space_gap)
            points = np.asarray(corners, dtype=np.float64)  # [4, 2] corners of a possibly rotated box
            x0, y0 = points.min(0)
            x1, y1 = points.max(0)
            if str(text).strip():
                out.append(TextBox(str(text).strip(), [float(x0), float(y0), float(x1), float(y1)], float(score)))
        return out


class TesseractEngine:
    """Tesseract 5 (LSTM) as a process on `threads` OpenMP threads; words of one (block, paragraph,
    line) make a line."""

    def __init__(self, language: str = "eng", min_confidence: float = 0.5, binary: str | None = None,
                 threads: int = 1):
        self.threads = max(1, int(threads))
        self.binary = binary or shutil.which("tesseract")
        if self.binary is None:
            raise OcrError("tesseract is not installed: apt-get install tesseract-ocr tesseract-ocr-eng "
                           "(make installs it as root)")
        self.language = language
        self.min_confidence = float(min_confidence)
        version = subprocess.run([self.binary, "--version"], capture_output=True, text=True).stdout.split()
        self.source = f"ocr:tesseract:{version[1] if len(version) > 1 else 'unknown'}"

    def read(self, frame: np.ndarray) -> list[TextBox]:
        from PIL import Image

        frame = _check_frame(frame)
        png = io.BytesIO()
        Image.fromarray(frame).save(png, format="PNG")
        env = {**os.environ, "OMP_THREAD_LIMIT": str(self.threads)}
        done = subprocess.run([self.binary, "stdin", "stdout", "-l", self.language, "--psm", "11", "tsv"],
                              input=png.getvalue(), capture_output=True, env=env)
        if done.returncode != 0:
            raise OcrError(f"tesseract failed: {done.stderr.decode(errors='replace').strip()[:300]}")
        lines: dict[tuple, list[dict]] = {}
        for row in csv.DictReader(io.StringIO(done.stdout.decode("utf-8", errors="replace")), delimiter="\t",
                                  quoting=csv.QUOTE_NONE):
            text = (row.get("text") or "").strip()
            if row.get("level") != "5" or not text or float(row.get("conf", -1)) < 0:
                continue
            lines.setdefault((row["block_num"], row["par_num"], row["line_num"]), []).append(row)
        out = []
        for words in lines.values():
            confidence = float(np.mean([float(w["conf"]) for w in words])) / 100.0
            if confidence < self.min_confidence:
                continue
            left = [float(w["left"]) for w in words]
            top = [float(w["top"]) for w in words]
            right = [float(w["left"]) + float(w["width"]) for w in words]
            bottom = [float(w["top"]) + float(w["height"]) for w in words]
            out.append(TextBox(" ".join(w["text"].strip() for w in words),
                               [min(left), min(top), max(right), max(bottom)], confidence))
        return out


def ocr_engine(name: str = DEFAULT_ENGINE, threads: int = 1, **options: Any) -> OcrEngine:
    """The OCR engine `name` (rapidocr | tesseract), loaded; `options` go to its class."""
    if name == "rapidocr":
        return RapidOcrEngine(threads=threads, **options)
    if name == "tesseract":
        return TesseractEngine(threads=threads, **options)
    raise OcrError(f"OCR engine {name!r}: expected one of {', '.join(ENGINES)}")
