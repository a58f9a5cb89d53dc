"""The reproduction guide cannot rot silently: commands, config paths and links in docs/ exist.

Every `videotext <subcommand>` written in a code block or inline code span of docs/**.md
and README.md must name a command of the typer app (groups such as `dataset` and `index`
must name one of their subcommands too); every config named in code (`mmt/msrvtt_1ka`,
packaged) and every `configs/...` path must resolve as `videotext train` resolves it; every
relative Markdown link must resolve; the manifest example in docs/datasets/manifest.md
must load. Every "mean ± std" figure of README.md and docs/ cites the benchmark record it
restates and equals the figure formatted from it, or sits in a region that says it is a
paper's or was measured without a committed record (`videotext.benchmark.figures`), and
docs/benchmark.md is the page its records give. The checkers are tested on bad input too,
so the test can fail.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import typer

from videotext.cli import app

ROOT = Path(__file__).resolve().parents[1]
DOCS = sorted((ROOT / "docs").rglob("*.md"))
PAGES = DOCS + [ROOT / "README.md"]

FENCE = re.compile(r"```[^\n]*\n(.*?)```", re.S)
INLINE = re.compile(r"`([^`\n]+)`")
COMMAND = re.compile(r"(?:^|[\s;|&(`$/])videotext[ \t]+([a-z][a-z0-9-]*)(?:[ \t]+([a-z][a-z0-9-]*))?", re.M)
CONFIG_PATH = re.compile(r"(?<![\w/.~$-])configs/[A-Za-z0-9_][A-Za-z0-9_./-]*")
# `method/dataset` in code: the name of a packaged config when `method` is one of their folders
CONFIG_NAME = re.compile(r"(?<![\w/.~$-])([a-z][a-z0-9_]*)/[A-Za-z0-9_]+(?:\.yaml)?(?![\w/-]|\.\w)")
COMMENT = re.compile(r"(?:^|(?<=\s))#.*$", re.M)
SET = re.compile(r"--set[ \t]+([A-Za-z_][A-Za-z0-9_.]*)=")
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def command_tree() -> dict[str, set[str] | None]:
    """Top-level command name → its subcommand names (None for a plain command)."""
    root = typer.main.get_command(app)  # a click-style group (typer may vendor its own click)
    return {name: set(cmd.commands) if hasattr(cmd, "commands") else None
            for name, cmd in root.commands.items()}


def code_text(markdown: str) -> str:
    """The text of fenced code blocks (minus shell comments) and inline code spans: prose
    mentions ("a videotext manifest") are not commands."""
    blocks = [COMMENT.sub("", block) for block in FENCE.findall(markdown)]
    rest = FENCE.sub("", markdown)
    return "\n".join(blocks + INLINE.findall(rest))


def bad_commands(markdown: str, tree: dict[str, set[str] | None]) -> list[str]:
    """`videotext X [Y]` uses whose X (or, for a group, Y) is not a real command."""
    bad = []
    for name, sub in COMMAND.findall(code_text(markdown)):
        if name not in tree:
            bad.append(name)
        elif tree[name] is not None and sub not in tree[name]:
            bad.append(f"{name} {sub}".strip())
    return bad


def missing_configs(markdown: str) -> list[str]:
    """`configs/...` paths (anywhere) and packaged config names (in code) that neither name
    a file of the repository nor a packaged config (`find_config`, as `videotext train`)."""
    from videotext.config import PACKAGED, ConfigError, find_config

    methods = {p.name for p in PACKAGED.iterdir() if p.is_dir()}
    names = [m.group(0) for m in CONFIG_NAME.finditer(code_text(markdown)) if m.group(1) in methods]
    out = []
    for path in [m.rstrip(".,:;") for m in CONFIG_PATH.findall(markdown)] + names:
        if (ROOT / path).exists():
            continue
        try:
            find_config(path)
        except ConfigError:
            out.append(path)
    return out


def known_path(root: type, key: str) -> bool:
    """Whether `a.b.c` names a field path through the dataclass `root` (lists of dataclasses are leaves)."""
    import dataclasses
    import typing

    node = root
    for part in key.split("."):
        fields = {f.name: f for f in dataclasses.fields(node)} if dataclasses.is_dataclass(node) else {}
        if part not in fields:
            return False
        f = fields[part]
        if callable(f.default_factory):
            node = f.default_factory()
        elif f.default is not dataclasses.MISSING:
            node = f.default
        else:  # a required field: its annotated type
            node = typing.get_type_hints(node)[part]
        node = type(node) if dataclasses.is_dataclass(node) and not isinstance(node, type) else node
    return True


def unknown_set_keys(markdown: str) -> list[str]:
    """`--set a.b=...` keys that no config has. On a `videotext benchmark` command they are
    benchmark-definition paths (threads, data.videos); elsewhere run-config paths
    (data.narration.concat) are followed through the dataclasses, and `model.X` must be a
    field of some method's Config."""
    import dataclasses

    from videotext.benchmark.definition import BenchmarkDef
    from videotext.config import RunConfig
    from videotext.models.registry import METHODS, method_class

    method_class("dual")  # registers the built-in methods
    model_keys = {f.name for cls in METHODS.values() for f in dataclasses.fields(cls.Config)}
    out = []
    for line in code_text(markdown).replace("\\\n", " ").splitlines():
        benchmark = re.search(r"videotext[ \t]+benchmark\b", line) is not None
        for key in SET.findall(line):
            head, _, rest = key.partition(".")
            if benchmark:
                ok = known_path(BenchmarkDef, key)
            else:
                ok = rest in model_keys if head == "model" else known_path(RunConfig, key)
            if not ok:
                out.append(key)
    return out


