"""Event scripts and their text: what happens in each synthetic video, and how it is said.

Pure (no files, no media): `generate_specs` gives one `VideoSpec` per video: objects
with their initial state, 2–4 timed events, the segment sentences and paraphrased
captions, and the distractor-group bookkeeping. The renderer turns a spec into pixels
and sound; `VideoSpec.to_video` turns it into a schema `Video`.

Randomness is drawn per *unit* (one video, or one distractor group) from
``random.Random(f"...:{seed}:{unit}")``, so a dataset of N videos is a prefix of a
larger one with the same seed (only a group cut at the end differs), and nothing depends
on hash seeds, platforms or the number of workers.
"""
from __future__ import annotations

import hashlib
import json
import random
from dataclasses import asdict, dataclass
from typing import Any, Sequence

from videotext.data.schema import Segment, Video
from videotext.data.synthetic.vocab import (
    ACTION_PHRASES,
    ACTION_WEIGHTS,
    BASE_SIZE_RANGE,
    CAPTION_TEMPLATES,
    CAPTIONS_PER_VIDEO,
    COLOUR_NAMES,
    DISTRACTOR_GROUP_PROB,
    DISTRACTOR_KINDS,
    EVENT_COUNT_RANGE,
    MAX_OBJECTS,
    OBJECT_COUNT_WEIGHTS,
    MIN_EVENT_UNITS,
    MOVE_DISTANCE,
    MOVES,
    OPPOSITE,
    POSITION_RANGE,
    SHAPES,
    SHARE_COLOUR_PROB,
    SHARE_SHAPE_PROB,
    SHARED_EVENT_LOOKS,
    SIZE_STEPS,
    SPLIT_NAMES,
    SYNTH_VERSION,
    TIME_GRID,
)

ID_PREFIX = "synth"


@dataclass(frozen=True)
class ObjectSpec:
    """One coloured shape and its state at t = 0 (coordinates are fractions of the frame side)."""

    colour: str
    shape: str
    x: float  # centre, 0 = left edge
    y: float  # centre, 0 = top edge
    size: float  # radius
    visible: bool = True  # False for an object whose first event is "appear"

    @property
    def name(self) -> str:
        return f"{self.colour} {self.shape}"


@dataclass(frozen=True)
class EventSpec:
    """One action of one object during [start, end) seconds; one segment of the video."""

    object: int  # index into VideoSpec.objects
    action: str  # one of vocab.ACTIONS
    start: float
    end: float


@dataclass
class VideoSpec:
    """Everything needed to render one video and to write its manifest entry."""

    id: str
    duration: float  # seconds
    objects: tuple[ObjectSpec, ...]
    events: tuple[EventSpec, ...]  # in time order, non-overlapping
    sentences: list[str]  # one per event, in order: the segment sentences / paragraph
    captions: list[str]  # paraphrases of the whole event sequence, in order
    group: str | None = None  # distractor group id (all members share the objects)
    distractor_of: str | None = None  # id of the group's base video, for variants
    distractor_kind: str | None = None  # "order" or "direction", for variants
    order_sensitive: bool = False  # another video has the same events in another order

    def event_records(self) -> list[dict[str, Any]]:
        """The structured events (object, colour, shape, action, start, end), for `meta`."""
        return [
            {
                "object": e.object,
                "colour": self.objects[e.object].colour,
                "shape": self.objects[e.object].shape,
                "action": e.action,
                "start": e.start,
                "end": e.end,
            }
            for e in self.events
        ]

    def meta(self) -> dict[str, Any]:
        """The manifest `meta` of this video."""
        out: dict[str, Any] = {
            "objects": [asdict(o) for o in self.objects],
            "events": self.event_records(),
            "order_sensitive": self.order_sensitive,
        }
        if self.group is not None:
            out["group"] = self.group
        if self.distractor_of is not None:
            out["distractor_of"] = self.distractor_of
            out["distractor_kind"] = self.distractor_kind
        return out

    def to_video(self, path: str | None = None, duration: float | None = None) -> Video:
        """The schema `Video` of this spec (`duration` defaults to the scripted one)."""
        segments = [Segment(e.start, e.end, s) for e, s in zip(self.events, self.sentences)]
        return Video(
            id=self.id,
            path=path,
            duration=self.duration if duration is None else duration,
            captions=list(self.captions),
            segments=segments,
            meta=self.meta(),
        )

    def fingerprint(self, **render_params: Any) -> str:
        """A hash of what the pixels and sound depend on; stored in the mp4 for resuming."""
        content = {
            "version": SYNTH_VERSION,
            "duration": self.duration,
            "objects": [asdict(o) for o in self.objects],
            "events": [asdict(e) for e in self.events],
            **render_params,
        }
        blob = json.dumps(content, sort_keys=True).encode()
        return hashlib.sha1(blob).hexdigest()


