"""Plain, centred borders are found and cut; pictures without one are left as they are."""
from __future__ import annotations

import numpy as np

from videotext.data.borders import border_box, trim_borders
from videotext.data.experts.layout import LayoutExpert


def picture(frames: int = 6, height: int = 60, width: int = 80, seed: int = 0) -> np.ndarray:
    """Frames of smooth, varied content [T, H, W, 3] (uint8): no line of it is one colour."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width]
    out = np.empty((frames, height, width, 3), np.uint8)
    for t in range(frames):
        for c in range(3):
            phase = rng.uniform(0, 6.3, 2)
            out[t, ..., c] = 128 + 100 * np.sin(x / 7.0 + phase[0] + t) * np.cos(y / 5.0 + phase[1])
    return out


def pad(frames: np.ndarray, top: int, bottom: int, left: int, right: int, colour=(0, 0, 0),
        noise: int = 0, seed: int = 1) -> np.ndarray:
    t, h, w, _ = frames.shape
    out = np.empty((t, h + top + bottom, w + left + right, 3), np.int16)
    out[:] = np.asarray(colour, np.int16)
    if noise:  # compression noise on the border
        out += np.random.default_rng(seed).integers(-noise, noise + 1, out.shape, dtype=np.int16)
    out[:, top : top + h, left : left + w] = frames
    return np.clip(out, 0, 255).astype(np.uint8)


def test_letterbox_pillarbox_and_frame_are_cut_to_the_picture():
    content = picture()
    letterbox = pad(content, 10, 10, 0, 0, noise=12)  # 4:3 padded towards 1:1, noisy black bars
    assert border_box(letterbox) == (10, 10, 0, 0)
    np.testing.assert_array_equal(trim_borders(letterbox), content)
    pillarbox = pad(content, 0, 0, 12, 13)  # one column more on the right (odd padding)
    assert border_box(pillarbox) == (0, 0, 12, 13)
    framed = pad(content, 9, 9, 12, 12, colour=(128, 128, 128))  # a picture inside a grey frame
    np.testing.assert_array_equal(trim_borders(framed), content)


def test_pictures_without_a_plain_centred_border_are_left_as_they_are():
    content = picture()
    assert trim_borders(content) is content
    assert border_box(pad(content, 12, 0, 0, 0)) == (0, 0, 0, 0)  # a dark band on one side only (a sky)
    assert border_box(pad(content, 10, 10, 0, 0, colour=(0, 0, 0))[:, :, :] * 0) == (0, 0, 0, 0)  # all one colour
    two_colours = pad(content, 10, 0, 0, 0, colour=(0, 0, 0))
    two_colours = pad(two_colours, 0, 10, 0, 0, colour=(255, 255, 255))
    assert border_box(two_colours) == (0, 0, 0, 0)  # black above, white below: not one border
    thin = pad(content, 1, 1, 0, 0)  # under 3 % of the side: a coding artefact, not a border
    assert border_box(thin) == (0, 0, 0, 0)
    logo = content.copy()
    logo[:, :12, -20:] = 255  # a plain logo in a corner touches two edges, covering neither
    assert border_box(logo) == (0, 0, 0, 0)
    moving = pad(content, 10, 10, 0, 0)
    moving[3, 5, 40:50] = 200  # something crossing the bars in one frame ends the border there
    moving[3, -6, 40:50] = 200
    assert border_box(moving) == (5, 5, 0, 0)
    moving[3, -3, 40:50] = 200  # ... and where one side is then too thin, nothing is cut
    assert border_box(moving) == (0, 0, 0, 0)


def test_the_layout_of_a_padded_copy_equals_its_source_only_when_trimming():
    content = picture(frames=4, height=96, width=128)
    padded = pad(content, 16, 16, 0, 0)  # 4:3 to 1:1
    trimming, plain = LayoutExpert(grid=8, trim_borders=True), LayoutExpert(grid=8)
    cos = lambda a, b: float((a * b).sum() / np.linalg.norm(a) / np.linalg.norm(b))  # noqa: E731
    source = trimming.prepare(content, None, None).mean(0)
    assert cos(trimming.prepare(padded, None, None).mean(0), source) > 0.999
    assert cos(plain.prepare(padded, None, None).mean(0), plain.prepare(content, None, None).mean(0)) < 0.9
    assert trimming.settings()["trim_borders"] is True and "trim_borders" not in plain.settings()
