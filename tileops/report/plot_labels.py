"""Where the plot's id labels go: beside their points, never over another label, preferably over no point.

Labels that share a corner of the plot used to pile into one text
(``11,12,21,24,25,27``), which said neither which point was which nor where
the cluster ended. Here each point keeps its own id; only points drawn on the
very same spot (closer than ``SAME_SPOT_IN``: one marker hides the other) share
a label. Each label tries positions round its point, nearest first (right,
left, above, below, then the diagonals, then the same on wider rings); it
takes the first that stays inside the axes, overlaps no label placed before
it and covers no point, else the first that only avoids labels and the axes'
edge. A label moved off its point is joined to it by a thin line
(``Placed.leader``).

Geometry only, in inches from the axes' lower-left corner: the text sizes come
from the caller (the renderer measures them), so this module draws nothing and
a test can place labels without a figure.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from collections.abc import Callable, Sequence

import numpy as np

#: Points closer than this (inches, about a pixel at the plot's resolution) are drawn on one spot: one label.
SAME_SPOT_IN = 0.012
#: How many ids a shared label puts on one line.
IDS_PER_LINE = 6
_ANGLES = [0.0, 180.0, 90.0, 270.0, 30.0, -30.0, 150.0, 210.0, 60.0, -60.0, 120.0, 240.0]


@dataclass(frozen=True)
class Placed:
    """One label: its text, the point it names and the box it was given (inches, axes' lower-left origin)."""

    text: str
    anchor: tuple[float, float]
    box: tuple[float, float, float, float]  # x0, y0, x1, y1
    leader: bool  # the box stands off its point: draw a line to it


def id_text(ids: Sequence[int], per_line: int = IDS_PER_LINE) -> str:
    """``1-4,7,9`` (runs of three or more compressed), wrapped after ``per_line`` parts."""
    ids = sorted(ids)
    parts: list[str] = []
    i = 0
    while i < len(ids):
        j = i
        while j + 1 < len(ids) and ids[j + 1] == ids[j] + 1:
            j += 1
        parts += [f"{ids[i]}-{ids[j]}"] if j - i >= 2 else [str(x) for x in ids[i:j + 1]]
        i = j + 1
    return ",\n".join(",".join(parts[k:k + per_line]) for k in range(0, len(parts), per_line))


def _groups(anchors: Sequence[tuple[int, float, float, float]]) -> list[tuple[list[int], float, float, float]]:
    """The anchors merged where they share a spot, each group at its first member's place with its members'
    largest radius."""
    groups: list[tuple[list[int], float, float, list[float]]] = []
    for ident, x, y, r in anchors:
        for ids, gx, gy, radii in groups:
            if abs(gx - x) <= SAME_SPOT_IN and abs(gy - y) <= SAME_SPOT_IN:
                ids.append(ident)
                radii.append(r)
                break
        else:
            groups.append(([ident], x, y, [r]))
    return [(ids, x, y, max(radii)) for ids, x, y, radii in groups]


def _candidates(x: float, y: float, w: float, h: float, radius: float, step: float, rings: int) -> np.ndarray:
    """Boxes (x0, y0, x1, y1) round (x, y), nearest ring first: each ring's boxes sit ``radius + k * step``
    clear of the point, the first at the right, then the left, above, below and the diagonals."""
    out = []
    for k in range(rings):
        gap = radius + k * step
        for a in _ANGLES:
            c, s = math.cos(math.radians(a)), math.sin(math.radians(a))
            # the box's centre on an ellipse that keeps its near edge ``gap`` from the point
            cx, cy = x + c * (w / 2 + gap), y + s * (h / 2 + gap)
            out.append((cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2))
    return np.asarray(out, dtype=float)


def _clear_of_boxes(cand: np.ndarray, boxes: np.ndarray, pad: float) -> np.ndarray:
    if not len(boxes):
        return np.ones(len(cand), dtype=bool)
    c, b = cand[:, None, :], boxes[None, :, :]
    hit = (c[..., 0] < b[..., 2] + pad) & (b[..., 0] - pad < c[..., 2]) & \
          (c[..., 1] < b[..., 3] + pad) & (b[..., 1] - pad < c[..., 3])
    return np.asarray(~hit.any(axis=1))


def _clear_of_points(cand: np.ndarray, pts: np.ndarray) -> np.ndarray:
    if not len(pts):
        return np.ones(len(cand), dtype=bool)
    c = cand[:, None, :]
    px, py, r = pts[None, :, 0], pts[None, :, 1], pts[None, :, 2]
    hit = (px > c[..., 0] - r) & (px < c[..., 2] + r) & (py > c[..., 1] - r) & (py < c[..., 3] + r)
    return np.asarray(~hit.any(axis=1))


def place_labels(anchors: Sequence[tuple[int, float, float, float]], points: Sequence[tuple[float, float, float]],
                 size: Callable[[str], tuple[float, float]], area: tuple[float, float], *,
                 pad: float = 0.02) -> list[Placed]:
    """Place one label per group of same-spot ``anchors`` (id, x, y, marker radius); ``points`` are every
    marker (x, y, radius: a ringed point's is its ring's), labelled or not; ``size`` gives a text's (width,
    height), ``area`` the axes' (width, height), all in inches. No two returned boxes overlap and each lies
    inside ``area``; a label for which no such place exists (an axes packed solid) is left out, its row
    still in the side table."""
    width, height = area
    pts = np.asarray(points, dtype=float).reshape(-1, 3)
    placed: list[Placed] = []
    boxes = np.zeros((0, 4))
    # the top of the plot first: its labels have the most room above the rest
    for ids, x, y, radius in sorted(_groups(anchors), key=lambda g: (-g[2], g[1])):
        text = id_text(ids)
        w, h = size(text)
        step = max(h * 0.75, 0.04)
        rings = max(2, int(max(width, height) / step))
        cand = _candidates(x, y, w, h, radius + pad, step, rings)
        inside = (cand[:, 0] >= pad) & (cand[:, 1] >= pad) & (cand[:, 2] <= width - pad) & \
                 (cand[:, 3] <= height - pad)
        free = inside & _clear_of_boxes(cand, boxes, pad)
        best = free & _clear_of_points(cand, pts)
        pick = np.flatnonzero(best) if best.any() else np.flatnonzero(free)
        if not len(pick):
            continue
        i = int(pick[0])
        box = (float(cand[i, 0]), float(cand[i, 1]), float(cand[i, 2]), float(cand[i, 3]))
        placed.append(Placed(text, (x, y), box, leader=i >= len(_ANGLES) or _ANGLES[i] % 90 != 0))
        boxes = np.vstack([boxes, cand[i:i + 1]])
    return placed
