"""Notebook 07 in one call (:func:`benchalign_report`): the studies of :mod:`lib.benchalign.studies`
on the methods of :mod:`lib.benchalign.methods`, summarised for ``summary.json``, the tables and
``numbers.tex``; and the display tables (:func:`table`, :func:`paired_table`) in registry order.
"""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import asdict
from functools import partial

import numpy as np
import pandas as pd

from . import rank
from .data import ItemData, instruct_mark
from .memo import Memo, data_key
from .methods import METHODS, Config, Split, best_single_choice, clean, method_label
from .studies import (
    SELECTIONS,
    WITHIN_GROUPS,
    ablation,
    advance,
    compare,
    cross_paper,
    data_needs,
    needs_jobs,
    subset_sizes,
    summarise,
    within_groups,
)


def table(summary_main: dict, metric: str = "spearman") -> pd.DataFrame:
    """Method x group table of ``metric`` as 'mean [95 % ci] (seed std)' strings (for display)."""
    def cell(r: dict) -> str:
        if r.get(metric) is None:
            return "n/a"
        ci = r.get(f"{metric}_ci")
        return (f"{r[metric]:.2f}" + (f" [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else "")
                + (f" (seeds ± {r[f'{metric}_seed_std']:.3f})" if r.get(f"{metric}_seed_std") else ""))
    return _registry_order(summary_main, cell)


def paired_table(summary_main: dict, metric: str = "spearman", ref: str = "no_alignment") -> pd.DataFrame:
    """Method x group table of the paired difference to ``ref`` as 'diff [95 % ci]' strings."""
    def cell(r: dict) -> str | None:
        d, ci = r.get(f"{metric}_diff_{ref}"), r.get(f"{metric}_diff_{ref}_ci")
        return None if d is None else f"{d:+.2f}" + (f" [{ci[0]:+.2f}, {ci[1]:+.2f}]" if ci else "")
    return _registry_order(summary_main, cell)


def _registry_order(summary_main: dict, cell) -> pd.DataFrame:
    """The cells (None: left out) of every method and group as a table, methods in registry order."""
    cells = {(method_label(m), g): cell(r) for g, ms in summary_main.items() for m, r in ms.items()}
    s = pd.Series({k: v for k, v in cells.items() if v is not None}, dtype=object)
    if not len(s):
        return pd.DataFrame()
    df = s.unstack()
    order = [spec.label for spec in METHODS.values() if spec.label in df.index]
    return df.reindex(order + [m for m in df.index if m not in order])


def weights_by_benchmark(data: ItemData, weights: list[np.ndarray]) -> pd.DataFrame:
    """Per benchmark: summed weight, positive and negative mass, share of negative items (seed means)."""
    W = np.array(weights)
    rows = []
    for b in data.benchmarks:
        m = data.item_benchmark == b
        rows.append({"benchmark": b, "items": int(m.sum()), "weight_sum": W[:, m].sum(1).mean(),
                     "weight_sum_std": W[:, m].sum(1).std(), "positive": np.clip(W[:, m], 0, None).sum(1).mean(),
                     "negative": np.clip(W[:, m], None, 0).sum(1).mean(),
                     "share_negative_items": (W[:, m] < 0).mean()})
    return pd.DataFrame(rows).set_index("benchmark")


# --------------------------------------------------------------------------- the protocol, summarised
def protocol_summary(fits: dict[str, list[rank.Fit]], cfg: Config, curve_method: str = "benchalign") -> dict:
    """How the protocol chose: per learned method the chosen steps per seed, the folds and the steps
    run; for ``curve_method`` the learning curves (mean validation and training loss over the folds
    at every candidate step, per seed)."""
    out = {"folds": cfg.folds, "candidate_steps": f"0, {cfg.eval_every}, {2 * cfg.eval_every}, ... "
           f"(at most {cfg.max_steps}; a run stops {cfg.patience} steps after its best)",
           "lr": cfg.lr, "loss": cfg.loss, "chosen_steps": {}, "folds_used": {}, "steps_run": {}, "notes": {}}
    for m, fs in fits.items():
        out["chosen_steps"][m] = [int(f.step) for f in fs]
        out["folds_used"][m] = sorted({int(f.folds) for f in fs})
        out["steps_run"][m] = int(max(f.steps_run for f in fs))
        notes = sorted({f.note for f in fs if f.note})
        if notes:
            out["notes"][m] = notes
    if curve_method in fits and len(fits[curve_method][0].curve):
        fs = fits[curve_method]
        n = min(len(f.curve) for f in fs)
        out["curve"] = {"method": curve_method, "step": [int(s) for s in fs[0].curve[:n, 0]],
                        "val_loss": [[clean(v) for v in f.curve[:n, 2]] for f in fs],
                        "train_loss": [[clean(v) for v in f.curve[:n, 1]] for f in fs]}
    return out


# --------------------------------------------------------------------------- summary pieces
def ablation_summary(comp, y: np.ndarray, n_boot: int) -> dict:
    """``{group: {loss: {spearman, spearman_ci, spearman_seed_std, pair_acc, pair_acc_ci, ..., steps}}}``
    (seed means, 95 % bootstrap intervals over the test models as in the main comparison, the
    spread over seeds, the chosen steps per seed)."""
    out = summarise(comp, y, n_boot, refs=())
    for g, losses in out.items():
        for loss, rec in losses.items():
            sub = comp.rows[(comp.rows.method == loss) & (comp.rows.group == g)]
            rec["steps"] = [int(s) for s in sub.step]
    return out


def flag_table(data: ItemData, split: Split) -> pd.DataFrame:
    """Every model with its instruction-tuned flag, the mark that set it (the rule of
    :func:`lib.benchalign.data.instruct_mark`; pipeline models: their metadata), its size and its
    role (source, the test groups it belongs to, or unused): the list to review."""
    role = np.full(len(data.models), "unused", dtype=object)
    role[split.source] = "source"
    for g, idx in split.groups.items():
        for i in idx:
            role[i] = g if role[i] in ("unused",) else f"{role[i]}, {g}"
    oll = data.info.get("source") != "pipeline"
    return pd.DataFrame({"model": data.models, "instruct": data.instruct.astype(bool),
                         "mark": [(instruct_mark(m) or "") if oll else "metadata" for m in data.models],
                         "size_b": data.size_b, "role": role}).set_index("model")


def flag_counts(data: ItemData, split: Split) -> dict:
    """Instruction-tuned / base models among the source models and each test group."""
    if data.instruct is None:
        return {}
    sets = {"source": split.source, **split.groups}
    return {k: {"instruct": int(data.instruct[v].sum()), "base": int((~data.instruct[v]).sum())}
            for k, v in sets.items()}


def flag_feature(data: ItemData, weights: list[np.ndarray]) -> dict:
    """BenchAlign + flag: the learned weight of the flag column and the summed weight of the items
    (seed means; normalised weights, so a model's score moves by the flag's weight when flagged)."""
    W = np.array(weights)
    return {"flag_weight": clean(W[:, -1].mean()), "flag_weight_seed_std": clean(W[:, -1].std()),
            "items_weight_sum": clean(W[:, :-1].sum(1).mean())}


def needs_summary(df: pd.DataFrame) -> dict:
    """``{group: {kind: {n: {method: mean spearman}}}}`` of :func:`data_needs`."""
    out: dict = {}
    for (g, kind, n, method), sub in df.groupby(["group", "kind", "n", "method"]):
        out.setdefault(g, {}).setdefault(kind, {}).setdefault(str(int(n)), {})[method] = clean(sub.spearman.mean())
    return out


def selection_summary(df: pd.DataFrame) -> dict:
    """``{group: {n: {kind: {spearman, spearman_seed_std, pair_acc}}}}``: BenchAlign's test metrics
    for k source models chosen by each selection (random, label-free k-center, spread over the
    target), side by side."""
    out: dict = {}
    sub = df[(df.method == "benchalign") & df.kind.isin(list(SELECTIONS))]
    for (g, n, kind), s in sub.groupby(["group", "n", "kind"]):
        out.setdefault(g, {}).setdefault(str(int(n)), {})[kind] = {
            "spearman": clean(s.spearman.mean()), "spearman_seed_std": clean(s.spearman.std(ddof=0)),
            "pair_acc": clean(s.pair_acc.mean())}
    return out


def duplicates_line(info: dict) -> str:
    """One line about duplicated model names in the item files (the full lists stay in ``info``)."""
    dups = info.get("duplicated_names") or {}
    names = sorted({n for v in dups.values() for n in v})
    if not names:
        return "no duplicated model names"
    files = sum(bool(v) for v in dups.values())
    return (f"{len(names)} model names occur more than once in {files} of {len(dups)} item files; "
            f"duplicates policy {info.get('duplicates')!r} (the names: summary.json data.info.duplicated_names)")


# --------------------------------------------------------------------------- notebook 07 in one call
def benchalign_report(items: ItemData, split: Split, cfg: Config, *, seeds: int = 5, n_boot: int = 1000,
                      losses=rank.LOSSES, source_counts=(), item_counts=(), need_seeds: int = 3,
                      subset_fractions=(), within: bool = True,
                      cross_paper_store=None, cross_source_max_b: float = 3.5,
                      cross_test_min_b: float = 6.0, relative_sizes: bool = False, progress: bool = True,
                      resume=None) -> dict:
    """Everything notebook 07 shows, as the studies of :mod:`lib.benchalign.studies` (the
    benchmark-level ``cross`` on ``cross_paper_store``'s direct evaluation), ``tables`` (name ->
    DataFrame to save), ``notes`` and ``summary`` (the plain numbers of summary.json). With
    ``progress``, a console line counts the units of work done (:mod:`lib.benchalign.memo`); with
    ``resume`` (a folder, :func:`lib.layout.benchalign_dir`), each finished unit is kept there, so
    a stopped run resumes at the next unit and ends with the numbers of one that was not."""
    from ..progress import Progress

    notes = list(split.notes)
    fittable = bool(split.groups) and len(split.source) >= 2
    n_units = (len(METHODS) + (len(losses) + len(needs_jobs(split, source_counts, item_counts, items.X.shape[1]))
                               + len(subset_fractions) + len(WITHIN_GROUPS) * within
                               if fittable else 0) + (cross_paper_store is not None))
    memo = Memo.for_report(resume, items, split, cfg, seeds, n_boot)
    with Progress(n_units, "benchalign") if progress else nullcontext() as bar:
        # the main comparison: every method with every seed, on the test groups
        comp = compare(items, split, tuple(METHODS), seeds, cfg, progress=bar, memo=memo)
        main = summarise(comp, items.target, n_boot)
        by_bench = (weights_by_benchmark(items, comp.weights["benchalign"]) if "benchalign" in comp.weights
                    else pd.DataFrame())
        # the studies: ranking losses (reusing the comparison's BenchAlign fits), data needs, across papers
        done = {cfg.loss: comp.fits["benchalign"]} if "benchalign" in comp.fits else {}
        abl = ablation(items, split, losses, seeds, cfg, done, progress=bar, memo=memo) if fittable else None
        within_rec = (within_groups(items, split, seeds, cfg, n_boot, progress=bar, memo=memo)
                      if fittable and within else {})
        subsets = (subset_sizes(items, split, subset_fractions, seeds, cfg, n_boot, progress=bar, memo=memo)
                   if fittable else {})
        needs = (data_needs(items, split, source_counts, item_counts, need_seeds, cfg, progress=bar, memo=memo)
                 if fittable else pd.DataFrame())
        cross = _cross_paper(cross_paper_store, cross_source_max_b, cross_test_min_b, seeds, cfg, n_boot, bar,
                             relative_sizes, memo)
    if memo.line(n_units):
        print(memo.line(n_units), flush=True)
    if not main:
        notes.append("no test group could be evaluated: too few models for a source/test split")
    protocol = protocol_summary(comp.fits, cfg)
    notes += _protocol_notes(protocol)
    summary = {"data": {"models": len(items.models), "items": int(items.X.shape[1]), "features": items.benchmarks,
                        "target": items.info.get("target"), **split.counts(), "info": items.info,
                        "duplicates_line": duplicates_line(items.info)},
               "main": main, "best_single": best_single_choice(items, split),
               "flag_counts": flag_counts(items, split),
               "flag_feature": (flag_feature(items, comp.weights["benchalign_flag"])
                                if "benchalign_flag" in comp.weights else {}),
               "within": within_rec, "subsets": subsets,
               "protocol": protocol,
               "ablation": ablation_summary(abl, items.target, n_boot) if abl is not None else {},
               "data_needs": needs_summary(needs) if len(needs) else {},
               "source_selection": selection_summary(needs) if len(needs) else {},
               "weights_by_benchmark": by_bench.round(5).to_dict(orient="index"),
               "cross_paper": cross, "config": asdict(cfg), "notes": notes}
    abl_rows = abl.rows.rename(columns={"method": "loss"}) if abl is not None else pd.DataFrame()
    tables = _tables(main, abl_rows, needs, by_bench, cross)
    tables.update({name: _flat(rec) for name, rec in (
        ("within", {k: v["main"] for k, v in within_rec.items() if "main" in v}),
        ("subsets", {k: v["main"] for k, v in subsets.items()})) if rec})
    if items.instruct is not None:
        tables["instruct_flag"] = flag_table(items, split)
    return {"comparison": comp, "main": main, "protocol": protocol, "by_bench": by_bench,
            "ablation": abl_rows, "within": within_rec, "subsets": subsets,
            "needs": needs, "cross": cross, "tables": tables, "notes": notes, "summary": summary}


def _cross_paper(store_root, source_max_b: float, test_min_b: float, seeds: int, cfg: Config, n_boot: int,
                 bar, relative: bool = False, memo: Memo | None = None) -> dict:
    """:func:`lib.benchalign.studies.cross_paper` on the published store, or why it was skipped."""
    from .data import ItemDataError, load_cross_paper

    if store_root is None:
        return {"skipped": "cross_paper is off in this profile"}
    try:
        data = load_cross_paper(store_root)
        cross = (memo or Memo(None))("cross-paper", partial(cross_paper, data, source_max_b, test_min_b, seeds, cfg,
                                                            n_boot, relative), data=data_key(data))
    except (ItemDataError, ValueError, KeyError) as exc:   # e.g. a store without direct_eval results
        cross = {"skipped": f"{type(exc).__name__}: {exc}"}
    advance(bar, "cross-paper")
    return cross


def _flat(rec: dict) -> pd.DataFrame:
    """``{condition: {group: {method: record}}}`` as one table (index condition, group, method)."""
    rows = {(c, g, m): {k: v for k, v in r.items() if not isinstance(v, list)}
            for c, groups in rec.items() for g, ms in groups.items() for m, r in ms.items()}
    return pd.DataFrame(rows).T.rename_axis(["condition", "group", "method"])


def _protocol_notes(protocol: dict) -> list[str]:
    """One line per distinct note of the protocol, naming the methods it concerns."""
    by_note: dict[str, list[str]] = {}
    for m, ns in protocol["notes"].items():
        for n in ns:
            by_note.setdefault(n, []).append(m)
    return [f"{', '.join(ms)}: {n}" for n, ms in by_note.items()]


def _tables(main: dict, abl: pd.DataFrame, needs: pd.DataFrame, by_bench: pd.DataFrame, cross: dict) -> dict:
    """The tables notebook 07 saves: name -> DataFrame."""
    tables = {f"comparison_{g.replace('+', 'plus')}": pd.DataFrame(main[g]).T for g in main}
    tables.update({name: df for name, df in (("ablation", abl), ("data_needs", needs),
                                             ("weights_by_benchmark", by_bench)) if len(df)})
    if "comparison" in cross:
        tables["cross_paper"] = pd.DataFrame(cross["comparison"]).T
    return tables


def headline_numbers(main: dict) -> dict:
    """``{group_method_metric: value}`` of the headline methods, for numbers.tex (metrics, their
    seed spread, and the paired difference to no alignment with its interval)."""
    out = {}
    for g, ms in main.items():
        for m, r in ms.items():
            if m not in METHODS or not METHODS[m].headline:
                continue
            for k in ("spearman", "pair_acc"):
                for key in (k, f"{k}_seed_std", f"{k}_diff_no_alignment"):
                    if r.get(key) is not None:
                        out[f"{g}_{m}_{key}"] = r[key]
                ci = r.get(f"{k}_diff_no_alignment_ci")
                if ci:
                    out[f"{g}_{m}_{k}_diff_no_alignment_lo"], out[f"{g}_{m}_{k}_diff_no_alignment_hi"] = ci
    return out
