"""Checks of a figure as a reviewer of a two-column paper reads it.

:func:`lib.plots.savefig` keeps every figure it saves (``figures/<name>.pickle``, with its caption and
notebook cell). :func:`record` draws it once more, noting every text it draws, and writes
``figures/<name>.json``: the printed size, the smallest text, the caption, the notebook cell and the
problems found:

- **width**: wider than the full text width (:data:`WIDTH_DOUBLE`, 7.0 in), content drawn outside
  the figure's canvas (the saved file is wider than designed), taller than a page (:data:`MAX_HEIGHT`);
- **text size**: any text under :data:`MIN_FONT_PT` at print size (a wider figure is shrunk to fit);
- **overlap**: two pieces of text whose boxes overlap;
- **labels**: an axis with tick labels but no label (its own or the figure's), an axis that writes a
  scale or offset (``1e21``) beside its ticks, no caption, a title drawn inside the figure (the
  paper's caption carries it: :func:`lib.plots.title` records one without drawing it);
- **legends on data**: a legend whose box covers a data point, line, bar or heat-map cell;
- **print**: legend entries that print alike in greyscale (same marker, line, fill and hatch, greys
  closer than :data:`GREY_STEP`), a legend entry's line wholly under another line, bars on a log
  axis, text outside the canvas, a panel title that repeats the figure's title.

:mod:`runner.contactsheet` asks for the records (``make check-figures``, and the runner at the end of a
profile's run); a record is made the first time it is asked for and again after the figure is saved again.
"""

from __future__ import annotations

import datetime
import json
import pickle
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.backends.backend_agg import RendererAgg
from matplotlib.collections import Collection, LineCollection, PathCollection, QuadMesh
from matplotlib.colors import to_rgba
from matplotlib.container import BarContainer
from matplotlib.lines import Line2D
from matplotlib.offsetbox import DrawingArea
from matplotlib.patches import Patch
from matplotlib.text import Text
from matplotlib.transforms import Bbox
from PIL import Image

from lib.plots import MIN_FONT_PT, WIDTH_DOUBLE, WIDTH_SINGLE
from lib.util import atomic_write_json

MAX_HEIGHT = 9.0         # in: the text height of a page
OVERLAP_PT = 0.5         # text boxes may touch by this much (glyph boxes include line spacing)
SPILL_IN = 0.06          # saved width may exceed the designed width by the padding and rounding
SHEET = "figures.html"
GREY_STEP = 0.1          # legend entries alike in all else must differ by this much in luma (0..1)


# --------------------------------------------------------------------------- drawing and measuring
def _drawn_texts(fig):
    """Draw ``fig`` and note each text that draws itself (visible, not empty, inside the view):
    (renderer, [(text artist, string, size in points)]) in drawing order."""
    seen: dict[int, tuple] = {}
    original = Text.draw

    def draw(self, renderer):
        result = original(self, renderer)
        if self.get_visible() and str(self.get_text()).strip() and id(self) not in seen:
            seen[id(self)] = (self, str(self.get_text()), float(self.get_fontsize()))
        return result

    width, height = fig.get_size_inches() * fig.dpi
    renderer = RendererAgg(width, height, fig.dpi)
    Text.draw = draw
    try:
        fig.draw(renderer)
    finally:
        Text.draw = original
    return renderer, list(seen.values())


def _short(text: str, n: int = 28) -> str:
    one = " ".join(text.split())
    return repr(one if len(one) <= n else one[: n - 1] + "…")


def _where(ax, fig) -> str:
    title = ax.get_title() or ax.get_title(loc="left")
    k = fig.axes.index(ax) + 1
    return f"panel {k}" + (f" ({_short(title, 24)})" if title else "")


def _boxes(texts, renderer) -> list:
    """(string, window extent) of each drawn text that has one."""
    boxes = []
    for artist, text, _ in texts:
        try:
            boxes.append((text, artist.get_window_extent(renderer)))
        except (RuntimeError, ValueError):
            continue
    return boxes


def _overlaps(boxes, tol_px: float) -> list[str]:
    out = []
    for i, (ta, a) in enumerate(boxes):
        for tb, b in boxes[i + 1:]:
            w = min(a.x1, b.x1) - max(a.x0, b.x0)
            h = min(a.y1, b.y1) - max(a.y0, b.y0)
            if w > tol_px and h > tol_px:
                out.append(f"text {_short(ta)} overlaps {_short(tb)}")
    return out


