"""`videotext benchmark`: the table is written from real runs (2 methods, 1 seed, 2 epochs on the
tiny synthetic set), finished runs are reused, unfinished rows say so; the shared-event data option."""
from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import TINY_EXTRACT


def _tiny_benchmark(tiny_synth: Path, data_root: Path):
    from videotext.benchmark.definition import load_benchmark

    data_root.mkdir(parents=True, exist_ok=True)
    (data_root / "synthetic-32-seed0").symlink_to(tiny_synth, target_is_directory=True)
    return load_benchmark("synthetic", [
        "data.videos=32", "data.splits=[0.8,0.1,0.1]", "seeds=[0]",
        f"data.extraction={json.dumps({'rate': 1.0, 'options': TINY_EXTRACT})}",
        "set=[train.batch_size=8,schedule.warmup_steps=1,train.log_every=1]"])


def test_table_is_written_from_the_finished_runs_and_they_are_reused(tiny_synth, tmp_path):
    from videotext.benchmark.runner import run_benchmark
    from videotext.benchmark.table import write_page

    bench = _tiny_benchmark(tiny_synth, tmp_path / "data")
    bench.row("toco").threads = 2  # a row's own torch threads (rows.<name>.threads) over the benchmark's 1
    out, results, page = tmp_path / "runs", tmp_path / "results", tmp_path / "docs" / "benchmark.md"
    result = run_benchmark(bench, out, tmp_path / "data", rows=["dual", "toco"], epochs=2, results=results)
    assert result == {"finished": ["dual/seed_0", "toco/seed_0"], "failed": []}
    assert sorted(str(p.relative_to(results)) for p in results.rglob("*") if p.is_file()) == [
        "dual/.seed_0.json.crc32", "dual/seed_0.json", "toco/.seed_0.json.crc32", "toco/seed_0.json"
    ]  # the records and their digests alone: no checkpoints beside them
    write_page(bench, out, page, "videotext benchmark report test", results)
    text = page.read_text(encoding="utf-8")

    def row_cells(label: str) -> list[str]:
        line = next(line for line in text.splitlines() if line.startswith(f"| {label}"))
        return [c.strip() for c in line.strip("|").split("|")]

    tested = {name: json.loads((out / name / "seed_0" / "test_metrics.json").read_text()) for name in ("dual", "toco")}
    dual, toco = row_cells("dual encoder (baseline)"), row_cells("ToCo two-stage (top 16)")
    # cells: row, seeds, cap, epochs run, best val epoch, rising at cap, t2v R1 R5 MdR, v2t R1 R5 MdR, paired,
    # params, CPU-s, ms/query, ms/video
    record = json.loads((results / "toco" / "seed_0.json").read_text())
    dual_record = json.loads((results / "dual" / "seed_0.json").read_text())
    assert dual[1] == "1 of 1" and dual[2] == "2" and dual[3] == "2"
    assert dual[4] == f"{dual_record['best_epoch']:g}" and dual[5] in ("no", "**yes** (1 of 1)")
    assert dual_record["best_epoch"] == dual_record["best_step"] / dual_record["steps_per_epoch"]
    assert dual[6] == f"{tested['dual']['t2v']['R1']:.1f}" and dual[9] == f"{tested['dual']['v2t']['R1']:.1f}"
    assert toco[6] == f"{tested['toco']['t2v']['R1']:.1f}"
    assert toco[12].startswith(f"{tested['toco']['t2v']['R1'] - tested['dual']['t2v']['R1']:.1f}")
    cheap = row_cells("ToCo cheap scorer alone")
    assert cheap[6] == f"{record['results']['toco-cheap']['t2v']['R1']:.1f}"
    # what the record keeps of the run: its selection curve, the rule as the trainer applied it, its logged losses
    assert [e for e, _ in dual_record["val_select_curve"]] == [1.0, 2.0] and dual_record["select_metric"] == "t2v.geometric_mean"
    assert dual_record["early_stop"] == {"patience": 0, "min_delta": 0.0, "metric": "t2v.geometric_mean"}  # cosine
    assert dual_record["train_log"]["steps"]["all"] > 0 and "loss" in dual_record["train_log"]["all"]
    assert record["train_cpu_s"] > 0 and record["trainable_parameters"] > 0
    # dual's re-scored lines: the same checkpoint, on their own table, paired with the plain row
    assert dual_record["results"]["dual"] == {k: v for k, v in tested["dual"].items()
                                              if isinstance(v, dict) and k != "ranks"}  # plain unchanged
    assert dual_record["rescored"]["dual-dsl"]["rescore"] == "dsl" and "v2t" not in dual_record["results"]["dual-qbnorm"]
    assert dual_record["rescored"]["dual-qbnorm"]["settings"]["bank_size"] > 0
    assert dual_record["inference"]["dual-dsl"]["rescore_cpu_ms"] >= 0
    dsl, qb = row_cells("dual encoder re-scored by dual softmax"), row_cells("dual encoder re-scored by QB-Norm")
    for cells, name in ((dsl, "dual-dsl"), (qb, "dual-qbnorm")):
        rescored_r1 = dual_record["results"][name]["t2v"]["R1"]
        assert cells[6] == f"{rescored_r1:.1f}" and cells[12].startswith(f"{rescored_r1 - tested['dual']['t2v']['R1']:.1f}")
    assert dsl[9] == f"{dual_record['results']['dual-dsl']['v2t']['R1']:.1f}" and qb[9] == "–"  # QB-Norm: t2v only
    assert qb[13] == f"{dual_record['results']['dual-qbnorm']['t2v']['rescored_queries']:.1f}"
    assert "## Inference-time re-scoring" in text and "information a single-query search does not have" in text
    assert sum(line.startswith("| dual encoder re-scored") for line in text.splitlines()) == 2  # not in main / toco_init
    assert record["inference"]["toco"]["query_cpu_ms"] > 0 and [e for e, _ in record["val_curve"]] == [2.0]  # eval_every=2
    dual_curve = json.loads((results / "dual" / "seed_0.json").read_text())["val_curve"]
    assert [e for e, _ in dual_curve] == [1.0, 2.0] and dual_curve[-1][1] >= 0
    assert float(re.match(r"[\d.]+", toco[-1]).group()) > 0  # ms per video
    import yaml

    assert (record["threads"], json.loads((results / "dual" / "seed_0.json").read_text())["threads"]) == (2, 1)
    assert yaml.safe_load((out / "toco" / "seed_0" / "config.yaml").read_text())["train"]["threads"] == 2
    # training CPU-s count the frozen text caches filled before the first step (dual's MiniLM; ToCo caches
    # its text states inside the steps, already counted)
    assert dual_record["text_cache_cpu_s"] > 0 and record["text_cache_cpu_s"] == 0.0
    assert toco[-3] == f"{record['train_cpu_s'] + record['text_cache_cpu_s']:.0f} (2 threads)" and re.fullmatch(r"\d+", dual[-3])
    assert "except `toco` (2; its CPU-seconds and CPU-milliseconds count every thread)" in text
    from videotext.benchmark.analysis import run_event_confusions

    confusions = run_event_confusions(out / "dual" / "seed_0")  # the selected checkpoint, on test
    assert confusions["t2v_R1"] == pytest.approx(tested["dual"]["t2v"]["R1"], abs=1e-6)
    assert 0 <= confusions.get("errors_sharing_pct", 0) <= 100
    from videotext.benchmark.analysis import run_fit_gap

    gap = run_fit_gap(out / "toco" / "seed_0", {"two-stage": [], "cheap": ["model.rerank_top_k=0"]})
    for name, row in (("two-stage", "toco"), ("cheap", "toco-cheap")):  # the test half reproduces the records
        assert gap[name]["test"]["t2v"]["R1"] == pytest.approx(record["results"][row]["t2v"]["R1"], abs=1e-6)
        assert gap[name]["train"]["t2v"]["n_queries"] > 0 and gap[name]["videos"] == record["data"]["splits"]["test"]
    assert row_cells("MMT")[4] == "not run" and "- `mmt` seed 0: not run" in text
    png = page.with_name("benchmark_r1_cost.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.name in text

    from typer.testing import CliRunner

    from videotext.cli import app

    # the records alone regenerate the page: the runs folder (checkpoints) is not needed
    by_cli = tmp_path / "cli" / "page.md"
    done = CliRunner().invoke(app, ["benchmark", "report", "synthetic", "--out", str(tmp_path / "elsewhere"),
                                    "--results", str(results), "-o", str(by_cli),
                                    "--set", "seeds=[0]", "--set", "data.videos=32"])
    assert done.exit_code == 0, done.output
    assert f"--results {results}" in by_cli.read_text()
    assert row_cells("dual encoder (baseline)") == [c.strip() for c in next(
        line for line in by_cli.read_text().splitlines() if line.startswith("| dual encoder")).strip("|").split("|")]
    bad = CliRunner().invoke(app, ["benchmark", "report", "nosuch"])
    assert bad.exit_code == 2 and "no packaged benchmark of that name" in bad.output

    stamp = (results / "dual" / "seed_0.json").stat().st_mtime_ns
    again = run_benchmark(bench, out, tmp_path / "data", rows=["dual"], epochs=2, results=results)
    assert again["finished"] == ["dual/seed_0"] and (results / "dual" / "seed_0.json").stat().st_mtime_ns == stamp
    # a larger budget is not the finished run; dual's cosine schedule cannot be continued to it
    from videotext.config import ConfigError

    with pytest.raises(ConfigError, match=r"dual/seed_0: .*finished with 2 epochs, the row now asks for 3.*'cosine'"):
        run_benchmark(bench, out, tmp_path / "data", rows=["dual"], epochs=3, results=results)


def test_packaged_benchmark_uses_the_demo_extraction_settings_and_demo_data_folder():
    from videotext.benchmark.definition import load_benchmark
    from videotext.benchmark.runner import plan
    from videotext.demo import DEMO_SPLITS, DEMO_VIDEOS, _extraction_options

    bench = load_benchmark("synthetic")
    demo = _extraction_options("synthetic")  # the same, but the appearance network at 128 px, as the records were made
    assert bench.data.extraction == {**demo, "options": {**demo["options"], "appearance": {"input_size": 128}}}
    assert (bench.data.videos, tuple(bench.data.splits)) == (DEMO_VIDEOS, DEMO_SPLITS)
    assert bench.data.folder_name() == f"synthetic-{DEMO_VIDEOS}-seed0"  # the demo's data/ folder
    order = [(row.name, seed) for row, seed in plan(bench)]
    assert order[:2] == [("dual", 0), ("mmt", 0)] and order.index(("dual", 1)) > order.index(("clip4clip", 0))
    assert {r.name for r in bench.rows if r.phase == 1} >= {"dual", "mmt", "coot", "supportset-none", "supportset-cross",
                                                           "toco", "frozen", "clip4clip"}


def _record(curve, epochs, best_step, steps_per_epoch=None, train=1280):
    record = {"row": "dual", "seed": 0, "epochs": epochs, "val_curve": curve, "best_step": best_step,
              "data": {"splits": {"train": train}}}
    return {**record, **({"steps_per_epoch": steps_per_epoch} if steps_per_epoch else {})}


def test_training_length_rule_from_the_record():
    from videotext.benchmark.definition import load_benchmark
    from videotext.benchmark.table import best_epoch, seed_rule, trained_epochs

    bench = load_benchmark("synthetic")
    assert (bench.training.patience_epochs, bench.training.min_delta) == (5, 1.0)
    dual = bench.row("dual")  # batch 64 over 1 280 training videos: 20 steps an epoch
    rising = _record([[e, 2.0 * e] for e in range(1, 31)], 30, 600)
    assert seed_rule(bench, dual, rising) == {"run": 30.0, "best": 30.0, "stopped": False, "rising": True}
    # flat after epoch 20 (within 1 point of its value there): settled, its best (epoch 24) derived from best_step
    flat = _record([[e, min(e, 20) + (0.5 if e == 24 else 0.0)] for e in range(1, 31)], 30, 480)
    assert seed_rule(bench, dual, flat) == {"run": 30.0, "best": 24.0, "stopped": False, "rising": False}
    # early stopping at epoch 20 of a 40-epoch cap: stopped, not rising; a kept steps_per_epoch is used as is
    stopped = _record([[e, 2.0 * e] for e in range(1, 21)], 40, 5 * 7, steps_per_epoch=7)
    assert trained_epochs(stopped) == 20.0
    assert seed_rule(bench, dual, stopped) == {"run": 20.0, "best": 5.0, "stopped": True, "rising": False}
    assert best_epoch(bench, dual, {**flat, "best_step": 481}) is None  # no validation at that step
    assert best_epoch(bench, dual, {**flat, "best_epoch": 7.0}) == 7.0  # a record that keeps it


def test_rule_overrides_arm_early_stopping_only_where_the_schedule_allows():
    from videotext.benchmark.definition import load_benchmark
    from videotext.benchmark.runner import rule_overrides
    from videotext.config import load_config

    bench = load_benchmark("synthetic")
    mmt = load_config("mmt/synthetic")  # step decay: the lr does not depend on the budget
    assert rule_overrides(bench, mmt) == ["train.early_stop_patience=5", "train.early_stop_min_delta=1.0",
                                          "train.early_stop_metric=t2v.R1"]
    assert rule_overrides(bench, load_config("mmt/synthetic", ["train.eval_every=2"]))[0] == "train.early_stop_patience=3"
    assert rule_overrides(bench, load_config("dual/synthetic")) == []  # cosine: trains to its cap
    assert rule_overrides(bench, load_config("coot/synthetic")) == []  # §4's own patience is kept


def test_event_confusions_by_hand():
    from videotext.benchmark.analysis import event_confusions

    shares = np.zeros((4, 4), dtype=bool)
    for a, b in [(1, 2), (1, 3)]:
        shares[a, b] = shares[b, a] = True
    sims = np.full((4, 4), 0.0)
    sims[[0, 1, 2, 3], [0, 2, 0, 1]] = 1.0  # top-1: right, wrong (shares), wrong (does not), wrong (shares)
    got = event_confusions(sims, np.array([0, 1, 2, 3]), shares)
    assert got["t2v_R1"] == pytest.approx(25.0) and got["errors"] == 3
    assert got["errors_sharing_pct"] == pytest.approx(200 / 3)
    assert got["random_sharing_pct"] == pytest.approx(100 * (2 / 3 + 1 / 3 + 1 / 3) / 3)  # 4/9


def test_shared_events_option_makes_batches_share_events_and_zero_is_the_default_data():
    from videotext.data.synthetic import generate_specs
    from videotext.data.synthetic.sharing import batch_event_sharing
    from videotext.data.synthetic.specs import shared_look_pool

    default = generate_specs(400, seed=0)
    assert [s.captions for s in generate_specs(400, seed=0, shared_events=0.0)] == [s.captions for s in default]
    shared = generate_specs(400, seed=0, shared_events=1.0)
    pool = set(shared_look_pool(0))
    assert all({(o.colour, o.shape) for o in s.objects} <= pool for s in shared)
    base = batch_event_sharing([s.to_video() for s in default], 32)
    more = batch_event_sharing([s.to_video() for s in shared], 32)
    assert more > base + 20, (base, more)
    with pytest.raises(ValueError, match="shared_events"):
        generate_specs(10, shared_events=1.5)
