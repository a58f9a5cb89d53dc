"""Kill -9 anywhere: a long job killed at random moments, then run again, ends equal to an
uninterrupted run, with nothing to clean by hand.

Each job runs as `videotext …` in its own process group; SIGKILL goes to the whole group (the
decoding workers too) at moments drawn (seeded) over the uninterrupted run's duration. After each
kill the same command runs to the end and its result is compared with the uninterrupted one:
features within 1e-6, the same index entries and ids, the same scores. The default suite kills
each job once, early in its run; the `slow` version at 8 moments over the whole run.
"""
from __future__ import annotations

import json
import operator
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest

from videotext.data.features import FeatureStore
from videotext.search import Index

CLI = [sys.executable, "-m", "videotext.cli"]


def run(args: list[str], kill_after: float | None = None) -> float:
    """Run the command to its end (returns its wall time), or SIGKILL its process group after
    `kill_after` seconds (returns the moment, or -1 when it had already ended)."""
    started = time.monotonic()
    process = subprocess.Popen(CLI + args, stdout=subprocess.DEVNULL, text=True, start_new_session=True,
                               stderr=subprocess.PIPE if kill_after is None else subprocess.DEVNULL)
    if kill_after is None:
        _, err = process.communicate(timeout=600)
        assert process.returncode == 0, err[-2000:]
        return time.monotonic() - started
    try:
        process.wait(timeout=kill_after)
        return -1.0
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        return kill_after


def features_of(folder: Path, experts: list[str]) -> dict[tuple[str, str], np.ndarray]:
    store = FeatureStore(folder)
    return {(e, k): store.get(e, k)[0] for e in experts for k in store.keys(e)}


def scores_of(folder: Path) -> tuple[list[str], np.ndarray]:
    """The entry ids, and each entry's vector scored against fixed probes (the vectors, compared)."""
    index = Index.load(folder)
    ids = sorted(e.id for e in index.entries())
    probes = np.random.default_rng(0).standard_normal((4, index.dim)).astype(np.float32)
    table = np.zeros((len(probes), len(ids)), np.float32)
    for row, probe in enumerate(probes):
        for hit in index.search_one(probe, len(ids)):
            table[row, ids.index(hit.id)] = hit.score
    return ids, table


def moments(total: float, count: int, seed: int) -> list[float]:
    """`count` moments over the job's run (the default suite's one kill: early enough to land)."""
    rng = random.Random(seed)
    return sorted(rng.uniform(0.2 * total, (0.6 if count == 1 else 0.95) * total) for _ in range(count))


@pytest.fixture(scope="module")
def videos(tmp_path_factory) -> Path:
    from videotext.data.synthetic import synthesize

    root = tmp_path_factory.mktemp("kill_videos")
    synthesize(root, num_videos=8, seed=11, progress=False)
    return root


def kill_and_rerun(args: Callable[[Path], list[str]], work: Path, kills: int, seed: int,
                   result: Callable[[Path], Any], same: Callable[[Any, Any], bool] = operator.eq,
                   prepare: Callable[[Path], None] = lambda out: None) -> tuple[list[float], Any]:
    """Run `args(out)` to its end into work/reference; then for each of `kills` seeded moments, into
    a fresh work/killedN (`prepare`d as the reference was): SIGKILL at that moment, the same command
    run again to its end (nothing cleaned by hand), and its `result` the `same` as the reference's.
    Returns the moments (-1: the job had ended first) and the reference's result."""
    prepare(work / "reference")
    total = run(args(work / "reference"))
    reference = result(work / "reference")
    killed_at = []
    for number, moment in enumerate(moments(total, kills, seed)):
        out = work / f"killed{number}"
        prepare(out)
        killed_at.append(run(args(out), kill_after=moment))
        run(args(out))
        assert same(result(out), reference), out
    return killed_at, reference


def close_scores(a: tuple[list[str], np.ndarray], b: tuple[list[str], np.ndarray]) -> bool:
    """The same entry ids, each scored within 1e-6 (`scores_of`)."""
    return a[0] == b[0] and float(np.abs(a[1] - b[1]).max()) <= 1e-6


