"""FeatureStore: layout, round trips, crash safety, fork safety and importers."""
from __future__ import annotations

import json
import multiprocessing
import pickle
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import h5py
import numpy as np
import pytest

from videotext.data.feature_import import import_features
from videotext.data.features import FeatureStore, decode_key, encode_key, store_equal
from videotext.errors import DataFormatError


def features_for(key: str, dim: int = 8) -> tuple[np.ndarray, np.ndarray]:
    """Deterministic test content of one video: features [T, dim] and timestamps [T]."""
    seed = sum(map(ord, key))
    rng = np.random.default_rng(seed)
    steps = 1 + seed % 7
    return rng.standard_normal((steps, dim)).astype(np.float32), np.arange(steps) * 0.5


def test_key_encoding_round_trips():
    for key in ["video1", "a/b/c", "100%/x", ".", "..", "v_-Qk3 (1)", "ü/ß"]:
        name = encode_key(key)
        assert "/" not in name and name not in (".", "..") and decode_key(name) == key
    assert encode_key("video_123-abc.mp4") == "video_123-abc.mp4"
    with pytest.raises(ValueError):
        encode_key("")


def test_write_commit_and_read(tmp_path):
    store = FeatureStore(tmp_path / "store")
    assert store.experts == [] and not store.has("motion", "x")
    with store.writer("motion", 8, {"rate": 1.0}) as writer:
        for key in ("a", "dir/b", "50%"):
            writer.add(key, *features_for(key), step=0.5)
        writer.add("silent", np.zeros((3, 8)), np.arange(3.0), step=0.5, missing=True)
        assert store.experts == []  # nothing visible before commit
    assert store.experts == ["motion"]
    assert sorted(store.keys("motion")) == ["50%", "a", "dir/b", "silent"]
    features, stamps = store.get("motion", "dir/b")
    expected, expected_times = features_for("dir/b")
    assert features.dtype == np.float32 and features.shape == expected.shape
    np.testing.assert_allclose(features, expected.astype(np.float16), rtol=0, atol=0)  # float16 on disk
    np.testing.assert_array_equal(stamps, expected_times)
    assert store.dim("motion") == 8 and store.has("motion", "a") and ("motion", "50%") in store
    assert store.is_missing("motion", "silent") and not store.is_missing("motion", "a")
    assert store.entry("motion", "a") == {"key": "a", "step": 0.5, "missing": False}
    info = store.info("motion")
    assert info["config"] == {"rate": 1.0} and info["dim"] == 8 and info["dtype"] == "float16"
    with h5py.File(store.path("motion")) as handle:  # the documented layout
        assert handle.attrs["format"] == "videotext-features"
        assert handle["dir%2Fb"]["features"].dtype == np.float16
        assert handle["dir%2Fb"].attrs["key"] == "dir/b"
    with pytest.raises(KeyError, match="'nope' not in"):
        store.get("motion", "nope")
    with pytest.raises(KeyError, match="no features for expert 'audio'"):
        store.get("audio", "a")


def test_float32_option_and_float16_overflow(tmp_path):
    store = FeatureStore(tmp_path)
    big = np.array([[1e6, 1.0]], np.float32)
    with store.writer("x", 2) as writer:
        writer.add("big", big, [0.0])
        writer.add("small", np.array([[0.1, 0.2]]), [0.0])
    assert store.get("x", "big")[0][0, 0] == 1e6  # kept as float32 instead of overflowing
    with store.writer("y", 2, dtype="float32") as writer:
        writer.add("small", np.array([[0.1, 0.2]]), [0.0])
    np.testing.assert_array_equal(store.get("y", "small")[0], np.array([[0.1, 0.2]], np.float32))


