"""What is written on screen: text lines read from video frames by an OCR engine, as timed segments.

- `engines`: the OCR engines behind one call (`read(frame) -> [TextBox]`): RapidOCR (PP-OCRv4
  detection and recognition as ONNX, the weights in its PyPI package, sha256-checked) and Debian's
  Tesseract;
- `reader`: frames of a video sampled about once a second, re-read only where the picture changed,
  lines merged across time into segments (text, start, end, box, confidence), kept beside the
  features and resumed.
"""
