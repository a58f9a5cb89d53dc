"""What is said in a video: subtitles (beside or inside it) or offline speech recognition, as timed lines.

- `subtitles`: `.srt` / `.vtt` files and subtitle streams, read through PyAV;
- `recognize`: the engines (Whisper through faster-whisper, pocketsphinx) and their checked models;
- `transcripts`: a folder's transcripts beside its features, subtitles first, resumable;
- `wer`: word error rate of a hypothesis against a reference (the figures of docs/speech.md).

The lines become `Video.speech` segments, which the `words` / `speech` experts (MMT's speech expert)
and the spoken-word search (`videotext.search.spoken`) read.
"""
