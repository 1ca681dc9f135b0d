"""The roofline plot as the eye meets it (issue 37): measured on the drawn figure, artist by artist.

Each test plants rows (records are the bench's output contract, so building them is real input), draws the
figure ``write_plot`` saves, and measures its artists with the renderer that saves it: the error bars stay in
the axes, the legends stand off the data, coincident roofs are one line, anomalies and breaches have their
own marks, an unstable row is hollow but keeps its colour, no id hides another and no text leaves the figure.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest
from matplotlib.text import Text
from roofline_fixtures import make_profile, make_record

from tileops.profiles import ProfileChooser
from tileops.report.plot import plot_figure, write_plot
from tileops.report.plot_ceilings import PlotCeilings
from tileops.report.plot_labels import place_labels
from tileops.roofline import price_all

BW = 20e9  # the profile's effective bandwidth: 40 GB/s at 0.5
PROFILE = make_profile(name="cpu-eye", bw_theoretical=40e9, bw_calibration=0.5,
                       roofs={"cpu.fp32": (238e9, 0.8), "cpu.fp32_matmul": (238e9, 0.8)}, latency_floor_s=1e-7)


def _row(eff: float, *, label: str, nbytes: int = 8 << 20, spread: tuple[float, float] | None = (0.99, 1.01),
         intensity: float = 0.125, **kw):
    """A memory-bound relu row at ``eff`` of the effective bandwidth; its time's interval ``spread`` times its
    median (a wide one makes it unstable)."""
    t = nbytes / BW / eff
    ci = (t * spread[0], t * spread[1]) if spread else None
    # formula-guard: allow synthetic rows placed at a chosen intensity for the plot's layout; no op is priced
    return make_record(op=kw.pop("op", "relu"), label=label, flops=int(nbytes * intensity), bytes=nbytes, median_s=t,
                       median_ci_s=ci, roof_key="cpu.fp32", **kw)


def _drawn(rows, profile=PROFILE):
    fig = plot_figure(price_all(rows, ProfileChooser.only(profile)), profile)
    fig.canvas.draw()  # as savefig does: every artist at its final place
    return fig, fig.canvas.get_renderer(), fig.axes[0]


def _by_gid(ax, prefix: str) -> list:
    return [c for c in ax.collections if (c.get_gid() or "").startswith(prefix)]


def _inside(inner, outer, tol: float = 1.0) -> bool:
    return (inner.x0 >= outer.x0 - tol and inner.y0 >= outer.y0 - tol and inner.x1 <= outer.x1 + tol
            and inner.y1 <= outer.y1 + tol)


def _point_pixels(ax) -> np.ndarray:
    return np.vstack([ax.transData.transform(c.get_offsets()) for c in _by_gid(ax, "points-")])


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    import matplotlib.pyplot as plt

    plt.close("all")


def test_an_error_bar_of_five_decades_is_cut_at_the_axes_with_an_arrowhead() -> None:
    """Seen on a busy host: bars of 4-5 decades ran off the axes and were the picture. The axes are chosen from
    the medians; a bar is cut inside them (and at 10x from its point) and an arrowhead marks each cut end."""
    rows = [_row(0.5, label="wild", spread=(1e-3, 1e2)), _row(0.9, label="steady", nbytes=8 << 24),
            _row(0.3, label="noisy", nbytes=8 << 22, spread=(0.7, 1.5))]
    fig, renderer, ax = _drawn(rows)
    (bars,) = [c for c in ax.collections if c.get_gid() == "sol-ci"]
    box = ax.get_window_extent(renderer)
    segments = bars.get_segments()
    assert len(segments) == 3
    for seg in segments:
        for x, y in ax.transData.transform(seg):
            assert box.x0 - 0.5 <= x <= box.x1 + 0.5 and box.y0 - 0.5 <= y <= box.y1 + 0.5, (x, y, box)
    wild_y = (8 << 20) // 8 / ((8 << 20) / BW / 0.5)
    lo, hi = ax.get_ylim()
    assert lo > wild_y / 1e3 or hi < wild_y * 1e2  # the limits are not the bar's ends
    wild = next(s for s in segments if abs(s[0][0] - 0.125) < 1e-9 and s[1][1] / s[0][1] > 50)
    assert wild[1][1] / wild[0][1] <= 100 * 1.0001  # cut: at most 10x each side of its point
    ups, downs = _by_gid(ax, "sol-ci-up"), _by_gid(ax, "sol-ci-down")
    assert ups and downs  # the wild bar's two cut ends
    for arrows in ups + downs:  # the arrowheads are inside the axes too
        for x, y in ax.transData.transform(arrows.get_offsets()):
            r = np.sqrt(arrows.get_sizes()[0]) / 2 * fig.dpi / 72
            assert box.x0 <= x - r and x + r <= box.x1 and box.y0 <= y - r and y + r <= box.y1
    caps = _by_gid(ax, "sol-ci-caps")[0].get_offsets()
    assert len(caps) == 4  # the two uncut bars keep both caps; the cut one has arrowheads instead


def test_the_legends_stand_outside_the_axes_and_over_no_point() -> None:
    rows = [_row(e, label=f"r{i}", nbytes=(8 << 16) << (i % 9)) for i, e in enumerate([0.2, 0.5, 0.9, 1.0] * 6)]
    fig, renderer, ax = _drawn(rows)
    assert len(fig.legends) >= 2 and not ax.get_legend()
    axes_box = ax.get_window_extent(renderer)
    points = _point_pixels(ax)
    assert len(points) == len(rows)
    for legend in fig.legends:
        lb = legend.get_window_extent(renderer)
        assert not lb.overlaps(axes_box), legend.get_title().get_text()
        assert not any(lb.x0 - 5 <= x <= lb.x1 + 5 and lb.y0 - 5 <= y <= lb.y1 + 5 for x, y in points)
        assert _inside(lb, fig.bbox)


def test_two_roofs_at_one_height_are_one_line_naming_both() -> None:
    """cpu.fp32 and cpu.fp32_matmul both at 238 GFLOP/s drew one line of two alternating colours."""
    fig, _, ax = _drawn([_row(0.9, label="a")])
    at_peak = [ln for ln in ax.lines if len(ln.get_ydata()) and np.allclose(ln.get_ydata(), 238e9, rtol=0.011)]
    assert len(at_peak) == 1
    assert at_peak[0].get_label() == "cpu.fp32 = cpu.fp32_matmul theoretical 238 GFLOP/s"
    effective = [ln for ln in ax.lines if len(ln.get_ydata()) and np.allclose(ln.get_ydata(), 0.8 * 238e9)]
    assert [ln.get_label() for ln in effective] == ["cpu.fp32 = cpu.fp32_matmul effective 190 GFLOP/s"]
    legend_texts = [t.get_text() for leg in fig.legends for t in leg.get_texts()]
    assert "cpu.fp32 = cpu.fp32_matmul theoretical 238 GFLOP/s" in legend_texts
    # roofs apart keep a line each; roofs a line's width apart on the plot are one line with each value
    apart = make_profile(name="apart", bw_theoretical=40e9, bw_calibration=0.5,
                         roofs={"cpu.fp32": (238e9, 0.8), "cpu.fp32_matmul": (120e9, 0.8)})
    _, _, ax2 = _drawn([_row(0.9, label="a")], apart)
    flat = [ln for ln in ax2.lines if len(set(ln.get_ydata())) == 1 and ln.get_label().startswith("cpu.")]
    assert len(flat) == 4
    near = PlotCeilings(bw_theo=None, bw_eff=None, nominal_unknown=False,
                        roofs=[("cpu.fp32", 236e9, 193e9), ("cpu.fp32_matmul", 236e9, 198e9)])
    assert [ln.label for ln in near.lines()] == ["cpu.fp32 = cpu.fp32_matmul theoretical 236 GFLOP/s",
                                                 "cpu.fp32 effective 193 GFLOP/s",
                                                 "cpu.fp32_matmul effective 198 GFLOP/s"]
    merged = near.lines(close=0.03)
    assert merged[-1].label == "cpu.fp32 ≈ cpu.fp32_matmul effective 193 GFLOP/s ≈ 198 GFLOP/s"
    assert 193e9 < merged[-1].value < 198e9


def _marks_at(ax, x: float, y: float) -> set[str]:
    """The gids of the scatters drawn at data point (x, y)."""
    return {c.get_gid() for c in ax.collections if c.get_gid() and
            np.any(np.all(np.isclose(np.asarray(c.get_offsets()), [x, y], rtol=1e-9), axis=1))}


def test_anomalies_and_breaches_have_their_own_marks_and_an_unstable_row_is_hollow() -> None:
    """A row at 134 % of the memory roof looked like the rest; here it carries the anomaly's diamond, stable or
    not, and a breach the red ring; a normal row neither."""
    rows = [_row(0.9, label="normal"), _row(1.34, label="anomaly", intensity=0.5),
            _row(1.34, label="unstable-anomaly", intensity=2.0, spread=(0.7, 1.6)),
            _row(1000.0, label="breach", intensity=0.03125)]
    priced = price_all(rows, ProfileChooser.only(PROFILE))
    assert [p.verdict for p in priced] == ["at-ceiling", "anomaly", "unstable", "anomaly"]
    assert priced[3].breaches and not priced[2].breaches
    fig, _, ax = _drawn(rows)
    where = {r.label: (r.flops / r.bytes, r.flops / r.timing.actual_time_s) for r in rows}
    marks = {label: _marks_at(ax, *xy) for label, xy in where.items()}
    assert marks["normal"] == {"points-torch-at-ceiling"}
    assert marks["anomaly"] == {"points-torch-anomaly", "anomaly-marks"}
    assert marks["unstable-anomaly"] == {"points-torch-anomaly-unstable", "anomaly-marks"}
    assert marks["breach"] == {"points-torch-anomaly", "breach-rings"}
    normal, diamond, ring = (next(c for c in ax.collections if c.get_gid() == g)
                             for g in ("points-torch-at-ceiling", "anomaly-marks", "breach-rings"))
    assert not np.allclose(diamond.get_paths()[0].vertices[:4], normal.get_paths()[0].vertices[:4])
    assert ring.get_edgecolor()[0][0] == 1.0 and ring.get_sizes()[0] > normal.get_sizes()[0]
    hollow = next(c for c in ax.collections if c.get_gid() == "points-torch-anomaly-unstable")
    assert np.allclose(hollow.get_facecolor()[0][:3], 1.0)  # white inside: unstable
    assert not np.allclose(hollow.get_edgecolor()[0][:3], 1.0)  # its rim in its reading's colour
    key = {t.get_text() for leg in fig.legends for t in leg.get_texts()}
    assert {"anomaly (above 105 % of its roof)", "FORMULA ERROR (physics breach)",
            "hollow: unstable (its colour: what its median reads)"} <= key


def test_a_busy_host_where_every_row_is_unstable_still_shows_each_rows_reading() -> None:
    """On a busy host every point was the same orange. Every row unstable: the points are hollow, in the colour
    of what each reads (below, at-ceiling, above its roof), and the 134 % row keeps its diamond."""
    wide = (0.6, 1.8)
    rows = [_row(0.3, label="slow", spread=wide), _row(0.9, label="fast", nbytes=8 << 22, spread=wide),
            _row(1.34, label="over", nbytes=8 << 24, spread=wide), _row(0.2, label="gemm", op="gemm",
                                                                      nbytes=8 << 18, spread=wide)]
    priced = price_all(rows, ProfileChooser.only(PROFILE))
    assert {p.verdict for p in priced} == {"unstable"}
    fig, _, ax = _drawn(rows)
    points = _by_gid(ax, "points-")
    assert {c.get_gid() for c in points} == {"points-torch-below-unstable", "points-torch-at-ceiling-unstable",
                                             "points-torch-anomaly-unstable"}
    rims = {tuple(np.round(c.get_edgecolor()[0][:3], 3)) for c in points}
    assert len(rims) == 3 and all(np.allclose(c.get_facecolor()[:, :3], 1.0) for c in points)
    assert _by_gid(ax, "anomaly-marks")[0].get_offsets().shape[0] == 1
    key = [t.get_text() for leg in fig.legends for t in leg.get_texts()]
    assert "below (under 80 %)" in key and "at-ceiling (80 % of its roof or more)" in key


def _crowd() -> list:
    """Thirty rows in three tight clusters, as a run of one op over sizes and dtypes gives: ids used to pile
    into one text (``11,12,21,24,25,27``)."""
    rows = []
    for i in range(30):
        eff = 0.5 + 0.01 * (i % 10)
        size = (8 << 20) * (1 + i // 10) ** 3  # formula-guard: allow three clusters of synthetic sizes, not an op's bytes
        rows.append(_row(eff, label=f"c{i}", nbytes=size, dtype=("float32", "bfloat16")[i % 2]))
    return rows


def test_no_two_ids_overlap_and_every_labelled_point_is_named() -> None:
    fig, renderer, ax = _drawn(_crowd())
    labels = [t for t in ax.texts if t.get_gid() == "point-id"]
    assert labels
    boxes = [t.get_window_extent(renderer) for t in labels]
    for (i, a), (j, b) in itertools.combinations(enumerate(boxes), 2):
        assert not a.overlaps(b), (labels[i].get_text(), labels[j].get_text())
    axes_box = ax.get_window_extent(renderer)
    assert all(_inside(b, axes_box) for b in boxes)
    named = {int(part) for t in labels for part in t.get_text().replace("\n", "").split(",")}
    assert named == set(range(1, 31))  # a small run: every point is named, no id is dropped
    assert max(len(t.get_text().replace("\n", "").split(",")) for t in labels) <= 3  # only same-spot points share


def test_label_placement_keeps_boxes_apart_and_inside_however_crowded() -> None:
    rng = np.random.default_rng(37)
    anchors = [(i, float(x), float(y), 0.05) for i, (x, y) in enumerate(rng.uniform([3, 2], [4, 3], (60, 2)))]
    placed = place_labels(anchors, [(x, y, r) for _, x, y, r in anchors], lambda s: (0.08 * len(s), 0.14),
                          (9.5, 6.2))
    assert sum(len(p.text.split(",")) for p in placed) == 60
    for a, b in itertools.combinations([p.box for p in placed], 2):
        assert a[2] <= b[0] or b[2] <= a[0] or a[3] <= b[1] or b[3] <= a[1]
    assert all(0 <= p.box[0] and p.box[2] <= 9.5 and 0 <= p.box[1] and p.box[3] <= 6.2 for p in placed)
    assert any(p.leader for p in placed)  # a crowd pushes labels off their points: a line joins them back


def test_nothing_is_cut_every_text_inside_the_saved_figure(tmp_path: Path) -> None:
    """A side-table entry was cut ("not placed: 0 FLOPs (off a log ax…"). Long labels and verdicts wrap; the
    figure grows to hold the table, the legends and the ticks; every text lies inside it, and the PNG is the
    figure's full size."""
    rows = _crowd() + [
        make_record(op="cast", label="identity-with-a-label-far-longer-than-its-column-allows", flops=0,
                    bytes=8 << 20, median_s=1e-3),
        make_record(op="mul", label="broken", status="error"),
        _row(1000.0, label="inflated", nbytes=8 << 18),
    ]
    fig, renderer, _ = _drawn(rows)
    texts = [t for t in fig.findobj(Text) if t.get_visible() and t.get_text().strip()]
    assert len(texts) > 60
    for t in texts:
        assert _inside(t.get_window_extent(renderer), fig.bbox), t.get_text()
    joined = " ".join(t.get_text() for t in texts)
    assert "…" not in joined
    assert "0 FLOPs (off a log" in joined and "axis))" in joined
    assert "identity-with-a-label-far-" in joined and "longer-than-its-column-allows" in joined
    for legend in fig.legends:
        assert _inside(legend.get_window_extent(renderer), fig.bbox)
    from PIL import Image

    png, _ = write_plot(price_all(rows, ProfileChooser.only(PROFILE)), PROFILE, tmp_path)
    w_in, h_in = fig.get_size_inches()
    assert Image.open(png).size == (round(w_in * fig.dpi), round(h_in * fig.dpi))
