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
  a title or without a caption (:func:`lib.plots.set_caption`);
- **legends on data**: a legend whose box covers a data point, line, bar or heat-map cell.

:func:`check` reads the records of a profile's (or one stage's) figures and returns the problems,
plus those it sees itself (a PNG without PDF or record, a record older than its PNG, a PDF page wider
than 7.0 in). :func:`contact_sheet` writes ``outputs/<profile>/figures.html``: every figure at its
print size with its caption, notebook and checks. ``python -m lib.figreview PROFILE`` (``make
check-figures``) does both and exits 1 when a figure has a problem.
"""

from __future__ import annotations

import argparse
import datetime
import html
import json
import re
import sys
from pathlib import Path

from . import paths
from .util import atomic_write_json, atomic_write_text

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
    titles = [sup.get_text()] if sup is not None and id(sup) in drawn else []
    titles += [ax.get_title() for ax in fig.axes if ax.get_visible() and ax.get_title() and id(ax.title) in drawn]
    if not titles:
        problems.append("no title (a suptitle or a panel title that can start the caption)")
    return {"texts": [(t, size) for _, t, size in texts], "title": titles[0] if titles else "",
            "panel_titles": titles[1:] if sup is not None and titles else titles, "problems": problems}


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
        "title": info["title"], "caption": caption or "", "cell": _cell(),
        "width_in": round(width, 3), "height_in": round(height, 3), "designed_in": [round(v, 3) for v in designed],
        "fits": "one column" if width <= WIDTH_SINGLE + 0.01 else "full width" if width <= WIDTH_DOUBLE + 0.01
                else "too wide",
        "min_font_pt": round(min(sizes), 2) if sizes else None, "n_texts": len(sizes),
        "problems": info["problems"] + problems,
        "checked": datetime.datetime.now().isoformat(timespec="seconds"),
    }


def write_record(path: str | Path, rec: dict) -> None:
    atomic_write_json(path, rec)


# --------------------------------------------------------------------------- checking saved figures
def _pdf_width_in(pdf: Path) -> float | None:
    """Width of the first page of a matplotlib PDF (its MediaBox), in inches."""
    m = re.search(rb"/MediaBox\s*\[\s*([-\d.]+)\s+([-\d.]+)\s+([-\d.]+)\s+([-\d.]+)\s*\]", pdf.read_bytes())
    return (float(m.group(3)) - float(m.group(1))) / 72.0 if m else None


def figures(where: str | Path) -> list[Path]:
    """The PNG figures under ``where`` (a profile's output folder or one stage's), stage by stage."""
    where = Path(where)
    if (where / "figures").is_dir():
        return sorted((where / "figures").glob("*.png"))
    return sorted(where.glob("[0-9][0-9]_*/figures/*.png"))


def check(where: str | Path) -> dict[str, list[str]]:
    """{``<stage>/<name>``: problems} for every figure under ``where`` (a profile's output folder, a
    stage's, or a profile name); an empty list means the figure passed every check."""
    where = Path(where) if Path(where).exists() or "/" in str(where) else paths.profile_dir(str(where))
    out: dict[str, list[str]] = {}
    for png in figures(where):
        key = f"{png.parent.parent.name}/{png.stem}"
        problems = []
        pdf, rec_path = png.with_suffix(".pdf"), png.with_suffix(".json")
        if not pdf.exists():
            problems.append("no PDF next to the PNG")
        else:
            w = _pdf_width_in(pdf)
            if w is None or w > WIDTH_DOUBLE + 0.01:
                problems.append(f"PDF page {w if w is None else round(w, 2)} in wide (at most {WIDTH_DOUBLE} in)")
        if not rec_path.exists():
            problems.append(f"no record {rec_path.name}: saved without lib.plots.savefig, or before the checks "
                            f"existed (`{paths.make_command(png.parent.parent)}` re-makes it)")
        else:
            rec = json.loads(rec_path.read_text())
            if rec_path.stat().st_mtime + 1 < png.stat().st_mtime:
                problems.append("record older than the PNG (the figure was saved another way)")
            problems += rec.get("problems", [])
        out[key] = problems
    return out


# --------------------------------------------------------------------------- contact sheet
_CSS = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 80em; color: #222; }
h1 { font-size: 1.4em; } h2 { font-size: 1.15em; margin-top: 2em; border-bottom: 1px solid #ccc; }
figure { margin: 1.5em 0; padding: 0.8em; border: 1px solid #e3e3e3; background: #fff; }
figure img { display: block; border: 1px dotted #bbb; }
figcaption { max-width: 7in; margin-top: 0.6em; font-size: 0.92em; line-height: 1.4; }
.meta { color: #555; font-size: 0.85em; } .ok { color: #2a7a2a; } .bad { color: #b22; }
ul.problems { margin: 0.3em 0; color: #b22; }
"""


def _stage_order(profile_dir: Path) -> list[str]:
    return sorted(p.name for p in profile_dir.glob("[0-9][0-9]_*") if (p / "figures").is_dir())


def _made_order(png: Path) -> tuple[int, str]:
    """A figure's place in its stage: the notebook cell that made it (its record), then its name."""
    rec = png.with_suffix(".json")
    cell = json.loads(rec.read_text()).get("cell") if rec.exists() else None
    return (cell if isinstance(cell, int) else 10 ** 6, png.stem)


def contact_sheet(profile: str, out: str | Path | None = None) -> Path:
    """Write ``outputs/<profile>/figures.html``: every figure of the profile at its print size (3.4 in
    is a column) with its title, caption, the notebook and cell that made it, its size and its checks,
    stage by stage in the order the notebooks make them, the order the README and docs/ read them in
    (04's heat maps of every benchmark pair, the README's headline figure, first)."""
    root = paths.profile_dir(profile)
    target = Path(out) if out else root / SHEET
    results = check(root)
    parts = [f"<!doctype html><meta charset='utf-8'><title>{html.escape(profile)}: figures</title>",
             f"<style>{_CSS}</style>", f"<h1>Figures of profile <code>{html.escape(profile)}</code></h1>"]
    n_bad = sum(bool(p) for p in results.values())
    parts.append(f"<p class='meta'>{len(results)} figures; "
                 + (f"<span class='bad'>{n_bad} with problems</span>" if n_bad else "<span class='ok'>every check "
                    "passed</span>")
                 + f". Shown at print size (one column = {WIDTH_SINGLE} in, full width = {WIDTH_DOUBLE} in); "
                 "click a figure for its PDF. Checks: <code>make check-figures PROFILE="
                 f"{html.escape(profile)}</code> (<code>lib/figreview.py</code>). Written "
                 f"{datetime.datetime.now():%Y-%m-%d %H:%M}.</p>")
    number = 0
    for stage in _stage_order(root):
        pngs = sorted(figures(root / stage), key=_made_order)
        if not pngs:
            continue
        nb = f"{stage}/{stage}.ipynb"
        parts.append(f"<h2 id='{stage}'>{html.escape(stage)} <span class='meta'>(notebook "
                     f"<code>notebooks/{stage}.ipynb</code>; executed: <a href='{nb}'>{nb}</a>)</span></h2>")
        for png in pngs:
            number += 1
            rec_path = png.with_suffix(".json")
            rec = json.loads(rec_path.read_text()) if rec_path.exists() else {}
            problems = results.get(f"{stage}/{png.stem}", [])
            rel = f"{stage}/figures/{png.name}"
            width = rec.get("width_in")
            style = f" style='width:{width}in'" if width else " style='max-width:7in'"
            cell = f", cell In [{rec['cell']}]" if rec.get("cell") else ""
            size = (f"{rec['width_in']:.2f} × {rec['height_in']:.2f} in ({rec.get('fits', '?')}), smallest text "
                    f"{rec.get('min_font_pt')} pt" if rec else "no record")
            status = ("<span class='ok'>checks passed</span>" if not problems else
                      "<span class='bad'>problems:</span><ul class='problems'>"
                      + "".join(f"<li>{html.escape(p)}</li>" for p in problems) + "</ul>")
            title = html.escape(rec.get("title") or png.stem)
            cap = html.escape(rec.get("caption") or "")
            parts.append(
                f"<figure id='{stage}-{png.stem}'><a href='{rel[:-4]}.pdf'><img src='{rel}'{style} "
                f"alt='{html.escape(png.stem)}'></a><figcaption><b>Figure {number}. {title}</b> {cap}<br>"
                f"<span class='meta'><code>{html.escape(png.stem)}</code> from <a href='{nb}'>{html.escape(stage)}"
                f".ipynb</a>{cell} · {size} · </span>{status}</figcaption></figure>")
    atomic_write_text(target, "\n".join(parts) + "\n")
    return target


def summary_line(profile: str, results: dict[str, list[str]]) -> str:
    bad = [k for k, v in results.items() if v]
    head = f"[{profile}] figures: {len(results)}"
    return head + (", every check passed" if not bad else f", {len(bad)} with problems ({', '.join(bad[:4])}"
                   + (", ..." if len(bad) > 4 else "") + ")")


def review(profile: str) -> str:
    """Check a profile's figures and write its contact sheet; one line saying how they fared (the
    runner prints it at the end of a profile's run). Never raises: a figure problem is the figure
    test's to report, not a reason to fail a run."""
    try:
        results = check(paths.profile_dir(profile))
        sheet = contact_sheet(profile)
    except Exception as exc:            # noqa: BLE001 (a broken record must not fail the run that made it)
        return f"[{profile}] figures: not reviewed ({type(exc).__name__}: {exc})"
    return f"{summary_line(profile, results)} -> {paths.show(sheet)}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m lib.figreview",
                                 description="check the figures of a profile's outputs and write its contact sheet")
    ap.add_argument("profile")
    ap.add_argument("--no-sheet", action="store_true", help="check only; do not (re)write figures.html")
    args = ap.parse_args(argv)
    root = paths.profile_dir(args.profile)
    if not root.is_dir():
        print(f"no outputs for profile {args.profile!r} in {paths.show(root)}: `{paths.make_command(args.profile)}`")
        return 2
    results = check(root)
    for key, problems in results.items():
        for p in problems:
            print(f"{key}: {p}")
    print(summary_line(args.profile, results))
    if not args.no_sheet:
        print(f"contact sheet: {paths.show(contact_sheet(args.profile))}")
    return 1 if any(results.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
