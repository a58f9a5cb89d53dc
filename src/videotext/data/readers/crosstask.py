"""CrossTask (Zhukov et al., CVPR 2019): instructional videos with ordered, timed action steps.

Official layout (``crosstask_release/``)::

    tasks_primary.txt          blocks of 5 lines + a blank line: task id, task title, wikiHow url,
                               number of steps K, the K step names comma-separated (in order)
    videos.csv / videos_val.csv    rows ``task,video_id,url`` (no header)
    annotations/{task}_{video_id}.csv    rows ``step,start,end`` (no header): 1-based step
                               index into the task's list, start/end in seconds

Each annotation row becomes a `Segment(start, end, step name)`; a video's `meta` keeps
``task``, ``task_title`` and the task's full ordered ``steps`` list (K names, also the
steps that this video does not show), which the localization protocol
(`videotext.eval.localization`, ToCo §5.2 / Table 3) scores against every second.
Only primary tasks are annotated: videos of other tasks (the related ones) and listed
videos without an annotation file are skipped and counted in ``meta["skipped"]``.

Splits: ``videos_val.csv`` is the set the localization papers report on, so it becomes
``"test"``; the other annotated videos are ``"train"``, and a seeded ``"val"`` is carved
from them (`val_fraction`, `val_count`, `val_seed`) for model selection. Durations are
not in the release (None); media are ``<video_id>.mp4`` or what is found under `video_dir`.
"""
from __future__ import annotations

from pathlib import Path

from videotext.data.readers._common import MediaIndex, build, carve, existing_file, number, read_table
from videotext.data.readers.records import BadRecords
from videotext.data.schema import Video, VideoTextDataset
from videotext.errors import DataFormatError

TASKS_FILE = "tasks_primary.txt"
VIDEO_LISTS = {"videos.csv": "train", "videos_val.csv": "test"}


def read_task_steps(path: str | Path) -> dict[str, dict]:
    """``tasks_primary.txt`` → {task id: {"title", "url", "steps": [K names]}}."""
    path = existing_file(path, "CrossTask task list")
    lines = [line.strip() for line in path.read_text(encoding="utf-8").splitlines()]
    tasks: dict[str, dict] = {}
    row = 0
    while row < len(lines):
        if not lines[row]:
            row += 1
            continue
        block = lines[row : row + 5]
        key = f"line {row + 1}"
        if len(block) < 5:
            raise DataFormatError(path, key, "expected 5 lines per task: id, title, url, number of steps, steps")
        task, title, url, count, names = block
        try:
            n_steps = int(count)
        except ValueError:
            raise DataFormatError(path, f"line {row + 4}", f"number of steps: expected an integer, got {count!r}") from None
        steps = [s.strip() for s in names.split(",")]
        if len(steps) != n_steps:
            raise DataFormatError(path, f"line {row + 5}", f"task {task}: {n_steps} steps announced, {len(steps)} listed")
        tasks[task] = {"title": title, "url": url, "steps": steps}
        row += 5
    if not tasks:
        raise DataFormatError(path, None, "no task in the file")
    return tasks


def read_crosstask(
    path: str | Path, *, video_dir: str | Path | None = None,
    val_fraction: float | None = 0.1, val_count: int | None = None, val_seed: int = 0, on_bad: str = "repair",
) -> VideoTextDataset:
    """Read CrossTask from the release folder (or its ``tasks_primary.txt``)."""
    records = BadRecords(on_bad, path)
    path = Path(path)
    root = path if path.is_dir() else path.parent
    tasks = read_task_steps(root / TASKS_FILE if path.is_dir() else path)
    media = MediaIndex(video_dir)
    videos: list[Video] = []
    splits: dict[str, list[str]] = {"train": [], "test": []}
    seen: set[str] = set()
    skipped = 0
    for list_name, split in VIDEO_LISTS.items():
        list_file = root / list_name
        if not list_file.is_file():
            continue
        for key, row in read_table(list_file, header=False):
            if len(row) < 2:
                raise DataFormatError(list_file, key, "expected task,video_id,url")
            task, vid = row[0].strip(), row[1].strip()
            annotation = root / "annotations" / f"{task}_{vid}.csv"
            if task not in tasks or not annotation.is_file():
                skipped += 1
                continue
            video_id = vid if vid not in seen else f"{task}_{vid}"  # a video listed under two tasks
            seen.add(video_id)
            videos.append(_video(annotation, video_id, vid, task, tasks[task], media, records))
            splits[split].append(video_id)
    if not videos:
        raise DataFormatError(root, None, f"no annotated video listed in {sorted(VIDEO_LISTS)}")
    splits = {name: ids for name, ids in splits.items() if ids}
    dataset = build("crosstask", videos, splits, root, media, {"skipped": skipped, "tasks": tasks}, records)
    if "train" in splits and (val_fraction is not None or val_count is not None):
        carve(dataset, val_fraction, val_count, val_seed)
    return dataset


def _video(annotation: Path, video_id: str, vid: str, task: str, info: dict, media: MediaIndex,
           records: BadRecords) -> Video:
    steps = info["steps"]
    items = []
    for key, row in read_table(annotation, header=False):
        if len(row) != 3:
            raise DataFormatError(annotation, key, f"expected step,start,end, got {len(row)} columns")
        step = number(row[0], annotation, f"{key}.step")
        if step != int(step) or not 1 <= step <= len(steps):
            raise DataFormatError(annotation, f"{key}.step", f"step index {row[0]!r} not in 1..{len(steps)} (task {task})")
        start, end = number(row[1], annotation, f"{key}.start"), number(row[2], annotation, f"{key}.end")
        items.append((key, f"{key}.step", start, end, steps[int(step) - 1]))
    segments = records.segments(items, annotation, video_id)
    return Video(id=video_id, path=media.path(vid, f"{vid}.mp4"), segments=segments,
                 feature_key=None if video_id == vid else vid,
                 meta={"task": task, "task_title": info["title"], "steps": list(steps)})