def _unlabelled(fig, drawn_ids: set[int]) -> list[str]:
    out = []
    sup = {"x": getattr(fig, "_supxlabel", None), "y": getattr(fig, "_supylabel", None)}
    for ax in fig.axes:
        if not ax.get_visible() or not ax.axison:
            continue
        for name, axis in (("x", ax.xaxis), ("y", ax.yaxis)):
            ticks = axis.get_ticklabels(which="both")
            if not any(id(t) in drawn_ids for t in ticks):
                continue
            label = axis.label
            has_own = id(label) in drawn_ids
            has_sup = sup[name] is not None and id(sup[name]) in drawn_ids
            if not (has_own or has_sup):
                out.append(f"{_where(ax, fig)}: the {name} axis has tick labels but no label")
            offset = axis.get_offset_text()
            if id(offset) in drawn_ids:
                out.append(f"{_where(ax, fig)}: the {name} axis writes {_short(offset.get_text())} beside its "
                           "ticks (put the scale into the label)")
    return out


def _data_paths(ax):
    """What an axes draws as data, in display coordinates: points, paths and boxes."""
    for line in ax.get_lines():
        if not line.get_visible():
            continue
        xy = line.get_transform().transform(np.asarray(line.get_xydata(), float))
        xy = xy[np.isfinite(xy).all(axis=1)]
        if line.get_linestyle() in ("None", "none", "", " "):
            yield ("points", xy)
        else:
            path = line.get_transform().transform_path(line.get_path()).cleaned(remove_nans=True)
            yield ("path", path, False)
            if line.get_marker() not in (None, "None", "none", "", " "):
                yield ("points", xy)
    for coll in ax.collections:
        if not coll.get_visible():
            continue
        if isinstance(coll, PathCollection):          # scatter: one marker per offset
            offsets = coll.get_offset_transform().transform(np.asarray(coll.get_offsets(), float))
            yield ("points", offsets[np.isfinite(offsets).all(axis=1)])
        elif isinstance(coll, LineCollection):        # error bars, segments
            for path in coll.get_paths():
                yield ("path", coll.get_transform().transform_path(path).cleaned(remove_nans=True), False)
        elif isinstance(coll, QuadMesh):              # heat maps
            yield ("box", coll.get_window_extent())
    for patch in ax.patches:
        if patch.get_visible() and patch is not ax.patch:
            path = patch.get_transform().transform_path(patch.get_path())
            if len(path.vertices) and np.ptp(path.vertices, axis=0).min() > 0:
                yield ("path", path, True)
    for image in ax.images:
        if image.get_visible():
            yield ("box", image.get_window_extent())


def _covers(item, clip) -> bool:
    """Whether data item ``item`` of :func:`_data_paths` reaches into the box ``clip``."""
    if item[0] == "points":
        xy = item[1]
        inside = (xy[:, 0] > clip.x0) & (xy[:, 0] < clip.x1) & (xy[:, 1] > clip.y0) & (xy[:, 1] < clip.y1)
        return bool(inside.any())
    if item[0] == "path":
        return len(item[1].vertices) > 0 and item[1].intersects_bbox(clip, filled=item[2])
    return Bbox.intersection(item[1], clip) is not None


def _legends_on_data(fig, renderer) -> list[str]:
    out = []
    for legend in _legends(fig):
        box = legend.get_window_extent(renderer)
        for ax in fig.axes:
            if not ax.get_visible():
                continue
            clip = Bbox.intersection(box, ax.get_window_extent(renderer))
            if clip is None or clip.width <= 1 or clip.height <= 1:
                continue
            if any(_covers(item, clip) for item in _data_paths(ax)):
                where = "the figure" if legend.parent is fig else _where(legend.parent, fig)
                out.append(f"the legend of {where} covers data of {_where(ax, fig)}")
    return out


def _luma(color, alpha=None) -> float:
    """Grey level (0 black .. 1 white) of ``color`` printed on white (Rec. 601 luma)."""
    r, g, b, a = to_rgba(color, alpha)
    return 1 - a * (1 - (0.299 * r + 0.587 * g + 0.114 * b))