def test_writer_validates_input(tmp_path):
    writer = FeatureStore(tmp_path).writer("x", 4)
    with pytest.raises(DataFormatError, match=r"features must be \[T, 4\]"):
        writer.add("a", np.zeros((2, 3)), np.zeros(2))
    with pytest.raises(DataFormatError, match="2 feature rows but 3 timestamps"):
        writer.add("a", np.zeros((2, 4)), np.zeros(3))
    with pytest.raises(DataFormatError, match="NaN"):
        writer.add("a", np.full((1, 4), np.nan), np.zeros(1))


def test_config_or_dim_mismatch_is_refused(tmp_path):
    store = FeatureStore(tmp_path)
    with store.writer("motion", 8, {"rate": 1.0}) as writer:
        writer.add("a", *features_for("a"))
    with pytest.raises(DataFormatError, match="dimension 8"):
        store.writer("motion", 16, {"rate": 1.0})
    with pytest.raises(DataFormatError, match="another configuration"):
        store.writer("motion", 8, {"rate": 2.0})
    with store.writer("motion", 8, {"rate": 2.0}, overwrite=True) as writer:
        writer.add("b", *features_for("b"))
    assert store.keys("motion") == ["b"]


def test_parts_count_as_done_and_merge_later(tmp_path):
    store = FeatureStore(tmp_path)
    writer = store.writer("m", 8, flush_every=2)
    for key in "abc":
        writer.add(key, *features_for(key))
    assert len(list(store.parts_dir("m").glob("part-*.h5"))) == 1  # a, b flushed; c buffered
    assert writer.done_keys() == {"a", "b", "c"}
    del writer  # "killed": c is lost, the part with a and b survives
    again = store.writer("m", 8)
    assert again.done_keys() == {"a", "b"}
    assert again.commit() == 2 and sorted(store.keys("m")) == ["a", "b"]
    assert not list(store.parts_dir("m").glob("*.h5"))


def test_reader_handles_survive_pickle_and_fork(tmp_path):
    store = FeatureStore(tmp_path)
    with store.writer("m", 8) as writer:
        writer.add("a", *features_for("a"))
    parent = store.get("m", "a")[0]  # opens a handle in this process
    clone = pickle.loads(pickle.dumps(store))
    assert clone._handles == {} and np.array_equal(clone.get("m", "a")[0], parent)
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    child = context.Process(target=_read_in_child, args=(store, queue))
    child.start()
    child.join(30)
    assert child.exitcode == 0
    np.testing.assert_array_equal(queue.get(timeout=5), parent)


def _read_in_child(store: FeatureStore, queue) -> None:
    assert store._pid != __import__("os").getpid()
    queue.put(store.get("m", "a")[0])  # reopens its own handle after fork


_KILLED_WRITER = textwrap.dedent(
    """
    import sys, numpy as np
    from videotext.data.features import FeatureStore
    sys.path.insert(0, {tests!r})
    from test_features import features_for
    store = FeatureStore({root!r})
    writer = store.writer("m", 64, {{"test": 1}}, flush_every=1)
    done = writer.done_keys()
    print("ready", flush=True)
    n = 0
    while True:
        key = "v-%d" % n
        if key not in done:
            writer.add(key, *features_for(key, 64))
            if n % 4 == 0:
                writer.commit()
        n += 1
    """
)


@pytest.mark.heavy
def test_killed_writer_never_corrupts_the_store(tmp_path):
    """SIGKILL a writer at random moments (mid part write, mid merge): the store stays valid."""
    root = tmp_path / "store"
    script = _KILLED_WRITER.format(tests=str(Path(__file__).parent), root=str(root))
    rng = np.random.default_rng(0)
    for _ in range(5):
        proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
        assert proc.stdout.readline().strip() == "ready"
        time.sleep(float(rng.uniform(0.2, 0.6)))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        store = FeatureStore(root)
        merged = store.keys("m") if store.has_expert("m") else []
        for key in merged:  # every merged entry reads back whole
            np.testing.assert_array_equal(store.get("m", key)[0], features_for(key, 64)[0].astype(np.float16))
        for part in store.parts_dir("m").glob("part-*.h5"):  # every finished part is readable
            with h5py.File(part) as handle:
                assert all(handle[name]["features"].shape[1] == 64 for name in handle)
        store.close()
    writer = FeatureStore(root).writer("m", 64, {"test": 1})
    done = writer.done_keys()
    writer.commit()
    store = FeatureStore(root)
    assert sorted(store.keys("m")) == sorted(done) and len(done) > 10
    for key in done:
        np.testing.assert_array_equal(store.get("m", key)[0], features_for(key, 64)[0].astype(np.float16))
    assert not list(root.glob(".m.h5.*.tmp"))


