"""One writer of an index at a time: a second waits, naming the holder, or stops after its
timeout; a lock left by a killed writer is free at once and said to be stale."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from videotext.io import LockTimeout, writer_lock

HOLD = """
import sys, time
from videotext.io import writer_lock
with writer_lock(sys.argv[1], "index build"):
    print("held", flush=True)
    time.sleep(float(sys.argv[2]))
"""


def holder(target, seconds: float) -> subprocess.Popen:
    """A process holding the writer lock of `target` for `seconds` (returned once it holds it)."""
    process = subprocess.Popen([sys.executable, "-c", HOLD, str(target), str(seconds)], stdout=subprocess.PIPE, text=True)
    assert process.stdout.readline().strip() == "held"
    return process


def test_a_second_writer_waits_for_the_first_and_names_it(tmp_path):
    target = tmp_path / "videos.index"
    first = holder(target, 1.5)
    said: list[str] = []
    started = time.monotonic()
    with writer_lock(target, "index build", timeout=30, say=said.append):
        waited = time.monotonic() - started
        assert first.poll() is not None  # the first had finished before the second went on
    assert 0.8 < waited < 20
    assert len(said) == 1 and f"waiting for pid {first.pid} " in said[0] and "index build" in said[0]
    assert first.wait() == 0


def test_the_wait_ends_in_one_error_naming_the_holder(tmp_path):
    target = tmp_path / "videos.index"
    first = holder(target, 20)
    try:
        started = time.monotonic()
        with pytest.raises(LockTimeout, match=rf"another index build is under way \(pid {first.pid} on .*waited 1 s"):
            with writer_lock(target, "index build", timeout=0.6, say=lambda line: None):
                pass
        assert time.monotonic() - started < 5
    finally:
        first.kill()
        first.wait()


def test_a_lock_left_by_a_killed_writer_is_stale(tmp_path):
    target = tmp_path / "videos.index"
    first = holder(target, 60)
    os.kill(first.pid, signal.SIGKILL)
    first.wait()
    lock = tmp_path / ".videos.index.lock"
    assert json.loads(lock.read_text())["pid"] == first.pid  # its line is left behind
    said: list[str] = []
    started = time.monotonic()
    with writer_lock(target, "index build", timeout=30, say=said.append):
        assert time.monotonic() - started < 1  # no wait: the kernel dropped the dead writer's lock
        assert json.loads(lock.read_text())["pid"] == os.getpid()
    assert len(said) == 1 and f"pid {first.pid}" in said[0] and "ended without finishing" in said[0]
    assert lock.read_text() == ""  # released cleanly: nothing stale for the next one


def test_the_lock_is_not_reentrant_even_within_a_process(tmp_path):
    """Each writer takes it once: a second take in the same process waits like any other writer."""
    target = tmp_path / "videos.index"
    said = []
    with writer_lock(target, timeout=0):
        with pytest.raises(LockTimeout, match=f"another write is under way \\(pid {os.getpid()}"):
            with writer_lock(target, timeout=0.3, say=said.append):
                pass
        assert json.loads((tmp_path / ".videos.index.lock").read_text())["pid"] == os.getpid()
    assert len(said) == 1 and "waiting for" in said[0]


@pytest.mark.heavy
def test_index_build_with_another_writer_is_one_line_and_exit_2(tmp_path):
    target = tmp_path / "videos.index"
    first = holder(target, 30)
    try:
        done = subprocess.run([sys.executable, "-m", "videotext.cli", "index", "build", str(tmp_path / "no-run"),
                               str(tmp_path), "-o", str(target), "--lock-timeout", "0.5"],
                              capture_output=True, text=True, timeout=120)
    finally:
        first.kill()
        first.wait()
    assert done.returncode == 2, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and f"pid {first.pid}" in errors[0] and "Traceback" not in done.stderr
