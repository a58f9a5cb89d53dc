"""Every file of an index folder truncated, zeroed or replaced by garbage: one error naming the
file and the way back, never a traceback or a silently wrong answer."""
from __future__ import annotations

import random
import shutil
import subprocess
import sys

import numpy as np
import pytest

from videotext.errors import DataFormatError
from videotext.search import Entry, Index
from videotext.search.index import open_store


def damage(path, how: str) -> None:
    data = path.read_bytes()
    if how == "truncated":
        path.write_bytes(data[: len(data) // 2])
    elif how == "zeroed":
        path.write_bytes(b"\0" * len(data))
    else:
        path.write_bytes(bytes(random.Random(0).getrandbits(8) for _ in range(len(data))))


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    index = Index(16, model="stand-in")
    index.add(np.random.default_rng(0).standard_normal((40, 16)).astype(np.float32),
              [Entry(f"v{i}", meta={"captions": [f"caption {i}"]}) for i in range(40)])
    return index.save(tmp_path_factory.mktemp("damage") / "idx")


@pytest.mark.parametrize("how", ["truncated", "zeroed", "garbage"])
@pytest.mark.parametrize("name", ["index.json", "entries.parquet", "index.faiss"])
def test_a_damaged_file_is_one_error_naming_it_and_the_remedy(folder, tmp_path, name, how):
    copy = shutil.copytree(folder, tmp_path / "idx")
    damage(copy / name, how)
    with pytest.raises(DataFormatError) as raised:
        open_store(copy)
    message = str(raised.value)
    assert message.startswith(str(copy / name)) and "\n" not in message
    assert f"rebuild the index with `videotext index build RUN SOURCE -o {copy}`" in message


@pytest.mark.heavy
def test_the_command_line_says_it_in_one_line(folder, tmp_path):
    copy = shutil.copytree(folder, tmp_path / "idx")
    damage(copy / "entries.parquet", "zeroed")
    done = subprocess.run([sys.executable, "-m", "videotext.cli", "index", "check", str(copy)],
                          capture_output=True, text=True, timeout=300)
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert done.returncode == 2 and len(errors) == 1 and "Traceback" not in done.stderr
    assert "entries.parquet" in errors[0] and "rebuild the index" in errors[0]