# --- event plans -------------------------------------------------------------------------
Look = tuple[str, str]  # (colour, shape)
Step = tuple[int, str]  # (object index, action)


def _pick_looks(rng: random.Random, count: int) -> list[Look]:
    """Distinct (colour, shape) pairs, often sharing a colour or a shape with another."""
    looks = [(rng.choice(COLOUR_NAMES), rng.choice(SHAPES))]
    while len(looks) < count:
        ref = rng.choice(looks)
        draw = rng.random()
        if draw < SHARE_COLOUR_PROB:
            candidate = (ref[0], rng.choice(SHAPES))
        elif draw < SHARE_COLOUR_PROB + SHARE_SHAPE_PROB:
            candidate = (rng.choice(COLOUR_NAMES), ref[1])
        else:
            candidate = (rng.choice(COLOUR_NAMES), rng.choice(SHAPES))
        if candidate not in looks:
            looks.append(candidate)
    return looks


class _Track:
    """What an object's events so far imply: net size steps and the span of its path."""

    def __init__(self) -> None:
        self.size_step = 0
        self.offset = [0.0, 0.0]  # current displacement from the start (x, y)
        self.low = [0.0, 0.0]
        self.high = [0.0, 0.0]

    def allows(self, action: str) -> bool:
        if action == "grow":
            return self.size_step + 1 <= SIZE_STEPS[1]
        if action == "shrink":
            return self.size_step - 1 >= SIZE_STEPS[0]
        if action in MOVES:
            span = POSITION_RANGE[1] - POSITION_RANGE[0]
            for axis, direction in enumerate(MOVES[action]):
                new = self.offset[axis] + direction * MOVE_DISTANCE
                if max(self.high[axis], new) - min(self.low[axis], new) > span + 1e-9:
                    return False
        return True

    def apply(self, action: str) -> None:
        if action == "grow":
            self.size_step += 1
        elif action == "shrink":
            self.size_step -= 1
        elif action in MOVES:
            for axis, direction in enumerate(MOVES[action]):
                self.offset[axis] += direction * MOVE_DISTANCE
                self.low[axis] = min(self.low[axis], self.offset[axis])
                self.high[axis] = max(self.high[axis], self.offset[axis])


def _allowed(action: str, shape: str, first: bool, last: bool, track: _Track) -> bool:
    if action == "appear":
        return first
    if action == "vanish":
        return last
    if action == "spin":
        return shape != "circle"
    return track.allows(action)


def _random_steps(rng: random.Random, looks: Sequence[Look], count: int) -> list[Step]:
    """`count` (object, action) steps; every object acts at least once; always valid."""
    owners = list(range(len(looks))) + [rng.randrange(len(looks)) for _ in range(count - len(looks))]
    rng.shuffle(owners)
    tracks = [_Track() for _ in looks]
    steps: list[Step] = []
    for i, owner in enumerate(owners):
        first = owner not in owners[:i]
        last = owner not in owners[i + 1 :]
        options = [a for a in ACTION_WEIGHTS if _allowed(a, looks[owner][1], first, last, tracks[owner])]
        action = rng.choices(options, weights=[ACTION_WEIGHTS[a] for a in options])[0]
        tracks[owner].apply(action)
        steps.append((owner, action))
    return steps


def _valid(looks: Sequence[Look], steps: Sequence[Step]) -> bool:
    """Whether a step sequence can be played: the rules `_random_steps` draws under."""
    tracks = [_Track() for _ in looks]
    owners = [o for o, _ in steps]
    for i, (owner, action) in enumerate(steps):
        first = owner not in owners[:i]
        last = owner not in owners[i + 1 :]
        if not _allowed(action, looks[owner][1], first, last, tracks[owner]):
            return False
        tracks[owner].apply(action)
    return True