def _print_style(artists):
    """What tells a legend entry apart on a greyscale page: (shape, grey), shape being the marker, line
    style and width, hollowness and hatch; None for an entry that draws nothing."""
    lines = [a for a in artists if isinstance(a, Line2D)]
    if lines:
        drawn = [a for a in lines if a.get_linestyle() not in ("None", "none", "") and a.get_linewidth() > 0]
        marked = [a for a in lines if str(a.get_marker()) not in ("None", "none", "") and a.get_markersize() > 0]
        if not drawn and not marked:
            return None
        line, mark = (drawn or [None])[0], (marked or [None])[-1]       # error bars draw their caps first
        ls = str(getattr(line, "_unscaled_dash_pattern", line.get_linestyle())) if line else "None"  # tuples read "--"
        hollow = mark is not None and str(mark.get_markerfacecolor()).lower() == "none"
        shape = (str(mark.get_marker()) if mark else "None", ls, round(line.get_linewidth()) if line else 0, hollow, "")
        color = line.get_color() if line else mark.get_markeredgecolor()
        return shape, _luma(color, (line or mark).get_alpha())
    for a in artists:
        if isinstance(a, Patch):
            hollow = a.get_fill() is False
            grey = _luma(a.get_edgecolor() if hollow else a.get_facecolor())
            return ("patch", "", 0, hollow, a.get_hatch() or ""), grey
        if isinstance(a, Collection) and not isinstance(a, LineCollection) and len(a.get_paths()):
            faces = a.get_facecolor()
            hollow = len(faces) == 0 or faces[0][3] == 0
            shape = a.get_paths()[0].vertices.round(2).tobytes()
            color = (a.get_edgecolor()[:1] if hollow else faces[:1])
            return (shape, "", 0, hollow, a.get_hatch() or ""), _luma(color[0] if len(color) else "none", a.get_alpha())
    return None


def _legends(fig):
    return [leg for leg in [ax.get_legend() for ax in fig.axes] + list(fig.legends)
            if leg is not None and leg.get_visible()]


def _alike_in_grey(fig) -> list[str]:
    out = []
    for legend in _legends(fig):
        boxes = legend.findobj(DrawingArea)          # one handle box per entry, in the order of the texts
        entries = [(t.get_text(), _print_style(box.get_children())) for t, box in zip(legend.get_texts(), boxes)]
        entries = [(text, style) for text, style in entries if style is not None]
        for i, (ta, (shape_a, grey_a)) in enumerate(entries):
            for tb, (shape_b, grey_b) in entries[i + 1:]:
                if shape_a == shape_b and abs(grey_a - grey_b) < GREY_STEP:
                    out.append(f"legend entries {_short(ta)} and {_short(tb)} print alike in greyscale (greys "
                               f"{grey_a:.2f} and {grey_b:.2f}, same marker and line): differ in marker, line "
                               "style, fill or lightness")
    return out


def _hidden_lines(fig) -> list[str]:
    """Legend entries whose line is drawn wholly under a solid line at least as wide, drawn above it."""
    named = {t.get_text() for legend in _legends(fig) for t in legend.get_texts()}
    out = []
    for ax in fig.axes:
        lines = [ln for ln in ax.get_lines() if ln.get_visible() and ln.get_linestyle() not in ("None", "none", "")]
        order = {id(ln): (ln.get_zorder(), k) for k, ln in enumerate(lines)}
        for a in lines:
            if a.get_label() not in named:
                continue
            pts = a.get_transform().transform(np.asarray(a.get_xydata(), float))
            pts = pts[np.isfinite(pts).all(axis=1)]
            if len(pts) > 1:       # points along each segment too, not only its ends
                t = np.linspace(0, 1, 6)[:, None, None]
                pts = (pts[:-1] * (1 - t) + pts[1:] * t).reshape(-1, 2)
            width_a = a.get_linewidth() * fig.dpi / 72
            for b in lines:
                if b is a or order[id(b)] < order[id(a)] or b.get_linestyle() not in ("-", "solid"):
                    continue
                width_b = b.get_linewidth() * fig.dpi / 72
                seg = b.get_transform().transform(np.asarray(b.get_xydata(), float))
                seg = seg[np.isfinite(seg).all(axis=1)]
                if len(pts) == 0 or len(seg) < 2 or width_b < width_a:
                    continue
                p0, d = seg[:-1], np.diff(seg, axis=0)
                rel = pts[:, None, :] - p0[None]
                s = np.clip((rel * d).sum(-1) / np.maximum((d * d).sum(-1), 1e-12), 0, 1)
                dist = np.linalg.norm(rel - s[..., None] * d, axis=-1).min(axis=1)
                if (dist <= (width_b - width_a) / 2 + 0.5).all():
                    out.append(f"{_where(ax, fig)}: the line of legend entry {_short(a.get_label())} is hidden "
                               f"under {_short(b.get_label())}")
                    break
    return out


def _bars_on_log_axes(fig) -> list[str]:
    out = []
    for ax in fig.axes:
        for bars in ax.containers:
            if not isinstance(bars, BarContainer):
                continue
            scale = ax.get_yscale() if getattr(bars, "orientation", "vertical") == "vertical" else ax.get_xscale()
            if scale != "linear":
                out.append(f"{_where(ax, fig)}: bars on a {scale} axis (a bar's length means nothing there; "
                           "draw points or use a linear axis)")
                break
    return out


def _outside(fig, boxes) -> list[str]:
    canvas, out = fig.bbox, []
    for text, box in boxes:
        if box.x0 < canvas.x0 - 1 or box.y0 < canvas.y0 - 1 or box.x1 > canvas.x1 + 1 or box.y1 > canvas.y1 + 1:
            out.append(f"text {_short(text)} drawn outside the canvas (cut off, or it widens the saved file)")
    return out