def broken_links(markdown: str, page: Path) -> list[str]:
    out = []
    for target in LINK.findall(markdown):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            continue  # http(s)://, mailto:, in-page anchors
        path = target.split("#", 1)[0]
        if path and not (page.parent / path).exists():
            out.append(target)
    return out


@pytest.fixture(scope="module")
def tree() -> dict[str, set[str] | None]:
    return command_tree()


def test_guide_pages_exist() -> None:
    names = {p.relative_to(ROOT / "docs").as_posix() for p in DOCS}
    methods = {f"methods/{m}.md" for m in ("supportset", "mmt", "toco", "frozen", "coot", "dual")}
    assert {"index.md", "features.md", "datasets/manifest.md"} | methods <= names


def test_every_reader_format_has_a_page() -> None:
    from videotext.data.readers import READERS

    missing = [f for f in READERS if not (ROOT / "docs" / "datasets" / f"{f}.md").is_file()]
    assert missing == []


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_commands_configs_and_links_exist(page: Path, tree: dict[str, set[str] | None]) -> None:
    text = page.read_text(encoding="utf-8")
    assert bad_commands(text, tree) == [], "unknown videotext subcommands"
    assert missing_configs(text) == [], "config paths that do not exist"
    assert unknown_set_keys(text) == [], "--set keys that no config has"
    assert broken_links(text, page) == [], "relative links that do not resolve"


