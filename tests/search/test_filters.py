"""Search filters (`videotext.search.filters`): one grammar, evaluated in Python for the FAISS
store and translated for Milvus, where the real engine (Milvus Lite) must select the same entries."""
from __future__ import annotations

import random
import re

import pytest

from videotext.search.filters import Both, Compare, FilterError, Not, matches, parse_filter, to_milvus

FILTERS = [
    'start >= 30 and end <= 70',
    'split == "test" or dataset in ["msrvtt", "vatex"]',
    'path startswith "lectures/2024_a/" and not (duration < 10)',  # `_` is a LIKE wildcard unless escaped
    'tags contains "keynote"',
    "path startswith 'odd\"quote%'",
    'not (split != "val") and (hash = "h3" or start < 20)',
    'dataset == ""',
    'path == "talks/z 1.mp4"',
    'duration > 59.5 and duration <= 3600',
    'video_id in ["v1", "v2", "v39"] or tags contains "qa" and start > 45',
    'not (start < 20)',  # whole videos (no start) pass neither this nor its negation
    'not (start < 20 or split == "test")',
    'start < 20 or split == "test"',
]


def entries(count: int = 300) -> list[dict]:
    rng = random.Random(0)
    rows = []
    for i in range(count):
        start = rng.choice([0.0, 10.0, 20.0, 30.0, 45.5, 60.0, None])  # None: a whole video
        rows.append({
            "id": f"e{i}", "video_id": f"v{i % 40}", "start": start, "end": None if start is None else start + 10,
            "path": rng.choice(["lectures/2024_a/x.mp4", "lectures/2024ba/y.mp4", "talks/z 1.mp4", 'odd"quote%.mp4']),
            "duration": float(rng.choice([5, 60, 3600])), "hash": f"h{i % 7}", "dataset": rng.choice(["msrvtt", "vatex", ""]),
            "split": rng.choice(["train", "val", "test"]), "tags": rng.sample(["keynote", "qa", "demo"], rng.randint(0, 2)),
        })
    return rows


def test_the_grammar_builds_the_tree_with_and_before_or():
    tree = parse_filter('start >= 30 and not split = "x" or tags contains "qa"')
    assert tree == Both("or", (Both("and", (Compare("start", ">=", 30), Not(Compare("split", "==", "x")))),
                               Compare("tags", "contains", "qa")))
    assert parse_filter('video_id in ["a", \'b\\\'c\', 3, 1.5e1, true]') == Compare("video_id", "in", ("a", "b'c", 3, 15.0, True))


def test_python_evaluation_counts_by_hand():
    rows = entries()
    assert sum(matches(parse_filter('start >= 30 and end <= 70'), r) for r in rows) == sum(
        r["start"] is not None and 30 <= r["start"] and r["end"] <= 70 for r in rows)
    whole = {"start": None, "split": "test"}  # unknown start: as in SQL, `not` keeps it unknown
    assert [matches(parse_filter(f), whole) for f in ('start < 20', 'not (start < 20)', 'start < 20 or split == "test"',
                                                      'not (start < 20 and split == "val")')] == [False, False, True, True]
    prefix = parse_filter('path startswith "lectures/2024_a/"')
    assert [matches(prefix, {"path": p}) for p in ("lectures/2024_a/x", "lectures/2024ba/x", "x")] == [True, False, False]
    assert not matches(parse_filter('start > "10"'), {"start": 20.0})  # a number against a string never matches
    assert not matches(parse_filter('split == "test"'), {})  # a missing field never matches


@pytest.mark.parametrize("text, problem", [
    ("start >", "character 8: expected a value but the filter ends"),
    ("foo == 1", "character 1: unknown field 'foo'"),
    ("start == 1 and", "expected a field but the filter ends"),
    ("(start == 1", "expected ')' but the filter ends"),
    ("start ~ 2", "character 7: an unexpected character"),
    ("", "empty"),
    ("start < true", "< needs a number or a string"),
    ('path contains "x"', "contains applies to a list field (tags)"),
    ("start == 1 2", "character 12: expected 'and', 'or' or the end, got '2'"),
])
def test_a_malformed_filter_is_one_clear_error(text, problem):
    with pytest.raises(FilterError, match="^" + re.escape(f"filter {text!r}") + ".*" + re.escape(problem)):
        parse_filter(text)


def test_milvus_lite_selects_exactly_what_the_python_evaluation_selects(tmp_path):
    """The translation is checked against the real engine: Milvus Lite evaluates `to_milvus`."""
    from pymilvus import DataType, MilvusClient

    rows = entries()
    client = MilvusClient(str(tmp_path / "filters.db"))
    schema = client.create_schema(auto_id=False, enable_dynamic_field=False)
    schema.add_field("id", DataType.VARCHAR, is_primary=True, max_length=64)
    schema.add_field("vector", DataType.FLOAT_VECTOR, dim=2)
    for name in ("path", "video_id", "hash", "dataset", "split"):
        schema.add_field(name, DataType.VARCHAR, max_length=1024)
    for name in ("start", "end", "duration"):
        schema.add_field(name, DataType.DOUBLE, nullable=True)
    schema.add_field("tags", DataType.ARRAY, element_type=DataType.VARCHAR, max_capacity=16, max_length=64)
    index = client.prepare_index_params()
    index.add_index("vector", index_type="FLAT", metric_type="IP")
    client.create_collection("entries", schema=schema, index_params=index)
    client.insert("entries", [{**row, "vector": [1.0, 0.0]} for row in rows])
    try:
        for text in FILTERS:
            tree = parse_filter(text)
            want = {r["id"] for r in rows if matches(tree, r)}
            got = {r["id"] for r in client.query("entries", filter=to_milvus(tree), output_fields=["id"], limit=1000)}
            assert got == want, (text, to_milvus(tree), len(got), len(want))
            assert 0 < len(want) < len(rows), text  # every filter selects a real subset
    finally:
        client.close()
