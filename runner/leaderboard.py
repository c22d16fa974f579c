"""The leaderboard page of a profile: ``outputs/<profile>/leaderboard.html``, who ranks where under
each protocol, as one self-contained file that opens from the file system on an offline machine.

It computes no number itself: the scores are the results store's rows (a placement profile's
reference models: the reference's results), the mean ranks, intervals and shifts the
``mean_ranks.csv`` of the stage that ranks the models (04, or a placement profile's 08), read back
to the last digit; the models' attributes come from :mod:`lib.metadata`, the colours from
:mod:`lib.plots`, the figures from the profile's ``<stage>/figures/`` with their records' titles.

:func:`board` gathers these into a :class:`Board` of tidy frames, :func:`page_data` turns it into
the JSON the page embeds, :func:`render` inlines ``runner/assets/leaderboard.css`` and ``.js``
around it (no server, no CDN). The script builds the table from the JSON, so a further protocol in
the store is one more set of columns, not code. The runner writes the page after every run of a
profile (:func:`review`); ``make leaderboard`` writes it from the outputs there.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from lib import metadata, params, paths, placement, plots, store
from lib.util import atomic_write_text, read_json
from runner import contactsheet, figreview

PAGE = "leaderboard.html"
RANKS = "mean_ranks.csv"                 # written by the stage that ranks the models (04, or 08)
ASSETS = Path(__file__).with_name("assets")
SCHEMA = 1
UNKNOWN = "unknown"

# Which figures a link in the page leads to, by figure name (<stage>/figures/<name>.png): those that
# show every model (linked from each row), every benchmark (from each benchmark's column), every
# downstream benchmark (not the perplexity corpora) and the mean ranks (from the rank columns, beside
# the page's own chart of positions). A benchmark's column also links the figures whose title names it.
FIGURES_OF = {
    "models": ("rank_plot", "scatter_average", "pc1_vs_compute", "placement", "placement_compute", "direct_vs_tbt"),
    "benchmarks": ("direct_vs_tbt", "val_curves", "corpus_benchmark_tau"),
    "downstream": ("tau_heatmaps", "per_benchmark", "noise_ceiling"),
    "ranks": ("placement",),
}
# Size classes for the size filter where the metadata names no size (hub models): upper bounds in
# billions of parameters and their labels.
SIZE_CLASSES = ((1.0, "under 1B"), (4.0, "1-4B"), (10.0, "4-10B"), (math.inf, "10B and over"))


class LeaderboardError(ValueError):
    """The outputs cannot make a page (no results, a ranks table that does not match them); the
    message names the file and the command that makes it."""


@dataclass
class Board:
    """What the page of ``profile`` shows, as tidy frames (the unit tests' subject)."""
    profile: str
    description: str
    scores: pd.DataFrame                 # protocol, benchmark, model, metric, score, stderr: the store's rows
    models: pd.DataFrame                 # index model: label, family, params_b, size, instruct, type, prepared,
                                         # role, color
    benchmarks: pd.DataFrame             # index benchmark: label, category, metric, higher_is_better, ranked
    ranks: pd.DataFrame | None           # mean_ranks.csv as written (None: no stage ranked the models)
    rank_info: dict = field(default_factory=dict)     # source, unit, n_boot, level, baseline, n_benchmarks
    placement: dict | None = None        # reference, comparable, new, calibration, lines
    figures: list[dict] = field(default_factory=list)  # stage, name, title, href
    notes: list[str] = field(default_factory=list)

    @property
    def protocols(self) -> list[str]:
        """Every protocol with scores, the store's two first, further ones (a k-shot evaluation) after."""
        present = set(self.scores["protocol"])
        return [p for p in store.PROTOCOLS if p in present] + sorted(present - set(store.PROTOCOLS))


# --------------------------------------------------------------------------- reading the outputs
def board(profile: str) -> Board:
    """The :class:`Board` of ``profile`` from its outputs (and, for a placement profile, its
    reference's results). Raises :class:`LeaderboardError` when the profile has no results."""
    prof = params.load_profile(profile, validate=False)
    root = paths.store_dir(profile)
    notes: list[str] = []
    place = _placement(profile, prof)
    ours = store.load(root) if root.is_dir() else pd.DataFrame(columns=store.COLUMNS)
    if place is None:
        scores, stores = ours, [root]
    else:
        theirs = placement.reference_results(prof.reference)
        scores = pd.concat([theirs, ours[ours["model"].isin(place["new"])]], ignore_index=True)
        stores = [root] + ([] if prof.reference == params.PUBLISHED else [paths.store_dir(prof.reference)])
    if scores.empty:
        raise LeaderboardError(f"no results in {paths.show(root)}: `{paths.make_command(profile)}` makes them")
    scores = scores[["protocol", "benchmark", "model", "metric", "score", "stderr"]].reset_index(drop=True)
    models = sorted(set(scores["model"]))
    ranks, info = _ranks(profile, prof, notes)
    if place is not None and not place["comparable"] and ranks is not None:        # an older run's file
        ranks, info = None, {}
        notes.append("no mean ranks: this run is not comparable with its reference (08's lines above say why)")
    if ranks is not None:
        unknown = sorted(set(ranks["model"]) - set(models))
        if unknown:
            raise LeaderboardError(f"{info['source']}: model {unknown[0]!r} has no result in the store: the ranks "
                                   f"are older than the results (`{paths.make_command(profile)}` re-makes them)")
    frame = _models_frame(models, stores, place)
    benches = _benchmarks_frame(sorted(set(scores["benchmark"])), stores, ranks)
    return Board(profile=profile, description=prof.description, scores=scores, models=frame, benchmarks=benches,
                 ranks=ranks, rank_info=info, placement=place, figures=_figures(profile, benches), notes=notes)


def _placement(profile: str, prof: params.Profile) -> dict | None:
    """A placement profile's reference, verdict, new and calibration models (08's summary), or None."""
    if prof.reference is None:
        return None
    new = [placement.store_name(m) for m in params.new_models(prof)]
    summary_path = paths.stage_dir(profile, "08_placement") / "summary.json"
    s = read_json(summary_path, rebuild=paths.make_command(profile)) if summary_path.exists() else {}
    theirs = paths.profile_dir(prof.reference) / PAGE
    return {"reference": prof.reference, "comparable": s.get("comparable"), "new": new,
            "calibration": list(s.get("calibration_models") or []), "lines": list(s.get("lines") or []),
            "reference_models": s.get("reference_models"),
            "reference_page": f"../{prof.reference}/{PAGE}" if theirs.exists() else None}


def _ranks(profile: str, prof: params.Profile, notes: list[str]) -> tuple[pd.DataFrame | None, dict]:
    """The ``mean_ranks.csv`` of the last stage of ``prof`` that wrote one, and how its intervals were
    drawn (that stage's summary); (None, {}) with a note when no stage ranked the models."""
    for stage in reversed(list(prof.stages)):
        path = paths.stage_dir(profile, stage) / RANKS
        if path.exists():
            summary = read_json(path.with_name("summary.json"), rebuild=paths.make_command(profile, stage[:2]))
            if "mean_ranks" not in summary:
                raise LeaderboardError(f"{paths.show(path.with_name('summary.json'))} says nothing of how "
                                       f"{RANKS} was drawn: `{paths.make_command(profile, stage[:2])}` re-makes it")
            ranks = pd.read_csv(path)
            return ranks, {"source": f"{stage}/{RANKS}", "stage": stage, **summary["mean_ranks"]}
    notes.append("no mean ranks: no stage of this profile that ranks the models (04, or 08 for a placement) "
                 f"has written {RANKS}" + ("" if prof.reference is None else " (is the run comparable?)"))
    return None, {}


def _model_info(model: str, stores: list[Path]) -> metadata.ModelInfo | None:
    for root in [*stores, None]:
        try:
            return metadata.model_info(model, root)
        except metadata.MetadataError:
            continue
    return None


def size_label(params_b: float | None) -> str:
    """``7.6B``, ``410M``, ``190K``: parameters as a reader says them."""
    if params_b is None or not math.isfinite(params_b):
        return ""
    for scale, unit in ((1.0, "B"), (1e-3, "M"), (1e-6, "K")):
        if params_b >= scale:
            value = params_b / scale
            return f"{value:.3g}{unit}" if value < 100 else f"{value:.0f}{unit}"
    return f"{params_b * 1e9:.0f}"


def size_class(params_b: float | None, named: str | None = None) -> str:
    """The size filter's class: a mini-world model's named size (``xs`` .. ``l``), else a band of
    :data:`SIZE_CLASSES`."""
    if named:
        return str(named)
    if params_b is None or not math.isfinite(params_b):
        return UNKNOWN
    return next(label for bound, label in SIZE_CLASSES if params_b < bound)


def prepared_on(extra: dict) -> str | None:
    """What a mini-world model was prepared on (its metadata's ``kind``, ``dose`` and ``prepared``
    tasks): ``format 50 %: Recall, Quiz``; ``nothing (base)``; None for a model without that record."""
    kind = extra.get("kind")
    if kind is None:
        return None
    tasks = extra.get("prepared") or {}
    if kind == "base":
        return "nothing (base)"
    if not tasks:
        return f"{kind} (no task)"
    return f"{kind} {round(100 * float(extra.get('dose') or 0))} %: " + ", ".join(plots.displays(tasks))


def _models_frame(models: list[str], stores: list[Path], place: dict | None) -> pd.DataFrame:
    rows = []
    for m in models:
        info = _model_info(m, stores)
        extra = info.extra if info else {}
        prep = prepared_on(extra)
        role = ("placed" if place and m in place["new"] else "calibration" if place and m in place["calibration"]
                else "")
        instruct = None if info is None else bool(info.instruct)
        rows.append({"model": m, "label": plots.display(m), "family": info.family if info else UNKNOWN,
                     "params_b": info.params_b if info and info.params_b is not None else math.nan,
                     "size": size_class(info.params_b if info else None, extra.get("size")),
                     "instruct": instruct,
                     "type": UNKNOWN if instruct is None else ("base" if not instruct else
                                                               "prepared" if prep else "instruct"),
                     "prepared": prep, "role": role})
    frame = pd.DataFrame(rows).set_index("model")
    known = frame[frame["family"] != UNKNOWN]
    colors = plots.sized_colors(known["family"].to_dict(), known["params_b"].to_dict())
    frame["color"] = [colors.get(m, "#8a8a8a") for m in frame.index]
    return frame


def _benchmarks_frame(names: list[str], stores: list[Path], ranks: pd.DataFrame | None) -> pd.DataFrame:
    """One row per benchmark in the paper's order: categories as :data:`lib.metadata.CATEGORIES` lists
    them (perplexity corpora last), within one the order of :data:`lib.metadata.BENCHMARKS`, then by
    name. ``ranked``: among the benchmarks a mean rank averages (the downstream ones)."""
    root = next((s for s in stores if (s / "_meta" / "benchmarks.json").exists()), None)
    frame = metadata.benchmarks_frame(names, root)
    cats, paper = list(metadata.CATEGORIES), list(metadata.BENCHMARKS)
    key = {b: (cats.index(c) if c in cats else len(cats) - 1.5, c, paper.index(b) if b in paper else len(paper), b)
           for b, c in frame["category"].items()}
    frame = frame.loc[sorted(frame.index, key=key.get)]
    frame["label"] = plots.displays(frame.index)
    downstream = set(frame.index) - set(metadata.perplexity_benchmarks(frame.index, root))
    frame["ranked"] = [ranks is not None and b in downstream for b in frame.index]
    return frame[["label", "category", "metric", "higher_is_better", "ranked"]]


def _figures(profile: str, benchmarks: pd.DataFrame) -> list[dict]:
    """Every figure of the profile (its record's title), with what it is linked from."""
    root = paths.profile_dir(profile)
    out = []
    for png in contactsheet.numbered(root):            # figures.html's numbers: one list, one order
        stage, name = png.parent.parent.name, png.stem
        title = " ".join(str(figreview.record(png).get("title") or name).split())
        named = [b for b, label in benchmarks["label"].items() if _names(title, label)]
        downstream = [b for b, cat in benchmarks["category"].items() if cat != metadata.PERPLEXITY]
        out.append({"stage": stage, "name": name, "title": title,
                    "href": f"{figreview.SHEET}#{stage}-{name}", "png": f"{stage}/figures/{png.name}",
                    "models": name in FIGURES_OF["models"], "ranks": name in FIGURES_OF["ranks"],
                    "benchmarks": ([*benchmarks.index] if name in FIGURES_OF["benchmarks"] else
                                   downstream if name in FIGURES_OF["downstream"] else named)})
    return out


def _names(title: str, label: str) -> bool:
    """Whether ``title`` names ``label`` as a word (NQ-Open in "ranks on NQ-Open and WiC")."""
    return re.search(rf"(?<![\w-]){re.escape(label)}(?![\w-])", title) is not None


# --------------------------------------------------------------------------- the embedded table
def _num(value) -> float | None:
    try:
        v = float(value)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def page_data(b: Board) -> dict:
    """The JSON table the page embeds (its script builds every row and column from it): plain
    numbers exactly as the store and ``mean_ranks.csv`` hold them (null where missing)."""
    protocols = b.protocols
    ranked = [] if b.ranks is None else [p for p in protocols if p in set(b.ranks["protocol"])]
    baseline = b.rank_info.get("baseline", store.DIRECT)
    by_model = {m: {"rank": {}, "shift": {}, "scores": {}, "stderr": {}} for m in b.models.index}
    # position: the place in the order of mean ranks (1 = lowest; equal means share the higher place)
    position = {} if b.ranks is None else b.ranks.groupby("protocol")["mean_rank"].rank(method="min")
    for i, r in ([] if b.ranks is None else b.ranks.iterrows()):
        entry = by_model[r["model"]]
        entry["rank"][r["protocol"]] = {"mean": _num(r["mean_rank"]), "lo": _num(r["mean_rank_lo"]),
                                        "hi": _num(r["mean_rank_hi"]), "n": int(r["n_benchmarks"]),
                                        "of": int(r["of"]), "pos": None if pd.isna(position[i]) else int(position[i])}
        if r["protocol"] != baseline and _num(r["rank_shift"]) is not None:
            entry["shift"][r["protocol"]] = {"value": _num(r["rank_shift"]), "lo": _num(r["rank_shift_lo"]),
                                             "hi": _num(r["rank_shift_hi"])}
    for r in b.scores.to_dict("records"):
        by_model[r["model"]]["scores"].setdefault(r["protocol"], {})[r["benchmark"]] = _num(r["score"])
        by_model[r["model"]]["stderr"].setdefault(r["protocol"], {})[r["benchmark"]] = _num(r["stderr"])
    figures = [{"id": i + 1, **{k: f[k] for k in ("stage", "name", "title", "href", "png")}}
               for i, f in enumerate(b.figures)]
    row_figs = [i + 1 for i, f in enumerate(b.figures) if f["models"]]
    models = [{"id": m, "label": row["label"], "family": row["family"], "color": row["color"],
               "params_b": _num(row["params_b"]), "size_label": size_label(_num(row["params_b"])),
               "size": row["size"], "instruct": row["instruct"], "type": row["type"],
               "prepared": row["prepared"], "role": row["role"], "figures": row_figs, **by_model[m]}
              for m, row in b.models.iterrows()]
    categories: dict[str, list[str]] = {}
    for bench, cat in b.benchmarks["category"].items():
        categories.setdefault(cat, []).append(bench)
    families = [{"name": fam, "label": plots.display(fam), "count": int(n),
                 "color": "#8a8a8a" if fam == UNKNOWN else plots.family_color(fam)}
                for fam, n in b.models["family"].value_counts(sort=False).sort_index().items()]
    sizes = (b.models.assign(p=b.models["params_b"].fillna(math.inf)).groupby("size")["p"].min()
             .sort_values().index.tolist())
    return {
        "schema": SCHEMA, "profile": b.profile, "description": " ".join(b.description.split()),
        "written": f"{datetime.datetime.now():%Y-%m-%d %H:%M}",
        "protocols": [{"id": p, "label": plots.protocol_label(p), "color": plots.PROTOCOL_COLORS.get(p, "#555555")}
                      for p in protocols],
        "baseline": baseline,
        "rank": {"protocols": ranked, **{k: v for k, v in b.rank_info.items() if k != "stage"},
                 "figures": [i + 1 for i, f in enumerate(b.figures) if f["ranks"]]},
        "categories": [{"name": c, "benchmarks": names} for c, names in categories.items()],
        "benchmarks": [{"id": bench, "label": row["label"], "category": row["category"], "metric": row["metric"],
                        "higher_is_better": bool(row["higher_is_better"]), "ranked": bool(row["ranked"]),
                        "figures": [i + 1 for i, f in enumerate(b.figures) if bench in f["benchmarks"]]}
                       for bench, row in b.benchmarks.iterrows()],
        "families": families, "sizes": sizes,
        "columns": {"prepared": bool(b.models["prepared"].notna().any())},
        "placement": b.placement, "figures": figures, "notes": b.notes, "models": models,
    }


# --------------------------------------------------------------------------- the page
def render(data: dict) -> str:
    """The page: the JSON table, the style and the script inlined (nothing is fetched)."""
    import html

    payload = json.dumps(data, ensure_ascii=False, allow_nan=False).replace("</", "<\\/")
    css = (ASSETS / "leaderboard.css").read_text()
    js = (ASSETS / "leaderboard.js").read_text()
    title = f"{data['profile']}: leaderboard"
    return (f"<!doctype html>\n<html lang='en'><head><meta charset='utf-8'>\n"
            f"<meta name='viewport' content='width=device-width, initial-scale=1'>\n"
            f"<title>{html.escape(title)}</title>\n<style>\n{css}</style></head>\n<body>\n"
            f"<noscript>This page builds its table with JavaScript; the numbers are in the JSON below and in the "
            f"profile's CSV files.</noscript>\n"
            f"<script type='application/json' id='leaderboard-data'>{payload}</script>\n"
            f"<script>\n{js}</script>\n</body></html>\n")


def write(profile: str, b: Board | None = None) -> Path:
    """Write ``outputs/<profile>/leaderboard.html`` from the profile's outputs (or from ``b``)."""
    return atomic_write_text(paths.profile_dir(profile) / PAGE, render(page_data(b or board(profile))))


def review(profile: str) -> str:
    """Write the page; one line saying so (the runner prints it at the end of a profile's run). Never
    raises: the page shows what a run wrote, and a run is not failed by its page (the tests are)."""
    try:
        b = board(profile)
        page = write(profile, b)
    except Exception as exc:            # noqa: BLE001 (a page must not fail the run that made its numbers)
        return f"[{profile}] leaderboard: not written ({type(exc).__name__}: {exc})"
    ranked = "" if b.ranks is not None else " (no mean ranks)"
    return (f"[{profile}] leaderboard: {len(b.models)} models x {len(b.benchmarks)} benchmarks{ranked} -> "
            f"{paths.show(page)}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m runner.leaderboard",
                                 description="write outputs/PROFILE/leaderboard.html from the profile's outputs")
    ap.add_argument("profile")
    args = ap.parse_args(argv)
    try:
        page = write(args.profile)
    except (LeaderboardError, params.ParamsError, params.PrerequisiteError, store.StoreError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"leaderboard: {paths.show(page)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