def test_checkers_catch_rot(tree: dict[str, set[str] | None], tmp_path: Path) -> None:
    assert tree["dataset"] is not None and "convert" in tree["dataset"]
    assert tree["train"] is None
    doc = ("```bash\nvideotext frobnicate x  # a videotext manifest\nvideotext dataset explode y\n"
           "videotext train configs/nope/missing.yaml\n.venv/bin/videotext eval RUN\n"
           "videotext train mmt/nope --set data.manifest=data/mmt/x.json\nvideotext train mmt/msrvtt_1ka\n```\n"
           "Prose about videotext search is not a command, but `videotext serve` is checked.\n"
           "[gone](nowhere.md) [web](https://example.org/x.md) [here](#anchor)\n")
    assert bad_commands(doc, tree) == ["frobnicate", "dataset explode"]
    assert missing_configs(doc) == ["configs/nope/missing.yaml", "mmt/nope"]
    sets = ("`--set data.narration.window_words=100 --set train.freeze=[x] --set model.captioning=none`"
            " `--set data.narration.windows=1 --set model.captionning=x --set train.epochs.x=1 --set foo=1`")
    assert unknown_set_keys(sets) == ["data.narration.windows", "model.captionning", "train.epochs.x", "foo"]
    bench = ("```bash\nvideotext benchmark run synthetic --set threads=2 --set data.videos=64 \\\n"
             "  --set train.epochs=3 --set thread=2\nvideotext train toco/synthetic --set threads=2\n```\n")
    assert unknown_set_keys(bench) == ["train.epochs", "thread", "threads"]
    assert missing_configs("see configs/dual/synthetic.yaml. `toco/synthetic`, `dual/synthetic.yaml`.") == []
    assert missing_configs("`videotext train dual/synthetics`, `runs/dual/x`, `text/plain`") == ["dual/synthetics"]
    (tmp_path / "there.md").write_text("x")
    assert broken_links(doc + "[ok](there.md#top)", tmp_path / "page.md") == ["nowhere.md"]


def test_manifest_example_loads(tmp_path: Path) -> None:
    from videotext.data.schema import VideoTextDataset

    text = (ROOT / "docs" / "datasets" / "manifest.md").read_text(encoding="utf-8")
    examples = [b for b in FENCE.findall(text) if '"videotext-manifest"' in b]
    assert examples
    (tmp_path / "manifest.json").write_text(examples[0])
    dataset = VideoTextDataset.load(tmp_path / "manifest.json")
    assert {k: len(v) for k, v in dataset.splits.items()} == {"train": 1, "val": 1, "test": 1}
    assert dataset["video6"].meta["query_caption"] in dataset["video6"].captions
    assert json.loads(examples[0])["version"] == 1


# --- the tree speaks of the project ---------------------------------------------------------
README_MAX_LINES = 70  # one screen to a first result; depth lives in docs/
# development-process references (a numbered issue or stop, the time an issue was filed, "this"
# stop) and references to files outside the repository (design notes beside the checkout); the
# words are split here so that this file does not match itself
ISSUE, STOP = "iss" "ue", "st" "op"
PROCESS = re.compile(rf"\b{ISSUE}[ -]?#?\d+|\b{ISSUE}-time\b|\b{STOP} \d+\b|\bthis {STOP}\b", re.I)
OUTSIDE = re.compile(r"\.\./shared|\bDESIGN\.md\b|\bOFFICIAL_CODE_NOTES\b|\bDEVELOPERS\.md\b")
TREE_SUFFIXES = {".py", ".md", ".yaml", ".yml", ".toml", ".txt", ".sh", ".html", ".js", ".css", ".json", ".cfg"}


def tree_files() -> list[Path]:
    roots = [ROOT / d for d in ("src", "docs", "bench", "scripts", "tests")]
    files = [ROOT / n for n in ("README.md", "Makefile", "pyproject.toml", ".ci/run")]
    for root in roots:
        files += [p for p in root.rglob("*") if p.suffix in TREE_SUFFIXES and p.is_file()
                  and "egg-info" not in p.as_posix() and "__pycache__" not in p.parts]
    return [p for p in files if p.is_file() and p != Path(__file__).resolve()]


def references(text: str) -> list[str]:
    return [m.group(0) for pattern in (PROCESS, OUTSIDE) for m in pattern.finditer(text)]


def test_readme_fits_one_screen_to_a_first_result() -> None:
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES
    assert lines[3:5] == ["make demo    # creates .venv if needed, installs, runs the main job on the embedded data",
                          "make test    # same set-up, fetches the Debian test assets, runs the test suite"]


def test_the_tree_cites_no_development_history_and_no_file_outside_the_repository() -> None:
    found = {p.relative_to(ROOT).as_posix(): refs for p in tree_files()
             if (refs := references(p.read_text(encoding="utf-8", errors="replace")))}
    assert found == {}