def _layout(rng: random.Random, looks: Sequence[Look], steps: Sequence[Step]) -> tuple[ObjectSpec, ...]:
    """Initial states that keep every object's path inside `POSITION_RANGE`."""
    objects = []
    for index, (colour, shape) in enumerate(looks):
        track = _Track()
        for owner, action in steps:
            if owner == index:
                track.apply(action)
        centre = []
        for axis in range(2):  # start so that start + [low, high] fits the range
            lo, hi = POSITION_RANGE[0] - track.low[axis], POSITION_RANGE[1] - track.high[axis]
            centre.append(round(rng.uniform(lo, hi), 3))
        objects.append(
            ObjectSpec(
                colour=colour,
                shape=shape,
                x=centre[0],
                y=centre[1],
                size=round(rng.uniform(*BASE_SIZE_RANGE), 3),
                visible=(index, "appear") not in steps,
            )
        )
    return tuple(objects)


def _fits(objects: Sequence[ObjectSpec], steps: Sequence[Step]) -> bool:
    """Whether `objects`' initial positions keep the paths of `steps` inside the range."""
    for index, obj in enumerate(objects):
        track = _Track()
        for owner, action in steps:
            if owner == index:
                track.apply(action)
        for axis, start in enumerate((obj.x, obj.y)):
            if start + track.low[axis] < POSITION_RANGE[0] - 1e-9 or start + track.high[axis] > POSITION_RANGE[1] + 1e-9:
                return False
    return True


