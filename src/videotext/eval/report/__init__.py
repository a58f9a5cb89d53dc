"""One self-contained HTML page per run: `run_dir/report/index.html`.

The page shows what a reader of a paper's results section wants to check at a glance:
the test table in the papers' format (R@1 R@5 R@10 R@50 MdR MnR, text→video and
video→text), the training curves (loss and its named parts, learning rate), the
validation curves with the selected epoch marked, the distribution of ranks (recall@K
against chance, log-binned rank histogram) and qualitative examples (top-5 thumbnails
per query, the correct video outlined).

One job per module:

    log.py         read and summarise the metrics lines (no drawing, no files)
    plots.py       the figures, and `new_figure` / `save_figure` for a method's or a comparison's own
    html.py        the page template, CSS, tables, figure and example blocks
    thumbnails.py  the examples' thumbnails inside `report/thumbs/`
    page.py        `write_report`: puts them together

Decisions:
- Plots are PNG files beside `index.html` and referenced relatively, so the folder can
  be copied or zipped as a whole; no JavaScript, no CDN, one small CSS block.
- Plots use matplotlib's object API (`Figure` + Agg canvas), never `pyplot`, so making
  a report is headless, thread-safe and does not switch the backend of a user's
  interactive session.
- Thumbnails (files or arrays) are copied/saved into `report/thumbs/` (downscaled), so
  the page never points outside its folder. A thumbnail that cannot be read becomes a
  placeholder and a warning; it never stops the report.
- Every file is written atomically (`videotext.io`), `index.html` last, so a reader
  never sees a page that refers to images not yet written.
- All text from the caller is HTML-escaped.
"""
from videotext.eval.report.page import write_report

__all__ = ["write_report"]