def test_reference_checker_catches_both_kinds() -> None:
    text = (f"as in {ISSUE} 11; the {ISSUE}-time path; until {STOP} 28; see DESIGN.md and ../shared/x; "
            f"a GitHub {ISSUE} thread; {STOP}words")
    assert references(text) == [f"{ISSUE} 11", f"{ISSUE}-time", f"{STOP} 28", "DESIGN.md", "../shared"]


# --- figures quoted from the benchmark records ------------------------------------------------
RECORDS = ROOT / "results" / "benchmark"
BENCHMARK_PAGE = ROOT / "docs" / "benchmark.md"


def test_every_quoted_figure_matches_its_record() -> None:
    """Every figure of README.md and docs/ that reads as measured ("mean ± std", a ratio ×, a
    share %, a number in a table of results, a decimal in a section of measurements) either cites
    its benchmark record and equals the figure formatted from it (per-seed lists and paired 95 %
    intervals too), or sits in a region that says it is a paper's, a bench script's, a setting, or
    was measured without a committed record."""
    from videotext.benchmark.figures import check, parse, pages

    checked = pages([ROOT / "README.md", ROOT / "docs"])
    assert set(PAGES) - set(checked) == {BENCHMARK_PAGE}  # the one generated page, checked below
    errors, cited = [], 0
    for page in checked:
        text = page.read_text(encoding="utf-8")
        errors += check(text, RECORDS, page.relative_to(ROOT).as_posix(), ROOT)
        cited += sum(f.spec is not None for f in parse(text)[0])
    assert errors == []
    readme = parse((ROOT / "README.md").read_text(encoding="utf-8"))[0]
    assert readme and all(f.spec is not None for f in readme)  # README quotes records only
    assert cited >= 50


def test_the_benchmark_page_is_what_its_records_give(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from videotext.benchmark.definition import load_benchmark
    from videotext.benchmark.table import write_page

    monkeypatch.chdir(ROOT)  # the page names the records folder relative to the checkout
    page = write_page(load_benchmark("synthetic"), tmp_path / "runs", tmp_path / "benchmark.md",
                      "videotext benchmark report synthetic -o docs/benchmark.md", Path("results/benchmark/synthetic"))
    assert page.read_text(encoding="utf-8") == BENCHMARK_PAGE.read_text(encoding="utf-8")


def _records(root: Path, row: str, values: list[float]) -> None:
    for seed, value in enumerate(values):
        path = root / "bench" / row / f"seed_{seed}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"results": {row: {"t2v": {"R1": value}}}, "train_cpu_s": 1000.0 * (seed + 8),
                                    "ratio": 2.0 + seed / 10, "share": 40.0 + seed}))


