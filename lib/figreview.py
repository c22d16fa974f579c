"""Checks of a figure as a reviewer of a two-column paper reads it, and a contact sheet of a profile.

:func:`lib.plots.savefig` calls :func:`record` on every figure it saves: the figure is drawn once
more with a renderer that notes every piece of text it draws, and the record (next to the PNG as
``figures/<name>.json``) holds the printed size, the smallest text at print size, the caption, the
notebook cell and the problems found:

- **width**: wider than the full text width (:data:`lib.plots.WIDTH_DOUBLE`, 7.0 in), or content
  drawn outside the figure's own canvas (a legend or label pushed out makes the saved file wider than
  the width the figure was designed for); taller than a page (:data:`MAX_HEIGHT`);
- **text size**: any text under :data:`lib.plots.MIN_FONT_PT` at print size (a figure wider than
  7.0 in is shrunk to fit, and its text with it);
- **overlap**: two pieces of text whose boxes (matplotlib's window extents after drawing) overlap;
- **labels**: an axis with tick labels but no label (its own, or the figure's ``supxlabel`` /
  ``supylabel``), an axis that writes a scale or offset (``1e21``) beside its ticks, a figure without
  a caption (:func:`lib.plots.set_caption`), and a title drawn inside the figure (a suptitle: the paper's
  caption carries it; :func:`lib.plots.title` records one without drawing it, else the caption's first
  sentence is the figure's title on the pages);
- **legends on data**: a legend whose box covers a data point, line, bar or heat-map cell.

:mod:`runner.contactsheet` reads the records back (``make check-figures``) and shows every figure at
its print size.
"""

from __future__ import annotations

import datetime
from pathlib import Path

from .util import atomic_write_json

WIDTH_SINGLE = 3.4   # inches: one column of a two-column paper
WIDTH_DOUBLE = 7.0   # inches: the full text width
MIN_FONT_PT = 7.0    # no text smaller than this at print size

MAX_HEIGHT = 9.0         # in: the text height of a page
OVERLAP_PT = 0.5         # text boxes may touch by this much (glyph boxes include line spacing)
SPILL_IN = 0.06          # saved width may exceed the designed width by the padding and rounding
SHEET = "figures.html"


# --------------------------------------------------------------------------- drawing and measuring
def _drawn_texts(fig):
    """Draw ``fig`` and note each text artist that draws itself (visible, not empty, inside the view:
    tick labels of ticks outside the axis limits are never drawn): (renderer, [(text artist, string,
    size in points)]) in drawing order."""
    from matplotlib.backends.backend_agg import RendererAgg
    from matplotlib.text import Text

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


def _overlaps(texts, renderer, tol_px: float) -> list[str]:
    boxes = []
    for artist, text, _ in texts:
        try:
            boxes.append((text, artist.get_window_extent(renderer)))
        except (RuntimeError, ValueError):
            continue
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
    """What an axes draws as data, in display coordinates: ("points", array) or ("path", path, filled)
    or ("box", bbox)."""
    import numpy as np
    from matplotlib.collections import LineCollection, PathCollection, QuadMesh

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


def _legends_on_data(fig, renderer) -> list[str]:
    from matplotlib.transforms import Bbox

    legends = [(ax.get_legend(), ax) for ax in fig.axes if ax.get_legend() is not None]
    legends += [(leg, None) for leg in fig.legends]
    out = []
    for legend, owner in legends:
        if not legend.get_visible():
            continue
        box = legend.get_window_extent(renderer)
        for ax in fig.axes:
            if not ax.get_visible():
                continue
            clip = Bbox.intersection(box, ax.get_window_extent(renderer))
            if clip is None or clip.width <= 1 or clip.height <= 1:
                continue
            hit = False
            for item in _data_paths(ax):
                if item[0] == "points":
                    xy = item[1]
                    hit = bool(((xy[:, 0] > clip.x0) & (xy[:, 0] < clip.x1) & (xy[:, 1] > clip.y0)
                                & (xy[:, 1] < clip.y1)).any()) if len(xy) else False
                elif item[0] == "path":
                    hit = len(item[1].vertices) > 0 and item[1].intersects_bbox(clip, filled=item[2])
                else:
                    hit = Bbox.intersection(item[1], clip) is not None
                if hit:
                    break
            if hit:
                where = _where(owner, fig) if owner is not None else "the figure"
                out.append(f"the legend of {where} covers data of {_where(ax, fig)}")
    return out


def inspect(fig) -> dict:
    """Draw ``fig`` and measure it: smallest text (pt, at the figure's own size), the texts drawn,
    the title, and the problems that do not depend on the saved file (overlap, labels, legends)."""
    renderer, texts = _drawn_texts(fig)
    drawn = {id(a) for a, _, _ in texts}
    problems = _overlaps(texts, renderer, OVERLAP_PT * fig.dpi / 72.0)
    problems += _unlabelled(fig, drawn)
    problems += _legends_on_data(fig, renderer)
    sup = getattr(fig, "_suptitle", None)
    if sup is not None and id(sup) in drawn and sup.get_text():
        problems.append("a title drawn inside the figure (suptitle): the paper's caption carries it; give it to "
                        "lib.plots.title, which records it without drawing it")
    title = getattr(fig, "_tbt_title", "")
    panels = [ax.get_title() for ax in fig.axes if ax.get_visible() and ax.get_title() and id(ax.title) in drawn]
    return {"texts": [(t, size) for _, t, size in texts], "title": title, "panel_titles": panels,
            "problems": problems}


def _cell() -> int | None:
    """The execution count of the notebook cell running now (None outside IPython)."""
    try:
        from IPython import get_ipython
    except ImportError:
        return None
    ip = get_ipython()
    return int(ip.execution_count) if ip is not None and getattr(ip, "execution_count", None) else None


def record(fig, png: str | Path, caption: str | None = None) -> dict:
    """The record of a figure just saved as ``png`` (and its PDF): size as saved, smallest text at
    print size, title, caption, notebook cell and every problem found."""
    from PIL import Image

    png = Path(png)
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
        "cell": _cell(),
        "width_in": round(width, 3), "height_in": round(height, 3), "designed_in": [round(v, 3) for v in designed],
        "fits": "one column" if width <= WIDTH_SINGLE + 0.01 else "full width" if width <= WIDTH_DOUBLE + 0.01
                else "too wide",
        "min_font_pt": round(min(sizes), 2) if sizes else None, "n_texts": len(sizes),
        "problems": info["problems"] + problems,
        "checked": datetime.datetime.now().isoformat(timespec="seconds"),
    }


def write_record(path: str | Path, rec: dict) -> None:
    atomic_write_json(path, rec)
