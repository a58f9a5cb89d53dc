"""Long synthetic videos with moment queries: the offline moment-retrieval set.

A long video (1 to 30 minutes) is a sequence of *scenes* of 20 to 60 s. A scene is an ordinary
synthetic clip (`VideoSpec`: 1 to 3 coloured shapes doing timed events), with longer events (2 to
8 s) and idle gaps between them. The objects of a scene come from the video's *cast*: with odds
`RECUR_PROB` a look (colour, shape) already seen earlier in the video, else a new one that often
shares its colour or its shape with a cast member. So the same object comes back doing other
things, and other objects of the same colour or shape do the same thing: every query has
distractor events in its own video.

A query names one kind of event, "a red circle slides to the left" (its look and its action, the
action in one of its paraphrases), and its ground truth is every span in the video where that
happens; only kinds seen 1 to `MAX_SPANS` times in the video are asked. A video gets
`queries_per_minute` queries per minute of video (at least `MIN_QUERIES`), preferring kinds with
more distractors. Durations are log-uniform on [min, max] minutes, stratified within each split.

Everything is drawn from ``random.Random(f"videotext-moments:{seed}:{index}")`` per video, so the
set is the same on every machine and a video does not depend on the others. Each video renders as
one mp4, scene after scene (`render.Mp4Writer`): nothing is encoded twice and a 30-minute video
never sits in memory whole.
"""
from __future__ import annotations

import hashlib
import json
import math
import random
from dataclasses import asdict, dataclass
from typing import Any, Sequence

from videotext.data.schema import Moment, Video
from videotext.data.synthetic.specs import EventSpec, ObjectSpec, VideoSpec, _layout, _random_steps, describe
from videotext.data.synthetic.vocab import (
    ACTION_PHRASES, COLOUR_NAMES, MAX_OBJECTS, OBJECT_COUNT_WEIGHTS, SHAPES, SHARE_COLOUR_PROB, SHARE_SHAPE_PROB,
    SYNTH_VERSION, TIME_GRID,
)

MOMENTS_VERSION = 1  # part of every long mp4's fingerprint and of the manifest meta
SCENE_SECONDS = (20.0, 60.0)
EVENT_SECONDS = (2.0, 8.0)
GAP_SECONDS = (1.0, 6.0)  # idle time between two events of a scene (and before the first)
RECUR_PROB = 0.6  # a scene object is a look already in the video's cast
MAX_SPANS = 3  # a query's kind of event occurs at most this often in its video
MIN_QUERIES = 2
DEFAULT_MINUTES = (1.0, 30.0)
DEFAULT_QUERIES_PER_MINUTE = 2.0
Look = tuple[str, str]


@dataclass(frozen=True)
class LongVideoSpec:
    """One long video: its scenes in order, where each starts, and its queries."""

    id: str
    duration: float
    scenes: tuple[VideoSpec, ...]
    offsets: tuple[float, ...]  # start of each scene in the video, seconds
    queries: tuple[Moment, ...]

    def events(self) -> list[dict[str, Any]]:
        """Every event with its look and its span in the video (seconds), in time order."""
        out = []
        for index, (scene, offset) in enumerate(zip(self.scenes, self.offsets)):
            for event in scene.events:
                obj = scene.objects[event.object]
                out.append({"colour": obj.colour, "shape": obj.shape, "action": event.action, "scene": index,
                            "start": offset + event.start, "end": offset + event.end})
        return out

    def fingerprint(self, **render_params: Any) -> str:
        """What the pixels and sound depend on; stored in the mp4 so a resumed run keeps a finished file."""
        content = {"version": [SYNTH_VERSION, MOMENTS_VERSION], "offsets": self.offsets,
                   "scenes": [json.loads(json.dumps({"duration": s.duration, "objects": [asdict(o) for o in s.objects],
                                                     "events": [asdict(e) for e in s.events]})) for s in self.scenes],
                   **render_params}
        return hashlib.sha1(json.dumps(content, sort_keys=True).encode()).hexdigest()

    def to_video(self, path: str | None = None) -> Video:
        scenes = [{"start": o, "end": o + s.duration, "objects": [asdict(x) for x in s.objects]}
                  for s, o in zip(self.scenes, self.offsets)]
        return Video(id=self.id, path=path, duration=self.duration, moments=list(self.queries),
                     meta={"events": self.events(), "scenes": scenes})


# --- drawing -------------------------------------------------------------------------------------
def _grid(rng: random.Random, low: float, high: float) -> float:
    """A uniform draw on the TIME_GRID between low and high seconds."""
    return rng.randint(int(round(low / TIME_GRID)), int(round(high / TIME_GRID))) * TIME_GRID


def _new_look(rng: random.Random, cast: Sequence[Look], taken: Sequence[Look]) -> Look:
    """A look not in `taken`, copying the colour or the shape of a cast member with the usual odds."""
    for _ in range(100):
        draw = rng.random()
        if cast and draw < SHARE_COLOUR_PROB:
            candidate = (rng.choice(cast)[0], rng.choice(SHAPES))
        elif cast and draw < SHARE_COLOUR_PROB + SHARE_SHAPE_PROB:
            candidate = (rng.choice(COLOUR_NAMES), rng.choice(cast)[1])
        else:
            candidate = (rng.choice(COLOUR_NAMES), rng.choice(SHAPES))
        if candidate not in taken:
            return candidate
    raise RuntimeError("no free look")  # 42 looks, at most 3 taken: unreachable