def test_figure_checker_catches_drift_and_uncited_figures(tmp_path: Path) -> None:
    from videotext.benchmark.figures import check, update

    _records(tmp_path, "a", [80.64, 80.93, 78.89])  # 80.2 ± 1.1
    _records(tmp_path, "b", [77.77, 75.75, 75.91])  # a − b: +3.7 ± 1.3 (+2.9 / +5.2 / +3.0), 95 %: [+0.4, +6.9]
    a, b = "bench/a results.a.t2v.R1", "bench/b results.b.t2v.R1"
    good = (f"two-stage **80.2 ± 1.1**<!-- record {a} --> (80.6 / 80.9 / 78.9), "
            f"+3.7 ± 1.3 [+0.4, +6.9]<!-- record {a} - {b} --> (+2.9, +5.2, +3.0) over cheap, "
            f"b − a −3.68 ± 1.30 [−6.91, −0.44]<!-- record {b} - {a} -->, "
            "CPU 9 000 ± 1 000<!-- record bench/a train_cpu_s -->.\n"
            "<!-- figures: paper (Table 1) -->\n\n| x | 24.6 ± 0.4 |\n\n<!-- /figures -->\n"
            "and <!-- figures: unrecorded -->60.1 ± 2.0<!-- /figures --> elsewhere.\n"
            # the other forms: a ratio, a share, a per-seed list, one seed's value, a table of results
            "gradient 2.1×<!-- record bench/a ratio --> (seed 0: 2.0×<!-- record bench/a@0 ratio -->), "
            "41.0 %<!-- record bench/a share --> of the batch, seeds 80.6 / 80.9 / 78.9<!-- record {a} -->.\n"
            "\n| row | t2v R@1 | CPU-s |\n|---|---|---|\n"
            f"| a | 80.2<!-- record {a} --> | 8 000 / 9 000 / 10 000<!-- record bench/a train_cpu_s --> |\n"
            "| `key` | about 0.2 s a step | – |\n\n"  # not a results cell: words; code is not read
            "A 10^6 × 256 matrix, `lr 1e-4`, <!-- figures: setting -->10 % held out<!-- /figures -->, "
            "<!-- figures: bench bench/x.py -->4.2× faster<!-- /figures -->.\n"
            "\n## Our figures\n\nA measured +3.68<!-- record {a} - {b} --> difference.\n")
    good = good.replace("{a}", a).replace("{b}", b)
    (tmp_path / "bench" / "x.py").write_text("")
    assert check(good, tmp_path, repo=tmp_path) == []
    assert update(good, tmp_path) == good

    def one(text: str) -> str:
        errors = check(text, tmp_path, repo=tmp_path)
        assert len(errors) == 1, errors
        return errors[0]

    assert "gives '80.2 ± 1.1'" in one(good.replace("80.2 ± 1.1", "80.3 ± 1.1"))  # an edited figure
    assert "gives '+3.7 ± 1.3'" in one(good.replace("+3.7 ± 1.3", "−3.7 ± 1.3"))  # a flipped sign
    assert "per-seed" in one(good.replace("80.9 / 78.9), ", "80.9 / 78.8), "))  # an edited seed
    assert "not one per seed" in one(good.replace("(80.6 / 80.9 / 78.9)", "(80.6 / 80.9)"))
    assert "cites no record" in one(good + "a new figure 12.0 ± 0.5 here\n")
    assert "no key" in one(good.replace("results.a.t2v.R1 -->", "results.a.t2v.R5 -->", 1))
    assert "follows no" in one(good + "text <!-- record bench/a results.a.t2v.R1 --> alone\n")
    assert "never closed" in one(good + "<!-- figures: paper -->\n")
    assert "unknown kind" in one(good.replace("figures: unrecorded", "figures: trusted"))
    assert "raw HTML" in one(good.replace("and <!-- figures: unrecorded -->", "<!-- figures: unrecorded -->"))
    # the forms beyond "mean ± std": each contradicts its record, or is uncited
    assert "gives '2.1×'" in one(good.replace("2.1×<!--", "2.4×<!--"))
    assert "gives '2.0×'" in one(good.replace("2.0×<!--", "2.2×<!--"))
    assert "gives '41.0 %'" in one(good.replace("41.0 %<!--", "42.0 %<!--"))
    assert "not one value per seed" in one(good.replace("seeds 80.6 / 80.9 / 78.9", "seeds 80.6 / 80.9"))
    assert "gives '80.6 / 80.9 / 78.9'" in one(good.replace("seeds 80.6 / 80.9 / 78.9", "seeds 80.6 / 80.8 / 78.9"))
    assert "gives '8 000 / 9 000 / 10 000'" in one(good.replace("8 000 / 9 000", "8 000 / 9 100"))
    assert "'3.0×' (a ratio or share) cites no record" in one(good + "runs 3.0× faster\n")
    assert "'12 %' (a ratio or share)" in one(good + "and 12 % of them\n")
    assert "(a number in a table of results)" in one(good.replace("| a | 80.2<!-- record bench/a results.a.t2v.R1 --> |",
                                                                  "| a | 76.4 |"))
    assert "'76.4' (a measured decimal)" in one(good + "below `dual` 76.4 on the same split\n")
    assert "[+0.4, +6.9] after it" in one(good.replace(" [+0.4, +6.9]<!--", "<!--"))  # a difference needs its interval
    assert "interval [+0.5, +6.9]" in one(good.replace("[+0.4, +6.9]", "[+0.5, +6.9]"))
    assert "no script bench/y.py" in one(good.replace("bench bench/x.py", "bench bench/y.py"))
    _records(tmp_path, "a", [80.64, 80.93, 79.89])  # a record diverges from the text
    assert len(check(good, tmp_path)) == 10  # a, a − b, b − a (each with its interval), seed lists, cell, values
    rewritten = update(good, tmp_path)
    assert "**80.5 ± 0.5**<!--" in rewritten and "(80.6 / 80.9 / 79.9)" in rewritten
    assert "+4.0 ± 1.2 [+1.1, +6.9]<!--" in rewritten and "(+2.9, +5.2, +4.0)" in rewritten
    assert "−4.01 ± 1.16 [−6.88, −1.14]<!--" in rewritten and "seeds 80.6 / 80.9 / 79.9<!--" in rewritten
    assert "24.6 ± 0.4" in rewritten and "60.1 ± 2.0" in rewritten
    assert check(rewritten, tmp_path) == []


