"""The procedural video-text dataset: the embedded default data of `videotext demo`.

Each video shows 1–3 coloured shapes (`vocab.COLOURS` × `vocab.SHAPES`) on a dark
background doing 2–4 timed events (move left / right / up / down, grow, shrink, spin,
appear, vanish). Each event is a `Segment` with one sentence ("A red circle moves to
the left."); the sentences form the paragraph; six captions paraphrase the whole
sequence in order ("first a red circle slides left, then the blue star spins.").
Objects often share a colour or a shape, and about a third of the videos come in
distractor groups (same objects, events in another order or one direction reversed),
so retrieval needs colour and shape and motion and order. The soundtrack has one tone
per shape, loud while that shape acts, so audio carries information too.

    from videotext.data.synthetic import synthesize
    dataset = synthesize("data/synth", num_videos=2000, seed=0, workers=2)

writes ``data/synth/videos/<id>.mp4`` (H.264 baseline yuv420p + mono AAC, 128 px, 8 fps,
6 s by default) and ``data/synth/manifest.json``. Every video's ``meta`` holds the
structured events (object, colour, shape, action, start, end), the objects' initial
states, ``order_sensitive``, and for group members ``group`` / ``distractor_of`` /
``distractor_kind``. `generate_specs` gives the scripts and text without rendering;
`render_video` renders one spec.
"""
from videotext.data.synthetic.build import SynthesisError, synthesize
from videotext.data.synthetic.render import (
    ObjectState,
    encode_mp4,
    frame_count,
    is_rendered,
    object_states,
    render_audio,
    render_frame,
    render_frames,
    render_video,
)
from videotext.data.synthetic.specs import (
    EventSpec,
    ObjectSpec,
    VideoSpec,
    assign_splits,
    describe,
    generate_specs,
)
from videotext.data.synthetic.vocab import (
    ACTION_PHRASES,
    ACTIONS,
    COLOURS,
    DEFAULT_DURATION,
    DEFAULT_FPS,
    DEFAULT_SAMPLE_RATE,
    DEFAULT_SIZE,
    SHAPE_TONES_HZ,
    SHAPES,
)

__all__ = [
    "ACTIONS", "ACTION_PHRASES", "COLOURS", "DEFAULT_DURATION", "DEFAULT_FPS",
    "DEFAULT_SAMPLE_RATE", "DEFAULT_SIZE", "EventSpec", "ObjectSpec", "ObjectState",
    "SHAPES", "SHAPE_TONES_HZ", "SynthesisError", "VideoSpec", "assign_splits", "describe",
    "encode_mp4", "frame_count", "generate_specs", "is_rendered", "object_states",
    "render_audio", "render_frame", "render_frames", "render_video", "synthesize",
]
