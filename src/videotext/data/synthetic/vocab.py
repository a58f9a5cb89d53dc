"""Vocabularies and constants of the synthetic dataset: what exists, how it looks and sounds.

Everything a video can contain is named here, so specs, renderer, text templates and
tests agree. Changing a value changes the rendered data: bump `SYNTH_VERSION` then, so
resumed runs re-render instead of mixing old and new files.
"""
from __future__ import annotations

SYNTH_VERSION = 1  # part of every mp4's fingerprint and of the manifest meta

# --- defaults of `synthesize` ------------------------------------------------------------
DEFAULT_SIZE = 128  # frame side in pixels (square, even: yuv420p needs even sides)
DEFAULT_FPS = 8
DEFAULT_DURATION = 6.0  # seconds
DEFAULT_SAMPLE_RATE = 16000  # Hz, mono AAC
SPLIT_NAMES = ("train", "val", "test")

# --- appearance ----------------------------------------------------------------------------
# RGB; saturated and far apart so they survive yuv420p chroma subsampling and H.264.
COLOURS: dict[str, tuple[int, int, int]] = {
    "red": (225, 40, 40),
    "orange": (250, 140, 20),
    "yellow": (240, 225, 40),
    "green": (40, 190, 70),
    "blue": (50, 100, 245),
    "purple": (160, 60, 220),
    "white": (240, 240, 240),
}
COLOUR_NAMES: tuple[str, ...] = tuple(COLOURS)
BACKGROUND: tuple[int, int, int] = (22, 22, 30)  # near-black, slightly blue

# Every shape contains its own centre (tests read the colour there).
SHAPES: tuple[str, ...] = ("circle", "square", "triangle", "star", "diamond", "cross")

# --- sound: each shape has its own tone (a C-major chord over two octaves) -----------------
SHAPE_TONES_HZ: dict[str, float] = {
    "circle": 262.0,
    "square": 330.0,
    "triangle": 392.0,
    "star": 523.0,
    "diamond": 659.0,
    "cross": 784.0,
}
# Loudness of the tone while the object acts: one level per colour (0.30 … 0.54), so
# loudness carries a little colour information too. Visible idle objects hum quietly.
ACTIVE_LEVELS: dict[str, float] = {name: round(0.30 + 0.04 * i, 2) for i, name in enumerate(COLOUR_NAMES)}
IDLE_LEVEL = 0.04
AUDIO_RAMP = 0.02  # seconds of linear fade at every level change (no clicks)

# --- actions -------------------------------------------------------------------------------
ACTIONS: tuple[str, ...] = (
    "move_left", "move_right", "move_up", "move_down",
    "grow", "shrink", "spin", "appear", "vanish",
)
MOVES: dict[str, tuple[float, float]] = {  # unit direction in image coordinates (y down)
    "move_left": (-1.0, 0.0),
    "move_right": (1.0, 0.0),
    "move_up": (0.0, -1.0),
    "move_down": (0.0, 1.0),
}
# The opposite of each reversible action: a "direction" distractor flips one event.
OPPOSITE: dict[str, str] = {
    "move_left": "move_right", "move_right": "move_left",
    "move_up": "move_down", "move_down": "move_up",
    "grow": "shrink", "shrink": "grow",
}
MOVE_DISTANCE = 0.3  # fraction of the frame side travelled by one move
GROW_FACTOR = 1.5  # one grow multiplies the size by this, one shrink divides by it
SIZE_STEPS = (-1, 1)  # allowed range of (grows - shrinks) over a video
SPIN_DEGREES = 180.0  # one spin turns the shape half around (clockwise)
POSITION_RANGE = (0.2, 0.8)  # where object centres stay, fraction of the frame side
BASE_SIZE_RANGE = (0.09, 0.12)  # initial radius, fraction of the frame side
# Relative odds of each action when it is allowed (appear / vanish only as an object's
# first / last event; spin never for a circle, where it would be invisible).
ACTION_WEIGHTS: dict[str, float] = {
    "move_left": 1.0, "move_right": 1.0, "move_up": 1.0, "move_down": 1.0,
    "grow": 1.2, "shrink": 1.2, "spin": 1.2, "appear": 1.5, "vanish": 1.2,
}

# --- timing --------------------------------------------------------------------------------
TIME_GRID = 0.25  # seconds; event boundaries are multiples of it (exact at 4, 8, 12 … fps)
MIN_EVENT_UNITS = 4  # an event lasts at least 4 grid steps = 1 s
EVENT_COUNT_RANGE = (2, 4)
MAX_OBJECTS = 3
OBJECT_COUNT_WEIGHTS = (1.0, 2.0, 2.0)  # odds of 1, 2, 3 objects (capped by the event count)

# --- how often attributes are shared and distractor groups are made ------------------------
SHARE_COLOUR_PROB = 0.35  # a new object copies the colour of an existing one
SHARE_SHAPE_PROB = 0.35  # … or its shape
DISTRACTOR_GROUP_PROB = 0.2  # a unit becomes a group: base + order and/or direction variants
DISTRACTOR_KINDS = ("order", "direction")
SHARED_EVENT_LOOKS = 4  # looks in the pool of the shared-event variant (`synthesize(shared_events=…)`)

# --- text ----------------------------------------------------------------------------------
# The first phrase of each list is the canonical one used in segment sentences.
ACTION_PHRASES: dict[str, tuple[str, ...]] = {
    "move_left": ("moves to the left", "slides to the left", "shifts left", "goes left",
                  "travels to the left", "drifts left"),
    "move_right": ("moves to the right", "slides to the right", "shifts right", "goes right",
                   "travels to the right", "drifts right"),
    "move_up": ("moves up", "slides upward", "rises", "goes up", "shifts up", "floats up"),
    "move_down": ("moves down", "slides downward", "drops", "goes down", "sinks", "shifts down"),
    "grow": ("grows", "gets bigger", "expands", "becomes larger", "grows in size", "swells"),
    "shrink": ("shrinks", "gets smaller", "becomes smaller", "contracts", "shrinks in size"),
    "spin": ("spins", "rotates", "turns around", "twirls", "spins around"),
    "appear": ("appears", "shows up", "pops up", "comes into view", "pops into view"),
    "vanish": ("vanishes", "disappears", "goes away", "disappears from view", "vanishes from sight"),
}
# Caption templates: (opening, joiner before middle events, joiner before the last event,
# ending). Every template says the events in order; all (opening, last) pairs differ, so
# two templates never give the same caption.
CAPTION_TEMPLATES: tuple[tuple[str, str, str, str], ...] = (
    ("first ", ", then ", ", then ", "."),
    ("", ", then ", ", and finally ", "."),
    ("", ". After that, ", ". After that, ", "."),
    ("", ", and after that ", ", and after that ", "."),
    ("at first ", "; next ", "; at the end ", "."),
    ("", " and then ", " and then ", "."),
    ("in the beginning ", ", afterwards ", ", and lastly ", "."),
    ("first, ", ". Then ", ". Finally, ", "."),
    ("in this video ", ", then ", ", then ", "."),
    ("", ". Next, ", ". Last, ", "."),
)
CAPTIONS_PER_VIDEO = 6
