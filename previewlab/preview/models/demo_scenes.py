"""Drawn scenes with captions: the demo model's training data (checker.py reads them back).

A scene is one to three flat shapes (circle, square, triangle) in named colors at named positions on a
background (a plain named color, a gradient sky, or sky over grass). Its caption says all of it:
"a red circle on the left and a blue square on the right, on a yellow background".
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Literal, Sequence

import numpy as np
from PIL import Image, ImageDraw

Shape = Literal["circle", "square", "triangle"]
Position = Literal["left", "right", "top", "bottom", "center"]
Background = Literal["plain", "sky", "ground"]
SHAPES: tuple[Shape, ...] = ("circle", "square", "triangle")
POSITIONS: tuple[Position, ...] = ("left", "right", "top", "bottom", "center")
BACKGROUNDS: tuple[Background, ...] = ("plain", "sky", "ground")

# Saturated colors at least ~100 apart in RGB, so a slightly-off generated color still lands on its name.
COLORS: dict[str, tuple[int, int, int]] = {
    "red": (220, 30, 30), "green": (30, 170, 50), "blue": (30, 60, 220), "yellow": (245, 215, 30),
    "purple": (140, 50, 180), "orange": (245, 130, 20), "white": (245, 245, 245), "black": (20, 20, 20)}
SKY_TOP, SKY_BOTTOM = (70, 130, 215), (185, 215, 245)
GRASS_TOP, GRASS_BOTTOM = (70, 150, 60), (40, 105, 35)
HORIZON = 0.6  # fraction of the height where grass starts in a ground scene
# Object colors a background would swallow: blue and white fade into the sky, green into the grass.
EXCLUDED: dict[Background, frozenset[str]] = {
    "plain": frozenset(), "sky": frozenset({"blue", "white"}), "ground": frozenset({"blue", "white", "green"})}
# Anchor centers as fractions of the side. 0.22 / 0.78 keep left, right, top and bottom apart for the largest
# objects; center would touch its neighbours, so it only appears alone (see random_scene).
ANCHORS: dict[Position, tuple[float, float]] = {
    "left": (0.22, 0.5), "right": (0.78, 0.5), "top": (0.5, 0.22), "bottom": (0.5, 0.78), "center": (0.5, 0.5)}
PHRASES: dict[Position, str] = {
    "left": "on the left", "right": "on the right", "top": "at the top", "bottom": "at the bottom",
    "center": "in the center"}
SIZE_RANGE = (0.26, 0.32)  # object side as a fraction of the image side
JITTER = 0.03              # anchor jitter, fraction of the side
SUPERSAMPLE = 4            # draw 4x larger and average down: anti-aliased edges, as in real pictures


@dataclass(frozen=True)
class Obj:
    color: str
    shape: Shape
    position: Position
    dx: float = 0.0    # jitter, fraction of the side
    dy: float = 0.0
    size: float = 0.29  # side, fraction of the image side

    @property
    def phrase(self) -> str:
        article = "an" if self.color[0] in "aeiou" else "a"
        return f"{article} {self.color} {self.shape} {PHRASES[self.position]}"


@dataclass(frozen=True)
class Scene:
    objects: tuple[Obj, ...]
    background: Background
    bg_color: str | None = None  # the named color of a plain background

    @property
    def caption(self) -> str:
        parts = [o.phrase for o in self.objects]
        things = parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]
        assert self.background != "plain" or self.bg_color is not None
        article = "an" if (self.bg_color or "x")[0] in "aeiou" else "a"
        where = {"plain": f"on {article} {self.bg_color} background", "sky": "in the sky", "ground": "on grass"}
        return f"{things}, {where[self.background]}"


def words() -> list[str]:
    """Every word a caption can hold, in a fixed order (the tokenizer's vocabulary is built from it)."""
    fixed = ["a", "an", "and", "on", "the", "at", "in", "background", "sky", "grass", ","]
    phrases = [w for p in PHRASES.values() for w in p.split()]
    return list(dict.fromkeys(fixed + list(COLORS) + list(SHAPES) + phrases))


def vocabulary() -> dict[str, list[str]]:
    """What a prompt for the demo model is made of, for a person writing one (the server's hello, the page's
    hint): its colors, shapes, places and backgrounds as its captions say them, captions it knows, and every word
    it learnt (`words`: the page names a prompt's others). Any other word is unknown to its tokenizer ("middle":
    "in the center" is the word it learnt)."""
    examples = [
        Scene((Obj("red", "circle", "left"), Obj("blue", "square", "right")), "plain", "yellow"),
        Scene((Obj("green", "triangle", "center"),), "plain", "purple"),
        Scene((Obj("yellow", "circle", "top"),), "sky"),
        Scene((Obj("orange", "square", "left"), Obj("purple", "triangle", "bottom")), "ground"),
        Scene((Obj("white", "triangle", "bottom"),), "plain", "black"),
    ]
    def either(names: frozenset[str]) -> str:
        ordered = [c for c in COLORS if c in names]
        return ", ".join(ordered[:-1]) + " or " + ordered[-1]

    never = f"{either(EXCLUDED['sky'])} shapes in the sky, {either(EXCLUDED['ground'])} shapes on grass"
    return {"colors": list(COLORS), "shapes": list(SHAPES), "places": list(PHRASES.values()),
            "backgrounds": ["on a <color> background", "in the sky", "on grass"],
            "notes": ['up to three shapes, joined by "and"; "in the center" only for a shape alone',
                      f"never drawn: {never}"],
            "examples": [s.caption for s in examples], "words": words()}


def _allowed(background: Background) -> list[str]:
    return [c for c in COLORS if c not in EXCLUDED[background]]


def _single(color: str, shape: Shape, position: Position, background: Background, bg_color: str | None) -> Scene:
    return Scene((Obj(color, shape, position),), background, bg_color)


def single_object_scenes() -> list[Scene]:
    """Every single-object caption, each once, without jitter, in a fixed order."""
    out = []
    for bg in BACKGROUNDS:
        for color in _allowed(bg):
            for bg_color in ([c for c in COLORS if c != color] if bg == "plain" else [None]):
                for shape in SHAPES:
                    for pos in POSITIONS:
                        out.append(_single(color, shape, pos, bg, bg_color))
    return out


def held_out(n: int = 50) -> list[Scene]:
    """The checker's single-object scenes, never drawn for training. A fixed seed (not --seed): every model
    is checked on the same captions."""
    scenes = single_object_scenes()
    random.Random(14).shuffle(scenes)
    return scenes[:n]


HELD_OUT_CAPTIONS = frozenset(s.caption for s in held_out())


def random_scene(rng: random.Random) -> Scene:
    """A training scene: 1 object half the time, 2 or 3 otherwise (the checker asks about single objects, the
    captions of several teach the words in more contexts). Held-out captions are drawn again."""
    while True:
        n = rng.choices((1, 2, 3), weights=(5, 3, 2))[0]
        background: Background = rng.choice(BACKGROUNDS)
        colors = rng.sample(_allowed(background), n)
        places: Sequence[Position] = POSITIONS if n == 1 else POSITIONS[:4]
        positions = rng.sample(list(places), n)
        objects = tuple(Obj(c, rng.choice(SHAPES), p, rng.uniform(-JITTER, JITTER), rng.uniform(-JITTER, JITTER),
                            rng.uniform(*SIZE_RANGE)) for c, p in zip(colors, positions))
        bg_color = rng.choice([c for c in COLORS if c not in colors]) if background == "plain" else None
        scene = Scene(objects, background, bg_color)
        if scene.caption not in HELD_OUT_CAPTIONS:
            return scene


def _gradient(top: tuple[int, int, int], bottom: tuple[int, int, int], rows: int, cols: int) -> np.ndarray:
    t = np.linspace(0.0, 1.0, rows, dtype=np.float32)[:, None, None]
    col = (1 - t) * np.array(top, np.float32) + t * np.array(bottom, np.float32)
    return np.broadcast_to(col, (rows, cols, 3))


def _background(scene: Scene, side: int) -> np.ndarray:
    if scene.background == "plain":
        assert scene.bg_color is not None
        return np.broadcast_to(np.array(COLORS[scene.bg_color], np.float32), (side, side, 3))
    if scene.background == "sky":
        return _gradient(SKY_TOP, SKY_BOTTOM, side, side)
    horizon = int(side * HORIZON)
    return np.concatenate([_gradient(SKY_TOP, SKY_BOTTOM, horizon, side),
                           _gradient(GRASS_TOP, GRASS_BOTTOM, side - horizon, side)])


def _paint(pen: ImageDraw.ImageDraw, o: Obj, side: int, fill: tuple[int, int, int] | int) -> None:
    ax, ay = ANCHORS[o.position]
    cx, cy, half = (ax + o.dx) * side, (ay + o.dy) * side, o.size * side / 2
    box = (cx - half, cy - half, cx + half, cy + half)
    if o.shape == "circle":
        pen.ellipse(box, fill=fill)
    elif o.shape == "square":
        pen.rectangle(box, fill=fill)
    else:
        pen.polygon([(cx, cy - half), (cx + half, cy + half), (cx - half, cy + half)], fill=fill)


def draw(scene: Scene, size: int = 128) -> np.ndarray:
    """The scene as an RGB image, (size, size, 3) uint8."""
    big = size * SUPERSAMPLE
    img = Image.fromarray(np.ascontiguousarray(_background(scene, big)).astype(np.uint8))
    pen = ImageDraw.Draw(img)
    for o in scene.objects:
        _paint(pen, o, big, COLORS[o.color])
    return np.asarray(img.resize((size, size), Image.Resampling.BOX))


def object_mask(scene: Scene, size: int) -> np.ndarray:
    """(size, size) float32: the share of each pixel that objects cover, in [0, 1]."""
    img = Image.new("L", (size * SUPERSAMPLE,) * 2, 0)
    pen = ImageDraw.Draw(img)
    for o in scene.objects:
        _paint(pen, o, size * SUPERSAMPLE, 255)
    return np.asarray(img.resize((size, size), Image.Resampling.BOX), np.float32) / 255