def test_update_writes_the_missing_interval_of_a_paired_difference(tmp_path: Path) -> None:
    from videotext.benchmark.figures import check, update

    _records(tmp_path, "a", [80.64, 80.93, 78.89])
    _records(tmp_path, "b", [77.77, 75.75, 75.91])
    page = "gain **+3.7 ± 1.3**<!-- record bench/a results.a.t2v.R1 - bench/b results.b.t2v.R1 --> (+2.9 / +5.2 / +3.0)\n"
    assert "[+0.4, +6.9] after it" in check(page, tmp_path)[0]
    fixed = update(page, tmp_path)
    assert fixed == page.replace("1.3**", "1.3 [+0.4, +6.9]**")
    assert check(fixed, tmp_path) == []


def test_citations_combine_terms_and_index_lists(tmp_path: Path) -> None:
    from videotext.benchmark.figures import check, resolve

    _records(tmp_path, "a", [80.64, 80.93, 78.89])
    _records(tmp_path, "b", [77.77, 75.75, 75.91])
    a, b = "bench/a results.a.t2v.R1", "bench/b results.b.t2v.R1"
    twice = resolve(f"{a} - {b} + {a} - {b}", tmp_path)  # (a − b) − (b − a): twice the paired difference
    assert twice["per_seed"] == pytest.approx({0: 5.74, 1: 10.36, 2: 5.96}) and twice["paired"]
    for seed in range(3):  # a list in a record, indexed from either end
        path = tmp_path / "bench" / "c" / f"seed_{seed}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"curve": [[1, 10.0 + seed], [2, 20.0 + seed]]}))
    assert resolve("bench/c curve.-1.1", tmp_path)["per_seed"] == {0: 20.0, 1: 21.0, 2: 22.0}
    assert resolve("bench/c@1 curve.0.1", tmp_path)["mean"] == 11.0
    assert resolve("bench/c@1-2 curve.0.1", tmp_path)["per_seed"] == {1: 11.0, 2: 12.0}  # a range of seeds
    assert resolve(f"{a} - bench/c@0-1 curve.0.1", tmp_path)["per_seed"] == pytest.approx({0: 70.64, 1: 69.93})
    with pytest.raises(ValueError, match="no record of seed 3 to 4"):
        resolve("bench/c@3-4 curve.0.1", tmp_path)
    assert check("ends at 20.0 / 21.0 / 22.0<!-- record bench/c curve.-1.1 -->\n", tmp_path) == []
    assert "no key" in check("x 20.0<!-- record bench/c curve.2.1 -->\n", tmp_path)[0]
