"""The roofline plot's ceilings: the memory slopes and the compute roofs, each drawn once.

Theoretical dashed, effective solid, one colour per roof. Roofs of the same
kind whose values agree within ``SAME_ROOF`` (``cpu.fp32`` and
``cpu.fp32_matmul`` both at 238 GFLOP/s) are one line whose label names each
(``cpu.fp32 = cpu.fp32_matmul effective 238 GFLOP/s``): two lines on one
height used to draw as a single line of two alternating colours that the
legend could not be matched to.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from tileops.profiles import Profile
from tileops.report import columns
from tileops.report.plot_layout import _Point

MEMORY_COLOR = "#333333"
ROOF_COLORS = ("#e6550d", "#756bb1", "#31a354", "#3182bd", "#de2d26", "#636363", "#8c6d31", "#d6616b", "#17becf")
#: Two roofs whose values differ by at most this fraction are drawn as one line, labelled with one value.
SAME_ROOF = 0.01
#: Roof lines closer than this on the plot (inches: about two line widths) are drawn as one, with each value.
LINE_APART_IN = 0.03
PLOT_H_IN = 6.2  # the axes' height, inches (``plot.PLOT_H``)


@dataclass(frozen=True)
class Roofline:
    """One drawn roof line: the roofs it stands for and their values (FLOP/s), its kind and its colour."""

    keys: tuple[str, ...]
    values: tuple[float, ...]
    kind: str  # "theoretical" or "effective"
    color: str

    @property
    def value(self) -> float:
        """Where the line is drawn: between its roofs' values (at most a line's width from each)."""
        return math.sqrt(min(self.values) * max(self.values))

    @property
    def label(self) -> str:
        """``cpu.fp32 = cpu.fp32_matmul theoretical 236 GFLOP/s``, or where the values differ but not to the
        eye, ``cpu.fp32 ≈ cpu.fp32_matmul effective 193 GFLOP/s ≈ 198 GFLOP/s``."""
        if max(self.values) <= min(self.values) * (1 + SAME_ROOF):
            return f"{' = '.join(self.keys)} {self.kind} {columns.si(self.values[0], 'FLOP/s')}"
        return (f"{' ≈ '.join(self.keys)} {self.kind} "
                + " ≈ ".join(columns.si(v, "FLOP/s") for v in self.values))


@dataclass(frozen=True)
class PlotCeilings:
    """The profile's ceilings as the plot draws them: the memory slopes and each compute roof's lines."""

    bw_theo: float | None
    bw_eff: float | None
    nominal_unknown: bool  # the effective bandwidth was measured, the nominal is not known
    roofs: list[tuple[str, float, float | None]]  # (key, theoretical, effective)

    @classmethod
    def of(cls, profile: Profile) -> PlotCeilings:
        mem = profile.memory
        return cls(
            bw_theo=mem.theoretical if mem else None, bw_eff=mem.effective if mem else None,
            nominal_unknown=mem is not None and not mem.nominal_known,
            roofs=[(k, r.theoretical, r.effective) for k, r in profile.compute.items()])

    @property
    def peak_max(self) -> float | None:
        return max((t for _, t, _ in self.roofs), default=None)

    @property
    def eff_max(self) -> float | None:
        return max((e for _, _, e in self.roofs if e), default=None)

    def lines(self, close: float = SAME_ROOF) -> list[Roofline]:
        """The roof lines to draw, each roof's theoretical line then its effective one, highest roof first; roofs
        of one kind whose values differ by at most ``close`` (a fraction, ``SAME_ROOF`` at least: on the plot,
        less than a line's width) share a line."""
        close = max(close, SAME_ROOF)
        order = sorted(self.roofs, key=lambda r: -r[1])
        colour = {key: ROOF_COLORS[i % len(ROOF_COLORS)] for i, (key, _, _) in enumerate(order)}
        out: list[Roofline] = []
        for kind in ("theoretical", "effective"):
            groups: list[tuple[list[str], list[float]]] = []
            for key, theo, eff in order:
                value = theo if kind == "theoretical" else eff
                if value is None:
                    continue
                for keys, values in groups:
                    if abs(value - values[0]) <= close * max(value, values[0]):
                        keys.append(key)
                        values.append(float(value))
                        break
                else:
                    groups.append(([key], [float(value)]))
            out += [Roofline(tuple(keys), tuple(values), kind, colour[keys[0]]) for keys, values in groups]
        rank = {key: i for i, (key, _, _) in enumerate(order)}
        return sorted(out, key=lambda line: (rank[line.keys[0]], line.kind != "theoretical"))


@dataclass(frozen=True)
class Box:
    """The axes' ranges (log scales on both)."""

    xmin: float
    xmax: float
    ymin: float
    ymax: float

    @property
    def line_ratio(self) -> float:
        """The ratio of two heights a roof line's width apart on this plot (about three pixels): two roofs
        closer than this read as one line of two colours, so they are drawn as one."""
        return float((self.ymax / self.ymin) ** (LINE_APART_IN / PLOT_H_IN) - 1)

    def to_frac(self, x: float, y: float) -> tuple[float, float]:
        """A point's place in axes fractions."""
        return (math.log10(x / self.xmin) / math.log10(self.xmax / self.xmin),
                math.log10(y / self.ymin) / math.log10(self.ymax / self.ymin))


def axis_box(points: list[_Point], c: PlotCeilings) -> Box:
    """Axis ranges holding every point (its median: an error bar is cut at the axes, never widens them) and
    every ridge (where the memory slope meets a roof), three decades wide at least."""
    bw_ref = c.bw_theo or c.bw_eff
    xs = [pt.x for pt in points]
    if bw_ref:
        xs += [t / bw_ref for _, t, _ in c.roofs] + [e / bw_ref for _, _, e in c.roofs if e]
    if not xs:
        xs = [0.1, 100.0]
    xmin, xmax = min(xs) / 8, max(xs) * 8
    if math.log10(xmax / xmin) < 3:
        mid = math.sqrt(xmin * xmax)
        xmin, xmax = mid / 10 ** 1.5, mid * 10 ** 1.5
    ys = [pt.y for pt in points] + [t for _, t, _ in c.roofs] + [e for _, _, e in c.roofs if e]
    if bw_ref:
        ys.append(bw_ref * xmin)
    if not ys:
        ys = [1e9, 1e12]
    return Box(xmin, xmax, min(ys) / 5, max(ys) * 3)


def draw_ceilings(ax: Any, c: PlotCeilings, box: Box) -> list[tuple[Any, str]]:
    """The memory slopes and the compute roofs (dashed: theoretical, solid: effective); their legend handles."""
    xmin, xmax = box.xmin, box.xmax

    def slope(bw: float, top: float | None, style: str, label: str) -> None:
        """The memory slope, up to the highest compute roof of the same kind (theoretical/effective)."""
        x_end = (top / bw) if top else xmax
        x_end = min(max(x_end, xmin), xmax)
        ax.plot([xmin, x_end], [bw * xmin, bw * x_end], style, color=MEMORY_COLOR, lw=1.6, label=label)

    if c.bw_theo:
        slope(c.bw_theo, c.peak_max, "--", f"memory theoretical {columns.si(c.bw_theo, 'B/s')}")
    if c.bw_eff:
        note = " (measured; nominal unknown)" if c.nominal_unknown else ""
        slope(c.bw_eff, c.eff_max or c.peak_max, "-", f"memory effective {columns.si(c.bw_eff, 'B/s')}{note}")
    # With the nominal bandwidth unknown there is no theoretical ridge: the dashed roof spans the plot.
    for line in c.lines(box.line_ratio):
        bw = c.bw_theo if line.kind == "theoretical" else c.bw_eff
        x0 = min(max(line.value / bw if bw else xmin, xmin), xmax)
        ax.plot([x0, xmax], [line.value, line.value], ls=(0, (5, 3)) if line.kind == "theoretical" else "-",
                color=line.color, lw=1.6, label=line.label, gid=f"roof-{line.kind}-{'+'.join(line.keys)}")
    for key, _, eff in c.roofs:
        if eff is None:
            ax.plot([], [], " ", label=f"{key}: uncalibrated (no effective line)")
    handles, labels = ax.get_legend_handles_labels()
    return list(zip(handles, labels))