def inspect(fig) -> dict:
    """Draw ``fig`` and measure it: smallest text (pt, at the figure's own size), the texts drawn,
    the title, and the problems that do not depend on the saved file (overlap, labels, legends)."""
    renderer, texts = _drawn_texts(fig)
    drawn = {id(a) for a, _, _ in texts}
    boxes = _boxes(texts, renderer)
    problems = _overlaps(boxes, OVERLAP_PT * fig.dpi / 72.0)
    problems += _unlabelled(fig, drawn)
    problems += _legends_on_data(fig, renderer)
    problems += _alike_in_grey(fig) + _hidden_lines(fig) + _bars_on_log_axes(fig) + _outside(fig, boxes)
    sup = getattr(fig, "_suptitle", None)
    if sup is not None and id(sup) in drawn and sup.get_text():
        problems.append("a title drawn inside the figure (suptitle): the paper's caption carries it; give it to "
                        "lib.plots.title, which records it without drawing it")
    title = getattr(fig, "_tbt_title", "")
    panels = [ax.get_title() for ax in fig.axes if ax.get_visible() and ax.get_title() and id(ax.title) in drawn]
    if title and any(" ".join(p.split()) == title for p in panels):
        problems.append("a title drawn inside the figure (a panel title repeats the figure's title)")
    return {"texts": [(t, size) for _, t, size in texts], "title": title, "panel_titles": panels,
            "problems": problems}


def record(png: str | Path) -> dict:
    """The record of the figure saved as ``png`` (``<name>.json``): made from ``<name>.pickle`` when
    there is none or the figure was saved since; {} for a figure saved without :func:`lib.plots.savefig`."""
    png = Path(png)
    path, kept = png.with_suffix(".json"), png.with_suffix(".pickle")
    if path.exists() and (not kept.exists() or kept.stat().st_mtime_ns <= path.stat().st_mtime_ns):
        return json.loads(path.read_text())
    if not kept.exists():
        return {}
    with open(kept, "rb") as f, plt.rc_context(pickle.load(f)):     # the style first: the figure's ticks use it
        saved = pickle.load(f)
        try:
            out = _measure(saved["figure"], png, saved["caption"], saved["cell"])
        finally:
            plt.close(saved["figure"])
    atomic_write_json(path, out)
    return out


def _measure(fig, png: Path, caption: str | None, cell: int | None) -> dict:
    """A saved figure's printed size (from its PNG), smallest text and problems."""
    info = inspect(fig)
    with Image.open(png) as im:
        px_w, px_h = im.size
        dpi = float((im.info.get("dpi") or (fig.dpi, fig.dpi))[0])
    width, height = px_w / dpi, px_h / dpi
    designed = [float(v) for v in fig.get_size_inches()]
    scale = min(1.0, WIDTH_DOUBLE / width)
    problems = []
    if width > WIDTH_DOUBLE + 0.01:
        problems.append(f"{width:.2f} in wide: wider than the full text width ({WIDTH_DOUBLE} in); printed at "
                        f"{100 * scale:.0f} %")
    if width > designed[0] + SPILL_IN:
        problems.append(f"content drawn outside the canvas: saved {width:.2f} in wide, designed {designed[0]:.2f} in")
    if height > MAX_HEIGHT:
        problems.append(f"{height:.2f} in tall: taller than a page ({MAX_HEIGHT} in)")
    small = sorted((size * scale, text) for text, size in info["texts"] if size * scale < MIN_FONT_PT - 1e-6)
    if small:
        listed = ", ".join(f"{_short(t, 20)} {s:.1f} pt" for s, t in small[:3])
        problems.append(f"{len(small)} text(s) under {MIN_FONT_PT:g} pt at print size: {listed}")
    if not caption:
        problems.append("no caption (lib.plots.set_caption)")
    sizes = [size * scale for _, size in info["texts"]]
    return {
        "name": png.stem, "stage": png.parent.parent.name,
        "title": info["title"] or (caption or "").split(". ")[0].rstrip("."), "caption": caption or "",
        "cell": cell,
        "width_in": round(width, 3), "height_in": round(height, 3), "designed_in": [round(v, 3) for v in designed],
        "fits": "one column" if width <= WIDTH_SINGLE + 0.01 else "full width" if width <= WIDTH_DOUBLE + 0.01
                else "too wide",
        "min_font_pt": round(min(sizes), 2) if sizes else None, "n_texts": len(sizes),
        "problems": info["problems"] + problems,
        "checked": datetime.datetime.now().isoformat(timespec="seconds"),
    }
