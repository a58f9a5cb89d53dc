"""Benchmark: speech recognition engines and spoken search, the figures of docs/speech.md.

    python bench/speech.py [--models tiny.en,base] [--out bench/results/speech.json]

1. Word error rate and real-time factor per engine and model (Whisper tiny.en and base through
   faster-whisper, int8, VAD on; pocketsphinx en-us) on
   - real read speech: the LibriVox utterances of Debian's pocketsphinx-testdata with their official
     transcripts (`make assets`), plus goforward.raw ("go forward ten meters");
   - synthetic speech: the 24 sentences of tests/speech_media.py spoken by espeak-ng, muxed as AAC
     into test videos and decoded back by PyAV (what a user's folder goes through).
   - one long recording: the real utterances 4 times over, 1 s apart (~2 min): Whisper pads every
     window to 30 s, so short clips cost more per second than long audio does.
   Real-time factor = recognition seconds / audio seconds (model loading excluded, 2 cores).
2. Spoken search on the 24 videos (each says one sentence over unrelated footage): for each
   sentence's paraphrasing query, is its video ranked first? Lines ranked by BM25 (bm25s, the kept
   library) against the text encoder (all-MiniLM-L6-v2, mean pooled, cosine) and the reciprocal
   rank fusion of both, over each engine's transcripts; one run, printed side by side.
3. The time of one `--by said` query over 10^5 transcript lines.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
import wave
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
ASSETS = Path(os.environ.get("VIDEOTEXT_ASSETS", Path.home() / ".cache/videotext/debian")) / "pocketsphinx" / "data"


def librivox() -> list[tuple[str, np.ndarray, str]]:
    """(name, 16 kHz float32 samples, official transcript) of the real read speech."""
    folder = ASSETS / "librivox"
    out = []
    for line in (folder / "transcription").read_text().splitlines():
        text, _, name = line.rpartition("(")
        name = name.strip(") ")
        with wave.open(str(folder / f"{name}.wav")) as handle:
            samples = np.frombuffer(handle.readframes(handle.getnframes()), dtype="<i2")
        out.append((name, samples.astype(np.float32) / 32768.0, text.replace("<s>", "").replace("</s>", "").strip()))
    raw = np.fromfile(ASSETS / "goforward.raw", dtype="<i2").astype(np.float32) / 32768.0
    out.append(("goforward", raw, "go forward ten meters"))
    return out


def espeak_videos(folder: Path) -> list[tuple[str, Path, str, str]]:
    """(key, video, sentence, query) of the 24 speaking videos, made once in `folder`."""
    from tests.speech_media import SENTENCES, speaking_video

    out = []
    for i, (sentence, query) in enumerate(SENTENCES):
        path = folder / f"said{i:02d}.mp4"
        if not path.exists():
            speaking_video(path, sentence, seed=i)
        out.append((f"said{i:02d}", path, sentence, query))
    return out


def recognize_all(engine, clips: list[tuple[str, np.ndarray, str]]) -> dict:
    from videotext.data.speech.wer import word_error_rate

    hypotheses, seconds, audio = [], 0.0, 0.0
    for _, samples, _ in clips:
        started = time.perf_counter()
        lines = engine.recognize(samples)
        seconds += time.perf_counter() - started
        audio += len(samples) / 16000
        hypotheses.append(" ".join(line.text for line in lines))
    return {"wer": word_error_rate([c[2] for c in clips], hypotheses), "rtf": seconds / audio,
            "audio_seconds": audio, "hypotheses": hypotheses}


def spoken_search(transcripts: dict[str, list[str]], videos: list[tuple[str, Path, str, str]]) -> dict:
    """Top-1 accuracy of each sentence's paraphrasing query over videos whose lines are `transcripts`:
    BM25 alone, the sentence encoder alone, and their fusion by each rule of `search.fusion`
    (`standard`, what `SpokenIndex` ships, and reciprocal rank fusion)."""
    from videotext.search.sentences import sentence_vectors
    from videotext.search.spoken import SaidLine, SpokenIndex

    lines = [SaidLine(key, 0.0, 1.0, text, "asr") for key, texts in transcripts.items() for text in texts]
    spoken = SpokenIndex(lines)

    def first_video(rows) -> str | None:
        return lines[int(rows[0])].entry if len(rows) else None

    truth, bm25, encoder, fused, rrf = [v[0] for v in videos], [], [], [], []
    for _, _, _, query in videos:
        scores = spoken.bm25_scores(query)
        bm25.append(first_video([j for j in np.argsort(-scores, kind="stable") if scores[j] > 0]))
        cosine = spoken.line_vectors() @ sentence_vectors([query])[0]
        encoder.append(first_video(np.argsort(-cosine, kind="stable")))
        fused.append(first_video(spoken.line_ranking(query, "standard")))
        rrf.append(first_video(spoken.line_ranking(query, "rrf")))
    top1 = lambda found: float(np.mean([f == t for f, t in zip(found, truth)]))  # noqa: E731
    return {"bm25_top1": top1(bm25), "encoder_top1": top1(encoder), "standard_top1": top1(fused), "rrf_top1": top1(rrf),
            "queries": len(videos)}


def query_latency(lines: int = 100_000, queries: int = 20) -> dict:
    """Seconds of one `--by said` query over `lines` transcript lines (random words of the 24
    sentences, 10 per line; random unit sentence vectors stand in for encoded lines): p50 and p90."""
    from tests.speech_media import SENTENCES
    from videotext.search.entries import Entry
    from videotext.search.spoken import SaidLine, SpokenIndex

    rng = np.random.default_rng(0)
    words = " ".join(s for s, _ in SENTENCES).lower().replace(".", "").replace(",", "").split()
    said = [SaidLine(f"v{i // 10}", 0.0, 1.0, " ".join(rng.choice(words, 10)), "asr") for i in range(lines)]
    vectors = rng.standard_normal((lines, 384)).astype(np.float32)
    spoken = SpokenIndex(said, vectors / np.linalg.norm(vectors, axis=1, keepdims=True))
    entry_of = lambda i: Entry(id=i, path=None, start=0.0, end=None, video_id=i)  # noqa: E731
    spoken.search("warm up", entry_of, k=10)
    times = []
    for _, query in (SENTENCES * 2)[:queries]:
        started = time.perf_counter()
        spoken.search(query, entry_of, k=10)
        times.append(time.perf_counter() - started)
    return {"lines": lines, "p50_seconds": float(np.median(times)), "p90_seconds": float(np.quantile(times, 0.9))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default="tiny.en,base")
    parser.add_argument("--out", type=Path, default=HERE / "results" / "speech.json")
    args = parser.parse_args()
    from videotext.data.speech.recognize import speech_engine
    from videotext.data.video import read_audio
    from videotext.runtime import physical_cores

    engines = [("whisper", m) for m in args.models.split(",") if m] + [("pocketsphinx", None)]
    real = librivox()
    with tempfile.TemporaryDirectory() as folder:
        videos = espeak_videos(Path(folder))
        synthetic = [(key, read_audio(path, 16000), sentence) for key, path, sentence, _ in videos]
    results = {"machine": platform.processor() or platform.machine(), "cores": physical_cores(),
               "real_speech": {"utterances": len(real), "seconds": sum(len(c[1]) for c in real) / 16000},
               "engines": {}}
    gap = np.zeros(16000, np.float32)  # the real utterances 4 times over, 1 s apart: one long recording
    long_audio = [("long", np.concatenate([part for _ in range(4) for c in real for part in (c[1], gap)]),
                   " ".join(c[2] for _ in range(4) for c in real))]
    reference = {key: [sentence] for key, _, sentence, _ in videos}
    results["search_on_reference_text"] = spoken_search(reference, videos)
    for name, model in engines:
        started = time.perf_counter()
        engine = speech_engine(name, model)
        load = time.perf_counter() - started
        on_real, on_synthetic = recognize_all(engine, real), recognize_all(engine, synthetic)
        on_long = recognize_all(engine, long_audio)
        said = {key: [h] for key, h in zip([v[0] for v in videos], on_synthetic["hypotheses"])}
        search = spoken_search(said, videos)
        label = engine.source
        results["engines"][label] = {"load_seconds": load, "real": on_real, "espeak": on_synthetic,
                                     "long_real": {k: on_long[k] for k in ("wer", "rtf", "audio_seconds")},
                                     "search": search}
        print(f"{label:28s} real WER {100 * on_real['wer']:5.1f}%  RTF {on_real['rtf']:.3f} | espeak WER "
              f"{100 * on_synthetic['wer']:5.1f}%  RTF {on_synthetic['rtf']:.3f} | search top-1 BM25 "
              f"{search['bm25_top1']:.3f} encoder {search['encoder_top1']:.3f} standard {search['standard_top1']:.3f} "
              f"RRF {search['rrf_top1']:.3f} | "
              f"long audio ({on_long['audio_seconds']:.0f} s) WER {100 * on_long['wer']:.1f}% RTF {on_long['rtf']:.3f}",
              flush=True)
    latency = results["said_query_latency"] = query_latency()
    print(f"--by said over {latency['lines']} lines: p50 {1000 * latency['p50_seconds']:.0f} ms, "
          f"p90 {1000 * latency['p90_seconds']:.0f} ms")
    ref = results["search_on_reference_text"]
    print(f"{'reference sentences':28s} search top-1 BM25 {ref['bm25_top1']:.3f} encoder {ref['encoder_top1']:.3f} "
          f"standard {ref['standard_top1']:.3f} RRF {ref['rrf_top1']:.3f}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