def kill_extraction(videos: Path, work: Path, kills: int) -> list[float]:
    experts = ["appearance", "motion", "audio"]
    args = lambda out: ["extract", str(videos / "manifest.json"), "-o", str(out), "--experts", ",".join(experts)]  # noqa: E731

    def close(a: dict, b: dict) -> bool:
        return a.keys() == b.keys() and max(float(np.abs(a[k] - b[k]).max()) for k in b) <= 1e-6

    killed_at, reference = kill_and_rerun(args, work, kills, 1, lambda out: features_of(out, experts), close)
    assert len(reference) == 8 * 3
    return killed_at


def kill_index_build(run_dir: Path, videos: Path, work: Path, kills: int, update: bool) -> list[float]:
    folder = videos / "videos"
    args = lambda out: ["index", "build", str(run_dir), str(folder), "-o", str(out), *(["--update"] if update else [])]  # noqa: E731
    run(["index", "build", str(run_dir), str(folder), "-o", str(work / "warm")])  # the run's query encoder exported once
    base = work / "base"

    def from_base(out: Path) -> None:  # with --update: an index of six of the eight videos, updated to all eight
        if update:
            shutil.copytree(base, out)
            shutil.copytree(base.with_name(base.name + ".features"), out.with_name(out.name + ".features"))

    if update:
        subset = work / "subset"
        subset.mkdir()
        for path in sorted(folder.glob("*.mp4"))[:6]:
            shutil.copy(path, subset / path.name)
        run(["index", "build", str(run_dir), str(subset), "-o", str(base)])
    killed_at, reference = kill_and_rerun(args, work, kills, 2, scores_of, close_scores, from_base)
    assert len(reference[0]) == 8
    return killed_at


def kill_milvus_build(run_dir: Path, videos: Path, work: Path, kills: int) -> list[float]:
    """`index build` into Milvus Lite: the rerun holds each entry once (no duplicate rows) behind the
    alias, and no version that was never published is left (only retired ones, kept for readers)."""
    from videotext.search.milvus import PROPERTY_RETIRED, connect

    folder = videos / "videos"
    args = lambda out: ["index", "build", str(run_dir), str(folder), "-o", str(out), "--features",  # noqa: E731
                        str(work / "features"), "--store", f"milvus:{out}.db"]
    run(["index", "build", str(run_dir), str(folder), "-o", str(work / "warm"), "--features", str(work / "features")])

    def stored(out: Path) -> tuple:
        index = Index.load(out)
        client = connect(f"milvus:{out}.db")
        unpublished = [name for name in client.list_collections() if name != index.target()
                       and PROPERTY_RETIRED not in (client.describe_collection(name).get("properties") or {})]
        client.close()
        return scores_of(out), len(index), index.target() == index.collection, unpublished

    def same(a: tuple, b: tuple) -> bool:
        return close_scores(a[0], b[0]) and a[1:] == b[1:]

    killed_at, reference = kill_and_rerun(args, work, kills, 3, stored, same)
    assert len(reference[0][0]) == reference[1] == 8 and reference[2:] == (True, [])  # every row once
    return killed_at


def kill_duplicates(run_dir: Path, videos: Path, work: Path, kills: int) -> list[float]:
    """`index duplicates` over an index holding two copies: the report (JSON and CSV) equal."""
    folder = work / "videos"
    folder.mkdir()
    for path in sorted((videos / "videos").glob("*.mp4"))[:6]:
        shutil.copy(path, folder / path.name)
    shutil.copy(folder / "synth000000.mp4", folder / "copy_a.mp4")
    shutil.copy(folder / "synth000001.mp4", folder / "copy_b.mp4")
    run(["index", "build", str(run_dir), str(folder), "-o", str(work / "idx")])
    args = lambda out: ["index", "duplicates", str(work / "idx"), "-o", str(out)]  # noqa: E731
    report = lambda out: [out.with_name(f"{out.name}.{ext}").read_bytes() for ext in ("json", "csv")]  # noqa: E731
    killed_at, reference = kill_and_rerun(args, work, kills, 4, report)
    assert json.loads(reference[0])["duplicates"] >= 4  # the two copies and their originals
    return killed_at