# --- importers --------------------------------------------------------------------------


def test_import_npy_folder_records_broken_files(tmp_path):
    src = tmp_path / "npy"
    (src / "sub").mkdir(parents=True)
    np.save(src / "a.npy", features_for("a")[0])
    np.save(src / "sub" / "b.npy", features_for("b")[0])
    np.save(src / "vector.npy", np.ones(8, np.float32))  # a single step [D]
    (src / "broken.npy").write_bytes(b"not numpy")
    np.save(src / "wrongdim.npy", np.ones((2, 5)))
    summary = import_features(src, tmp_path / "store", "s3d", step=1.0, dtype="float32")
    assert (summary["imported"], summary["failed"]) == (3, 2)
    store = FeatureStore(tmp_path / "store")
    assert sorted(store.keys("s3d")) == ["a", "sub/b", "vector"]
    np.testing.assert_array_equal(store.get("s3d", "sub/b")[0], features_for("b")[0])
    np.testing.assert_array_equal(store.get("s3d", "a")[1], np.arange(len(features_for("a")[0])) * 1.0)
    failures = [json.loads(line) for line in (tmp_path / "store" / "failures.jsonl").read_text().splitlines()]
    assert sorted(f["item"] for f in failures) == ["broken", "wrongdim"]
    assert store.info("s3d")["config"]["step"] == 1.0
    again = import_features(src, tmp_path / "store", "s3d", step=1.0, dtype="float32")
    assert (again["imported"], again["skipped"], again["failed"]) == (0, 3, 2)  # resumes, retries the broken


def test_import_npz_folder_and_single_npz(tmp_path):
    folder = tmp_path / "npz"
    folder.mkdir()
    np.savez(folder / "v_abc.npz", frame_scores=np.ones((3, 1, 4, 1, 1)))  # ActivityNet-style, squeezed
    np.savez(folder / "v_def.npz", frame_scores=np.zeros((2, 1, 4, 1, 1)), timestamps=np.array([0.0, 7.0]))
    import_features(folder, tmp_path / "store", "inception", array="frame_scores", strip_prefix="v_")
    store = FeatureStore(tmp_path / "store")
    assert sorted(store.keys("inception")) == ["abc", "def"] and store.dim("inception") == 4
    np.testing.assert_array_equal(store.get("inception", "def")[1], [0.0, 7.0])
    single = tmp_path / "all.npz"
    np.savez(single, x1=features_for("x1")[0], x2=features_for("x2")[0])
    import_features(single, tmp_path / "store", "rgb")
    assert sorted(store.keys("rgb")) == ["x1", "x2"]


def test_import_coot_h5_and_own_layout(tmp_path):
    coot = tmp_path / "video_feat_100m.h5"  # COOT: one dataset [T, D] per video id at the root
    with h5py.File(coot, "w") as handle:
        for key in ("vid1", "vid2"):
            handle[key] = features_for(key)[0]
        handle["bad"] = np.array(["text"], dtype="S4")
    summary = import_features(coot, tmp_path / "store", "coot", step=16 / 16)
    assert (summary["imported"], summary["failed"]) == (2, 1)
    store = FeatureStore(tmp_path / "store")
    np.testing.assert_allclose(store.get("coot", "vid2")[0], features_for("vid2")[0], atol=1e-2)
    import_features(store.path("coot"), tmp_path / "copy", "coot", step=1.0)  # our own layout re-imports
    copy = FeatureStore(tmp_path / "copy")
    assert store_equal(store, copy)


