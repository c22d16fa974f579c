"""A profile's figures checked and shown: :func:`check` reads the records :mod:`runner.figreview` makes
of each figure :func:`lib.plots.savefig` saved and returns the problems, plus those it sees itself (a PNG
without PDF or record, a PNG saved again another way, a PDF page wider than 7.0 in). :func:`contact_sheet` writes
``outputs/<profile>/figures.html``: every figure at its print size with its caption, notebook and
checks. ``python -m runner.contactsheet PROFILE`` (``make check-figures``) does both and exits 1 when
a figure has a problem.
"""

from __future__ import annotations

import argparse
import datetime
import html
import re
import sys
from pathlib import Path

from lib import paths
from lib.plots import WIDTH_DOUBLE, WIDTH_SINGLE
from lib.util import atomic_write_text
from runner.figreview import SHEET, record


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
    """{``<stage>/<name>``: problems} for every figure under ``where`` (a profile's output folder or a
    stage's); an empty list means the figure passed every check."""
    out: dict[str, list[str]] = {}
    for png in figures(where):
        key = f"{png.parent.parent.name}/{png.stem}"
        problems = []
        pdf, kept = png.with_suffix(".pdf"), png.with_suffix(".pickle")
        if not kept.exists():
            kept = png.with_suffix(".json")         # a record written when the figure was saved (before issue 51)
        if not pdf.exists():
            problems.append("no PDF next to the PNG")
        else:
            w = _pdf_width_in(pdf)
            if w is None or w > WIDTH_DOUBLE + 0.01:
                problems.append(f"PDF page {w if w is None else round(w, 2)} in wide (at most {WIDTH_DOUBLE} in)")
        if not kept.exists():
            problems.append(f"no record {png.stem}.json: saved without lib.plots.savefig, or before it kept the "
                            f"figure (`{paths.make_command(png.parent.parent)}` re-makes it)")
        else:
            if kept.stat().st_mtime + 1 < png.stat().st_mtime:
                problems.append(f"the PNG is newer than {kept.name} (saved again another way)")
            problems += record(png).get("problems", [])
        out[key] = problems
    return out


# --------------------------------------------------------------------------- contact sheet
_CSS = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 80em; color: #222; }
h1 { font-size: 1.4em; } h2 { font-size: 1.15em; margin-top: 2em; border-bottom: 1px solid #ccc; }
figure { margin: 1.5em 0; padding: 0.8em; border: 1px solid #e3e3e3; background: #fff; }
figure img { display: block; border: 1px dotted #bbb; max-width: 100%; height: auto; }
@media (max-width: 40em) { body { margin: 0.5em; overflow-wrap: anywhere; } figure { padding: 0.3em; margin: 1em 0; } }
figcaption { max-width: 7in; margin-top: 0.6em; font-size: 0.92em; line-height: 1.4; }
.meta { color: #555; font-size: 0.85em; } .ok { color: #2a7a2a; } .bad { color: #b22; }
ul.problems { margin: 0.3em 0; color: #b22; }
"""


def _made_order(png: Path) -> tuple[int, str]:
    """A figure's place in its stage: the notebook cell that made it (its record), then its name."""
    cell = record(png).get("cell")
    return (cell if isinstance(cell, int) else 10 ** 6, png.stem)


def numbered(root: Path) -> list[Path]:
    """Every figure of a profile in the one order the pages number them (Figure 1, 2, ...): stage by
    stage in notebook order, within a stage in the order its cells made them. figures.html and the
    leaderboard both number from this list, so a number means one figure on both."""
    stages = sorted(p.name for p in root.glob("[0-9][0-9]_*") if (p / "figures").is_dir())
    return [png for stage in stages for png in sorted(figures(root / stage), key=_made_order)]


def contact_sheet(profile: str, out: str | Path | None = None) -> Path:
    """Write ``outputs/<profile>/figures.html``: every figure of the profile at its print size (3.4 in
    is a column) with its title, caption, the notebook and cell that made it, its size and its checks,
    stage by stage in the order the notebooks make them, the order the README and docs/ read them in
    (04's heat maps of every benchmark pair, the README's headline figure, first)."""
    root = paths.profile_dir(profile)
    target = Path(out) if out else root / SHEET
    results = check(root)
    parts = ["<!doctype html><meta charset='utf-8'><meta name='viewport' content='width=device-width, "
             f"initial-scale=1'><title>{html.escape(profile)}: figures</title>",
             f"<style>{_CSS}</style>", f"<h1>Figures of profile <code>{html.escape(profile)}</code></h1>"]
    n_bad = sum(bool(p) for p in results.values())
    parts.append(f"<p class='meta'>{len(results)} figures; "
                 + (f"<span class='bad'>{n_bad} with problems</span>" if n_bad else "<span class='ok'>every check "
                    "passed</span>")
                 + f". Shown at print size (one column = {WIDTH_SINGLE} in, full width = {WIDTH_DOUBLE} in); "
                 "click a figure for its PDF. Checks: <code>make check-figures PROFILE="
                 f"{html.escape(profile)}</code> (<code>runner/contactsheet.py</code>). Written "
                 f"{datetime.datetime.now():%Y-%m-%d %H:%M}.</p>")
    shown = None
    for number, png in enumerate(numbered(root), 1):
        stage = png.parent.parent.name
        nb = f"{stage}/{stage}.ipynb"
        if stage != shown:
            shown = stage
            parts.append(f"<h2 id='{stage}'>{html.escape(stage)} <span class='meta'>(notebook "
                         f"<code>notebooks/{stage}.ipynb</code>; executed: <a href='{nb}'>{nb}</a>)</span></h2>")
        rec = record(png)
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
    ap = argparse.ArgumentParser(prog="python -m runner.contactsheet",
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