def kill_speech(run_dir: Path, work: Path, kills: int) -> list[float]:
    """`index build --speech` (Whisper tiny.en on espeak-ng speech): the same lines after the rerun."""
    from tests.speech_media import ESPEAK, ESPEAK_MISSING, SENTENCES, speaking_video

    if ESPEAK is None:
        pytest.skip(ESPEAK_MISSING)
    pytest.importorskip("faster_whisper", reason="the speech extra is not installed")
    folder = work / "speaking"
    folder.mkdir()
    for number in range(4):
        speaking_video(folder / f"said{number}.mp4", SENTENCES[number][0], seed=number)
    args = lambda out: ["index", "build", str(run_dir), str(folder), "-o", str(out), "--speech"]  # noqa: E731
    run(["index", "build", str(run_dir), str(folder), "-o", str(work / "warm")])  # query encoder exported once

    def said(out: Path) -> tuple[list[tuple], list[str]]:
        lines = [json.loads(line) for line in (out / "speech.jsonl").read_text(encoding="utf-8").splitlines()]
        return sorted((line["entry"], line["start"], line["end"], line["text"]) for line in lines), scores_of(out)[0]

    killed_at, reference = kill_and_rerun(args, work, kills, 5, said)
    assert len({line[0] for line in reference[0]}) == 4
    return killed_at


def kill_benchmark(tiny_synth: Path, work: Path, kills: int) -> list[float]:
    """`benchmark run` (dual, 2 epochs, the tiny set): the rerun's record has the same test figures."""
    from tests.conftest import TINY_EXTRACT

    data = work / "data"
    data.mkdir()
    (data / "synthetic-32-seed0").symlink_to(tiny_synth, target_is_directory=True)
    settings = ["data.videos=32", "data.splits=[0.8,0.1,0.1]", "seeds=[0]",
                f"data.extraction={json.dumps({'rate': 1.0, 'options': TINY_EXTRACT})}",
                "set=[train.batch_size=8,schedule.warmup_steps=1,train.log_every=1]"]
    args = lambda out: ["benchmark", "run", "synthetic", "-o", str(out / "runs"), "--results", str(out / "results"),  # noqa: E731
                        "--data-root", str(data), "--rows", "dual", "--epochs", "2",
                        *[x for setting in settings for x in ("--set", setting)]]

    def results(out: Path) -> str:
        record = json.loads((out / "results" / "dual" / "seed_0.json").read_text(encoding="utf-8"))
        return json.dumps(record["results"], sort_keys=True)

    return kill_and_rerun(args, work, kills, 6, results)[0]


JOBS = ["extract", "index build", "index build --update", "index build (Milvus Lite)", "index duplicates",
        "index build --speech", "benchmark run"]


def kill(job: str, videos: Path, run_dir: Path, work: Path, kills: int, tiny_synth: Path | None = None) -> list[float]:
    if job == "extract":
        return kill_extraction(videos, work, kills)
    if job == "index build (Milvus Lite)":
        return kill_milvus_build(run_dir, videos, work, kills)
    if job == "index duplicates":
        return kill_duplicates(run_dir, videos, work, kills)
    if job == "index build --speech":
        return kill_speech(run_dir, work, kills)
    if job == "benchmark run":
        return kill_benchmark(tiny_synth, work, kills)
    return kill_index_build(run_dir, videos, work, kills, update=job.endswith("--update"))


@pytest.mark.parametrize("job", JOBS)
def test_killed_jobs_finish_equal_to_an_uninterrupted_run(job, videos, conse_run, tiny_synth, tmp_path):
    assert kill(job, videos, conse_run, tmp_path, kills=1, tiny_synth=tiny_synth)[0] > 0  # landed while it ran


@pytest.mark.slow
@pytest.mark.parametrize("job", JOBS)
def test_killed_jobs_at_eight_moments(job, videos, conse_run, tiny_synth, tmp_path):
    assert sum(moment > 0 for moment in kill(job, videos, conse_run, tmp_path, kills=8, tiny_synth=tiny_synth)) >= 6