def test_import_mmt_layouts(tmp_path):
    per_video = tmp_path / "mmt_h5"  # MMT ECCV: <a>/<b>/<c>/<vid>.h5 with features.<expert>, features_t.<expert>
    (per_video / "v" / "i" / "d").mkdir(parents=True)
    with h5py.File(per_video / "v" / "i" / "d" / "vid7.h5", "w") as handle:
        handle["features.s3d"] = np.ones((3, 8))
        handle["features_t.s3d"] = np.array([[0, 1], [1, 2], [2, 3]], np.float64)
        handle["features.vggish"] = np.zeros((3, 4))
    import_features(per_video, tmp_path / "store", "s3d")
    store = FeatureStore(tmp_path / "store")
    assert store.keys("s3d") == ["v/i/d/vid7"]
    np.testing.assert_array_equal(store.get("s3d", "v/i/d/vid7")[1], [0.0, 1.0, 2.0])
    challenge = tmp_path / "audio_c-fixed_seg.pickle"  # MMT challenge: {video: [T, D]}, NaN = missing
    with open(challenge, "wb") as handle:
        pickle.dump({"video1": np.ones((2, 8)), "video2": float("nan")}, handle)
    summary = import_features(challenge, tmp_path / "store", "audio_c")
    assert (summary["imported"], summary["missing"]) == (1, 1)
    assert store.is_missing("audio_c", "video2") and store.get("audio_c", "video2")[0].shape == (0, 8)
    as_npy = tmp_path / "speech.npy"
    np.save(as_npy, np.array({"video1": np.ones((1, 8))}, dtype=object), allow_pickle=True)
    import_features(as_npy, tmp_path / "store", "speech_c")
    assert store.keys("speech_c") == ["video1"]


def test_import_rejects_unknown_sources(tmp_path):
    with pytest.raises(DataFormatError, match="not found"):
        import_features(tmp_path / "nothing", tmp_path / "store", "x")
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataFormatError, match="no .npy, .npz or .h5"):
        import_features(tmp_path / "empty", tmp_path / "store", "x")


def test_video_features_cache_reads_each_video_once_within_its_budget(tmp_path):
    from videotext.data.loaders import VideoFeatures

    store = FeatureStore(tmp_path / "store")
    with store.writer("motion", 8, {"rate": 1.0}) as writer:
        for key in ("a", "b"):
            writer.add(key, *features_for(key), step=0.5)
    reads = []

    class Counting:  # the store, counting its reads
        def __getattr__(self, name):
            return getattr(store, name)

        def get(self, expert, key):
            reads.append(key)
            return store.get(expert, key)

    # "a" has 1 + 97 % 7 = 7 steps of 8 float32 = 224 bytes; "b" has 1 + 98 % 7 = 1 step = 32 bytes
    reader = VideoFeatures(Counting(), ["motion"], max_steps=30, cache_mb=250 / 2**20)
    first, again = reader("a"), reader("a")
    assert reads == ["a"] and again["motion"].shape == (7, 8)
    np.testing.assert_array_equal(first["motion"], again["motion"])
    np.testing.assert_array_equal(again["motion"], features_for("a")[0].astype(np.float16).astype(np.float32))
    with pytest.raises(ValueError, match="read-only"):
        again["motion"][0, 0] = 1.0  # cached arrays are shared between batches
    reader("b"), reader("b")  # 224 + 32 > 250 bytes: b is read every time
    assert reads == ["a", "b", "b"]
    assert reader.__getstate__()["_cache"] == {} and reader._cache  # loader workers start empty
    uncached = VideoFeatures(Counting(), ["motion"], max_steps=30)
    uncached("a"), uncached("a")
    assert reads[-2:] == ["a", "a"]
    uncached("a")["motion"][0, 0] = 1.0  # an uncached read is the caller's own copy