def _scene_looks(rng: random.Random, cast: list[Look], count: int) -> list[Look]:
    looks: list[Look] = []
    for _ in range(count):
        reusable = [look for look in cast if look not in looks]
        if reusable and rng.random() < RECUR_PROB:
            looks.append(rng.choice(reusable))
        else:
            look = _new_look(rng, cast, looks)
            looks.append(look)
            if look not in cast:
                cast.append(look)
    return looks


def _scene(rng: random.Random, scene_id: str, duration: float, cast: list[Look]) -> VideoSpec:
    """One scene: events of EVENT_SECONDS with GAP_SECONDS of idle time before each, filling `duration`."""
    slots, t = [], 0.0
    while True:
        start = t + _grid(rng, *GAP_SECONDS)
        end = start + _grid(rng, *EVENT_SECONDS)
        if end > duration:
            break
        slots.append((start, end))
        t = end
    count = rng.choices(range(1, MAX_OBJECTS + 1), weights=OBJECT_COUNT_WEIGHTS)[0]
    looks = _scene_looks(rng, cast, min(count, len(slots)))
    steps = _random_steps(rng, looks, len(slots))
    objects: tuple[ObjectSpec, ...] = _layout(rng, looks, steps)
    events = tuple(EventSpec(o, a, s, e) for (o, a), (s, e) in zip(steps, slots))
    sentences, _ = describe(objects, events, rng)
    return VideoSpec(id=scene_id, duration=duration, objects=objects, events=events, sentences=sentences, captions=[])


def _query_text(rng: random.Random, look: Look, action: str) -> str:
    colour, shape = look
    article = "an" if colour[0] in "aeiou" else "a"
    return f"{article.capitalize()} {colour} {shape} {rng.choice(ACTION_PHRASES[action])}."


def _distractors(kind: tuple[str, str, str], counts: dict[tuple[str, str, str], int]) -> int:
    """Events of other kinds in the video that share this kind's object (another action) or its
    action (an object of the same colour or shape)."""
    colour, shape, action = kind
    return sum(n for (c, s, a), n in counts.items() if (c, s, a) != kind and (
        ((c, s) == (colour, shape)) or (a == action and (c == colour or s == shape))))


def long_video_spec(seed: int, index: int, video_id: str, duration: float,
                    queries_per_minute: float = DEFAULT_QUERIES_PER_MINUTE) -> LongVideoSpec:
    """The scenes and queries of one long video of `duration` seconds (a multiple of the TIME_GRID)."""
    rng = random.Random(f"videotext-moments:{seed}:{index}")
    cast: list[Look] = []
    scenes, offsets, t = [], [], 0.0
    while t < duration:
        length = _grid(rng, *SCENE_SECONDS)
        if duration - (t + length) < SCENE_SECONDS[0]:  # the last scene takes what is left
            length = duration - t
        scenes.append(_scene(rng, f"{video_id}.scene{len(scenes):03d}", length, cast))
        offsets.append(t)
        t += length
    spec = LongVideoSpec(video_id, duration, tuple(scenes), tuple(offsets), ())
    spans: dict[tuple[str, str, str], list[tuple[float, float]]] = {}
    for event in spec.events():
        spans.setdefault((event["colour"], event["shape"], event["action"]), []).append((event["start"], event["end"]))
    counts = {kind: len(found) for kind, found in spans.items()}
    candidates = [kind for kind, found in spans.items() if len(found) <= MAX_SPANS]
    rng.shuffle(candidates)
    candidates.sort(key=lambda kind: -min(_distractors(kind, counts), 3))  # stable: shuffled within a level
    wanted = max(MIN_QUERIES, int(round(queries_per_minute * duration / 60.0)))
    queries = tuple(Moment(_query_text(rng, kind[:2], kind[2]), sorted(spans[kind]), id=f"{video_id}:q{i:03d}")
                    for i, kind in enumerate(candidates[:wanted]))
    return LongVideoSpec(video_id, duration, spec.scenes, spec.offsets, queries)


def split_durations(seed: int, split: str, count: int, minutes: tuple[float, float] = DEFAULT_MINUTES) -> list[float]:
    """`count` durations (seconds, whole) log-uniform on `minutes`, stratified: one per 1/count of the range."""
    rng = random.Random(f"videotext-moments-durations:{seed}:{split}")
    low, high = math.log(minutes[0] * 60.0), math.log(minutes[1] * 60.0)
    draws = [math.exp(low + (high - low) * (i + rng.random()) / count) for i in range(count)]
    rng.shuffle(draws)
    return [float(max(round(minutes[0] * 60.0), min(round(minutes[1] * 60.0), round(d)))) for d in draws]


def moment_specs(seed: int, videos: dict[str, int], minutes: tuple[float, float] = DEFAULT_MINUTES,
                 queries_per_minute: float = DEFAULT_QUERIES_PER_MINUTE) -> tuple[list[LongVideoSpec], dict[str, list[str]]]:
    """The long videos of every split (``{"train": n, "val": n, "test": n}``) and the split lists."""
    if not 0 < minutes[0] <= minutes[1]:
        raise ValueError(f"minutes must be 0 < min ≤ max, got {minutes}")
    if minutes[0] * 60.0 < SCENE_SECONDS[0]:
        raise ValueError(f"videos must last at least {SCENE_SECONDS[0]:.0f} s (one scene), got {minutes[0]} min")
    specs, splits, index = [], {}, 0
    for split, count in videos.items():
        if count < 0:
            raise ValueError(f"{split}: a number of videos ≥ 0, got {count}")
        ids = []
        for duration in split_durations(seed, split, count, minutes):
            video_id = f"long{index:05d}"
            specs.append(long_video_spec(seed, index, video_id, duration, queries_per_minute))
            ids.append(video_id)
            index += 1
        splits[split] = ids
    return specs, splits
