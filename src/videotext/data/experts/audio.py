"""The `audio` expert: log-mel statistics per step (128-d).

Front end as VGGish's (Hershey et al., ICASSP 2017, and its released preprocessing):
16 kHz mono, 25 ms periodic-Hann windows every 10 ms, 512-point FFT magnitude,
64 mel bands (HTK mel scale) between 125 and 7500 Hz, log(mel + 0.01). Per step
(default 1 s) the mean and the standard deviation of each band over the frames whose
centre falls in the step: features [0:64] are means, [64:128] standard deviations.

A video without an audio track gets zero features for every step and the stored
entry is flagged `missing` (MMT masks the expert out for such videos). Steps past
the end of a shorter audio track read as silence (log 0.01, std 0).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from videotext.data.experts.base import AudioExpert

LOG_OFFSET = 0.01  # VGGish's log(mel + 0.01)


def hz_to_mel(hz: np.ndarray | float) -> np.ndarray:
    """HTK mel scale."""
    return 1127.0 * np.log1p(np.asarray(hz, dtype=np.float64) / 700.0)


def mel_filterbank(
    sample_rate: int = 16000, n_fft: int = 512, n_mels: int = 64, fmin: float = 125.0, fmax: float = 7500.0
) -> np.ndarray:
    """Triangular mel filters as a matrix [n_fft // 2 + 1, n_mels] (rows: FFT bins)."""
    bin_mel = hz_to_mel(np.linspace(0.0, sample_rate / 2.0, n_fft // 2 + 1))  # [K]
    edges = np.linspace(hz_to_mel(fmin), hz_to_mel(fmax), n_mels + 2)  # [M + 2]
    lower, centre, upper = edges[:-2], edges[1:-1], edges[2:]  # [M] each
    rising = (bin_mel[:, None] - lower[None, :]) / (centre - lower)[None, :]
    falling = (upper[None, :] - bin_mel[:, None]) / (upper - centre)[None, :]
    weights = np.maximum(0.0, np.minimum(rising, falling))  # [K, M]
    weights[0, :] = 0.0  # no DC, as VGGish
    return weights


def log_mel_spectrogram(
    waveform: np.ndarray, sample_rate: int = 16000, window_s: float = 0.025, hop_s: float = 0.010,
    n_fft: int = 512, n_mels: int = 64, fmin: float = 125.0, fmax: float = 7500.0,
) -> tuple[np.ndarray, np.ndarray]:
    """(log-mel [F, n_mels], frame centre times in seconds [F]) of a mono waveform [S]."""
    window = int(round(window_s * sample_rate))
    hop = int(round(hop_s * sample_rate))
    signal = np.asarray(waveform, dtype=np.float64).reshape(-1)
    if signal.size < window:
        signal = np.pad(signal, (0, window - signal.size))
    count = 1 + (signal.size - window) // hop
    frames = np.lib.stride_tricks.sliding_window_view(signal, window)[::hop][:count]  # [F, window]
    hann = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(window) / window)  # periodic Hann
    magnitude = np.abs(np.fft.rfft(frames * hann, n=n_fft))  # [F, n_fft // 2 + 1]
    mel = magnitude @ mel_filterbank(sample_rate, n_fft, n_mels, fmin, fmax)  # [F, M]
    centres = (np.arange(count) * hop + window / 2) / sample_rate  # [F]
    return np.log(mel + LOG_OFFSET), centres


class LogMelExpert(AudioExpert):
    """Mean and std of 64 log-mel bands per step (see the module docstring)."""

    name = "audio"
    version = "1"

    def __init__(self, rate: float = 1.0, sample_rate: int = 16000, n_mels: int = 64):
        self.rate = float(rate)
        self.sample_rate = int(sample_rate)
        self.n_mels = int(n_mels)
        self.dim = 2 * self.n_mels

    def settings(self) -> dict[str, Any]:
        return {"sample_rate": self.sample_rate, "n_mels": self.n_mels, "window_s": 0.025, "hop_s": 0.010,
                "n_fft": 512, "fmin": 125.0, "fmax": 7500.0, "log_offset": LOG_OFFSET}

    def prepare_audio(self, waveform: np.ndarray, starts: np.ndarray) -> np.ndarray:
        out = np.zeros((len(starts), self.dim), np.float32)  # [T, 2M]
        out[:, : self.n_mels] = np.log(LOG_OFFSET)  # silence where the track has no frames
        if waveform.size == 0:
            return out
        logmel, centres = log_mel_spectrogram(waveform, self.sample_rate, n_mels=self.n_mels)
        step_of_frame = np.floor(centres / self.step + 1e-9).astype(np.int64)  # [F]
        for step in range(len(starts)):
            rows = logmel[step_of_frame == step]
            if len(rows):
                out[step, : self.n_mels] = rows.mean(axis=0)
                out[step, self.n_mels :] = rows.std(axis=0)
        return out
