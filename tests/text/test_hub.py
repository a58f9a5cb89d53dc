"""videotext.hub: cache first, then the owning library's download, and one line when neither works;
the bundled MiniLM only by name (`bundled:minilm`), said once in the log."""
from __future__ import annotations

import logging

import pytest
from huggingface_hub import constants
from huggingface_hub.errors import LocalEntryNotFoundError

from videotext import hub
from videotext.errors import VideoTextError
from videotext.text import BUNDLED, default_text_model_path, text_model_source


def test_cached_weight_is_read_with_the_hub_held_to_its_cache(monkeypatch):
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    seen = []

    def load():
        seen.append(constants.HF_HUB_OFFLINE)
        return "weights"

    assert hub.from_hub("text model 'x'", load) == "weights"
    assert seen == [True]  # one call, cache only: no request
    assert constants.HF_HUB_OFFLINE is False  # restored


def test_missing_from_cache_downloads_online(monkeypatch):
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(hub, "reachable", lambda: True)
    seen = []

    def load():
        seen.append(constants.HF_HUB_OFFLINE)
        if constants.HF_HUB_OFFLINE:
            raise LocalEntryNotFoundError("not in the cache")
        return "downloaded"

    assert hub.from_hub("text model 'x'", load) == "downloaded"
    assert seen == [True, False]


def test_unreachable_or_offline_is_one_line_naming_weight_cache_and_remedies(monkeypatch, tmp_path):
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))

    def load():
        raise OSError("We couldn't connect to 'https://huggingface.co' to load the files, and couldn't find them "
                      "in the cached files.") from LocalEntryNotFoundError("x")

    with pytest.raises(hub.HubError) as info:
        hub.from_hub("text model 'google-bert/bert-base-cased'", load)
    message = str(info.value)
    assert "\n" not in message
    for part in ("text model 'google-bert/bert-base-cased'", "HF_HUB_OFFLINE=1 is set", str(tmp_path / "hub"),
                 "HF_ENDPOINT", "local file or folder"):
        assert part in message


def test_a_dead_endpoint_fails_at_once_without_the_clients_retries(monkeypatch):
    """Nothing cached and nothing listening: one probe, no download attempt (the clients would retry
    for most of a minute)."""
    import socket

    with socket.socket() as s:  # a loopback port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "ENDPOINT", f"http://127.0.0.1:{port}")
    calls = []

    def load():
        calls.append(constants.HF_HUB_OFFLINE)
        raise LocalEntryNotFoundError("not in the cache")

    with pytest.raises(hub.HubError, match=f"127.0.0.1:{port} cannot be reached"):
        hub.from_hub("text model 'x'", load)
    assert calls == [True]  # the cache-only attempt alone


def test_errors_not_about_the_hub_pass_through(monkeypatch):
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(hub, "reachable", lambda: True)

    def load():
        raise ZeroDivisionError("a bug, not a download")

    with pytest.raises(ZeroDivisionError):
        hub.from_hub("x", load)


def test_bundled_minilm_by_name_and_said_once(caplog):
    from videotext.text import encoder

    encoder._say_bundled.cache_clear()
    with caplog.at_level(logging.INFO, logger="videotext.weights"):
        assert text_model_source(BUNDLED) == default_text_model_path()
        assert text_model_source("") == default_text_model_path()  # the synthetic configs' default
    lines = [r.getMessage() for r in caplog.records if r.name == "videotext.weights"]
    assert len(lines) == 1 and "bundled all-MiniLM-L6-v2" in lines[0] and BUNDLED in lines[0]
    assert text_model_source("google-bert/bert-base-cased") == "google-bert/bert-base-cased"
    with pytest.raises(VideoTextError, match="bundled:minilm"):
        text_model_source("bundled:bert")


def test_misspelt_timm_name_lists_the_closest():
    from videotext.models.frozen import vit_weights

    with pytest.raises(VideoTextError) as info:
        vit_weights("timm:vit_base_patch16_224.orig_in21")
    assert "vit_base_patch16_224.orig_in21k" in str(info.value)