def _slots(rng: random.Random, count: int, duration: float) -> list[tuple[float, float]]:
    """`count` non-overlapping (start, end) times on the `TIME_GRID`, each ≥ the minimum length."""
    units = int(round(duration / TIME_GRID))
    spare = units - count * MIN_EVENT_UNITS
    lengths = [MIN_EVENT_UNITS] * count
    gaps = [0] * (count + 1)  # before each event, and after the last
    for _ in range(spare):  # each spare grid step lengthens an event (odds 2) or a gap (odds 1)
        bucket = rng.randrange(2 * count + count + 1)
        if bucket < 2 * count:
            lengths[bucket // 2] += 1
        else:
            gaps[bucket - 2 * count] += 1
    slots, t = [], 0
    for length, gap in zip(lengths, gaps):
        t += gap
        slots.append((t * TIME_GRID, (t + length) * TIME_GRID))
        t += length
    return slots


def _order_variant(rng: random.Random, looks: Sequence[Look], steps: list[Step]) -> list[Step] | None:
    """The same steps in another valid order that reads differently, if one exists."""
    for _ in range(30):
        permuted = rng.sample(steps, len(steps))
        if permuted != steps and _valid(looks, permuted):
            return permuted
    return None


def _direction_variant(rng: random.Random, looks: Sequence[Look], steps: list[Step]) -> list[Step] | None:
    """The steps with one move / grow / shrink reversed, if that stays valid."""
    candidates = [i for i, (_, action) in enumerate(steps) if action in OPPOSITE]
    rng.shuffle(candidates)
    for i in candidates:
        flipped = list(steps)
        flipped[i] = (steps[i][0], OPPOSITE[steps[i][1]])
        if _valid(looks, flipped):
            return flipped
    return None


# --- text ----------------------------------------------------------------------------------
def _clauses(objects: Sequence[ObjectSpec], events: Sequence[EventSpec], rng: random.Random | None) -> list[str]:
    """One clause per event, "a red circle slides left"; "the" once an object was named.

    With `rng=None` the canonical phrase of each action is used (segment sentences).
    """
    named: set[int] = set()
    out = []
    for event in events:
        name = objects[event.object].name
        article = "the" if event.object in named else ("an" if name[0] in "aeiou" else "a")
        named.add(event.object)
        phrases = ACTION_PHRASES[event.action]
        phrase = phrases[0] if rng is None else rng.choice(phrases)
        out.append(f"{article} {name} {phrase}")
    return out


def _capitalise(text: str) -> str:
    return text[:1].upper() + text[1:]


def describe(
    objects: Sequence[ObjectSpec], events: Sequence[EventSpec], rng: random.Random
) -> tuple[list[str], list[str]]:
    """The segment sentences (canonical wording) and `CAPTIONS_PER_VIDEO` ordered paraphrases."""
    sentences = [_capitalise(c) + "." for c in _clauses(objects, events, None)]
    templates = rng.sample(CAPTION_TEMPLATES, CAPTIONS_PER_VIDEO)
    captions = []
    for opening, middle, last, ending in templates:
        clauses = _clauses(objects, events, rng)
        text = opening + clauses[0]
        for i, clause in enumerate(clauses[1:], start=1):
            text += (last if i == len(clauses) - 1 else middle) + clause
        captions.append(_capitalise(text + ending))
    return sentences, captions


# --- the dataset's specs ---------------------------------------------------------------------
def shared_look_pool(seed: int, size: int = SHARED_EVENT_LOOKS) -> list[Look]:
    """The few (colour, shape) looks that the shared-event videos of a dataset draw from."""
    return _pick_looks(random.Random(f"videotext-synth-shared-pool:{seed}"), size)


def _unit_members(seed: int, unit: int, duration: float, shared_events: float = 0.0,
                  shared_looks: int = SHARED_EVENT_LOOKS) -> list[tuple[tuple[ObjectSpec, ...], list[EventSpec], str | None]]:
    """The videos of one random unit: a base video, plus its distractors if it is a group.

    With probability `shared_events` the unit's objects are taken from the dataset's small
    pool of looks (`shared_look_pool`), so its events (look, action) recur in other videos,
    as "a man is cooking" recurs across MSR-VTT. The draw has its own random stream: at 0 the
    unit is exactly the one made without the option."""
    rng = random.Random(f"videotext-synth:{seed}:{unit}")
    max_events = min(EVENT_COUNT_RANGE[1], int(round(duration / TIME_GRID)) // MIN_EVENT_UNITS)
    count = rng.randint(EVENT_COUNT_RANGE[0], max_events)
    object_counts = list(range(1, min(MAX_OBJECTS, count) + 1))
    looks = _pick_looks(rng, rng.choices(object_counts, weights=OBJECT_COUNT_WEIGHTS[: len(object_counts)])[0])
    if shared_events > 0:
        sharing = random.Random(f"videotext-synth-shared:{seed}:{unit}")
        if sharing.random() < shared_events:
            looks = sharing.sample(shared_look_pool(seed, shared_looks), len(looks))
    steps = _random_steps(rng, looks, count)
    slots = _slots(rng, count, duration)
    objects = _layout(rng, looks, steps)

    variants: list[tuple[list[Step], str]] = []
    if rng.random() < DISTRACTOR_GROUP_PROB:
        kinds = rng.choice([("order",), ("direction",), DISTRACTOR_KINDS])
        for kind in kinds:
            make = _order_variant if kind == "order" else _direction_variant
            variant = make(rng, looks, steps)
            if variant is not None:
                variants.append((variant, kind))

    def events_of(plan: Sequence[Step]) -> list[EventSpec]:
        return [EventSpec(o, a, s, e) for (o, a), (s, e) in zip(plan, slots)]

    members = [(objects, events_of(steps), None)]
    for plan, kind in variants:  # same objects; new start states only if the old ones no longer fit
        variant_objects = objects if _fits(objects, plan) else _layout(rng, looks, plan)
        members.append((variant_objects, events_of(plan), kind))
    return members


def generate_specs(num_videos: int, seed: int = 0, *, duration: float = 6.0, shared_events: float = 0.0,
                   shared_looks: int = SHARED_EVENT_LOOKS) -> list[VideoSpec]:
    """The event scripts and text of `num_videos` videos (pure: no files are written).

    Video ids are ``synth000000``, ``synth000001``, …; members of a distractor group are
    consecutive and share ``group``; variants name their base in ``distractor_of``.
    `shared_events` is the share of units whose objects come from a pool of `shared_looks`
    looks, so that their events recur in other videos (Support-set §1: captions of
    different videos describe the same events).
    """
    if num_videos < 1:
        raise ValueError(f"num_videos must be ≥ 1, got {num_videos}")
    if not 0.0 <= shared_events <= 1.0:
        raise ValueError(f"shared_events must be within [0, 1], got {shared_events}")
    if shared_looks < MAX_OBJECTS:
        raise ValueError(f"shared_looks must be ≥ {MAX_OBJECTS} (the most objects in a video), got {shared_looks}")
    if duration / TIME_GRID < EVENT_COUNT_RANGE[0] * MIN_EVENT_UNITS:
        raise ValueError(
            f"duration must be ≥ {EVENT_COUNT_RANGE[0] * MIN_EVENT_UNITS * TIME_GRID} s "
            f"for {EVENT_COUNT_RANGE[0]} events, got {duration}"
        )
    specs: list[VideoSpec] = []
    unit = 0
    while len(specs) < num_videos:
        members = _unit_members(seed, unit, duration, shared_events, shared_looks)[: num_videos - len(specs)]
        group = f"group{unit:06d}" if len(members) > 1 else None
        base_id = f"{ID_PREFIX}{len(specs):06d}"
        for k, (objects, events, kind) in enumerate(members):
            text_rng = random.Random(f"videotext-synth-text:{seed}:{unit}:{k}")
            sentences, captions = describe(objects, events, text_rng)
            vid = f"{ID_PREFIX}{len(specs):06d}"
            specs.append(
                VideoSpec(
                    id=vid,
                    duration=float(duration),
                    objects=objects,
                    events=tuple(events),
                    sentences=sentences,
                    captions=captions,
                    group=group,
                    distractor_of=base_id if k > 0 else None,
                    distractor_kind=kind,
                )
            )
        unit += 1
    _mark_order_sensitive(specs)
    return specs


def _mark_order_sensitive(specs: list[VideoSpec]) -> None:
    """Flag videos whose events also occur, in another order, in another video.

    For those, an order-free caption ("a red circle grows, a blue star spins") matches
    several videos; only the ordered one picks the right video.
    """
    by_bag: dict[tuple, set[tuple]] = {}
    for spec in specs:
        sequence = tuple((spec.objects[e.object].name, e.action) for e in spec.events)
        by_bag.setdefault(tuple(sorted(sequence)), set()).add(sequence)
    for spec in specs:
        sequence = tuple((spec.objects[e.object].name, e.action) for e in spec.events)
        spec.order_sensitive = len(by_bag[tuple(sorted(sequence))]) > 1


def assign_splits(
    specs: Sequence[VideoSpec], seed: int = 0, fractions: Sequence[float] = (0.8, 0.1, 0.1)
) -> dict[str, list[str]]:
    """Seeded train / val / test lists; a distractor group always lands in one split.

    Units (groups or single videos) are shuffled, then each goes to the split furthest
    below its target size (largest-remainder rounding of `fractions` × N).
    """
    if len(fractions) != len(SPLIT_NAMES) or any(f < 0 for f in fractions) or abs(sum(fractions) - 1) > 1e-6:
        raise ValueError(f"split_fractions must be {len(SPLIT_NAMES)} non-negative numbers summing to 1, got {tuple(fractions)}")
    total = len(specs)
    exact = [f * total for f in fractions]
    targets = [int(x) for x in exact]
    by_remainder = sorted(range(len(exact)), key=lambda i: (-(exact[i] - targets[i]), i))
    for i in by_remainder[: total - sum(targets)]:
        targets[i] += 1

    units: dict[str, list[str]] = {}
    for spec in specs:
        units.setdefault(spec.group or spec.id, []).append(spec.id)
    order = list(units)
    random.Random(f"videotext-synth-split:{seed}").shuffle(order)
    counts = [0] * len(SPLIT_NAMES)
    chosen: dict[str, int] = {}
    for key in order:
        split = max(range(len(SPLIT_NAMES)), key=lambda i: (targets[i] - counts[i], -i))
        counts[split] += len(units[key])
        for vid in units[key]:
            chosen[vid] = split
    return {name: [s.id for s in specs if chosen[s.id] == i] for i, name in enumerate(SPLIT_NAMES)}
