"""The studies of notebook 07, on the methods of :mod:`lib.benchalign.methods`: the method
comparison with seeds and paired bootstrap intervals (:func:`compare`, :func:`summarise`), the loss
ablation, the instruction-tuned / base groups, the subset sizes, the data needs, the cross-paper
experiment, and the ``align`` command line's worked example and noise / sparsity study.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import numpy as np
import pandas as pd

from ..analysis import uncertainty
from ..util import atomic_write_text
from . import rank
from .align import MIN_MODELS, AlignError, Items, align, read_preferences, score
from .data import ItemData
from .memo import Memo
from .methods import (
    BASELINES,
    METHODS,
    Config,
    ExperimentError,
    Split,
    best_single_choice,
    clean,
    cv_fits,
    evaluate,
    restrict,
    run_method,
    split_by_size,
    subset_items,
)

SUBSET_METHODS = tuple(m for m in METHODS if m.split("+")[0] in ("metabench_like", "tinybenchmarks_like"))


@dataclass
class Comparison:
    rows: pd.DataFrame                       # method, seed, group, spearman, pair_acc
    preds: dict[str, np.ndarray]             # method -> seeds x models scores
    weights: dict[str, list[np.ndarray]]     # method -> per-seed item weights (weighted methods)
    split: Split
    fits: dict[str, list[rank.Fit]] = field(default_factory=dict)   # method -> per-seed fits (learned)


def compare(data: ItemData, split: Split, methods=tuple(METHODS), seeds: int = 5, cfg: Config | None = None,
            progress=None, memo=None) -> Comparison:
    """Fit and evaluate every method for seeds 0..seeds-1 (methods that learn from source models
    are skipped when there are fewer than 2); ``progress`` (a :class:`lib.progress.Progress`)
    advances by one per method; ``memo`` (a :class:`lib.benchalign.memo.Memo`) keeps each method's
    outcomes, so an interrupted run resumes at the next method."""
    cfg = cfg or Config()
    memo = memo or Memo(None)
    if data.target is None:
        raise ExperimentError("the item data carries no target scores")
    preds, weights, fits = {}, {}, {}
    for method in methods:
        if (len(split.source) < 2 and METHODS[method].learns) or (METHODS[method].flag and data.instruct is None):
            advance(progress)
            continue                                   # nothing to fit on / no flag (the notes say so)
        sized = method in SUBSET_METHODS           # one stored unit per subset size (the subset study's too)
        outcomes = memo(f"method-{method}" + (f"-{cfg.subset_items}" if sized else ""),
                        partial(run_method, method, data, split.source, range(seeds), cfg),
                        **({"subset_items": cfg.subset_items} if sized else {}))
        preds[method] = np.array([o.scores for o in outcomes])
        if outcomes[0].weights is not None:
            weights[method] = [o.weights for o in outcomes]
        if outcomes[0].fit is not None:
            fits[method] = [o.fit for o in outcomes]
        advance(progress)
    return comparison(preds, data.target, split, weights, fits)


def comparison(preds: dict[str, np.ndarray], y: np.ndarray, split: Split, weights=None, fits=None) -> Comparison:
    """The :class:`Comparison` of the predictions (method -> seeds x models), evaluated on the test groups."""
    rows = [{"method": m, "seed": s, "group": g, **r} for m, P in preds.items() for s, p in enumerate(P)
            for g, r in evaluate(p, y, split.groups).items()]
    df = pd.DataFrame(rows, columns=["method", "seed", "group", "spearman", "pair_acc"])
    return Comparison(df, preds, weights or {}, split, fits or {})


def advance(progress, note: str = "") -> None:
    if progress is not None:
        progress.advance(note=note)


# --------------------------------------------------------------------------- uncertainty
def bootstrap(preds: np.ndarray, y: np.ndarray, idx: np.ndarray, weights: np.ndarray) -> dict[str, np.ndarray]:
    """Metrics of each seed's predictions (``preds``: seeds x models) on the test models ``idx``
    under bootstrap ``weights`` (draws x len(idx) counts, :func:`lib.analysis.uncertainty.draws`):
    ``{metric: seeds x draws}``."""
    preds = np.atleast_2d(preds)
    return {"spearman": np.array([uncertainty.weighted_spearman(p[idx], y[idx], weights) for p in preds]),
            "pair_acc": np.array([uncertainty.weighted_pair_accuracy(p[idx], y[idx], weights) for p in preds])}


def _interval(draws: np.ndarray) -> list | None:
    """The 2.5 and 97.5 percentiles of the finite draws, rounded (None with fewer than 2)."""
    draws = draws[np.isfinite(draws)]
    return [clean(v) for v in np.percentile(draws, [2.5, 97.5])] if len(draws) > 1 else None


def summarise(comp: Comparison, y: np.ndarray, n_boot: int = 1000, seed: int = 0,
              refs: tuple[str, ...] = BASELINES) -> dict:
    """``{group: {method: record}}``. A record holds, for ``metric`` in (spearman, pair_acc):

    - ``metric``: the mean over seeds of the metric on all test models of the group;
    - ``metric_seed_std``: its standard deviation over seeds (what a different fold assignment,
      random draw or subset changes);
    - ``metric_ci``, ``metric_std``: 95 % percentile interval and standard deviation of the seed
      mean over ``n_boot`` bootstrap resamples of the test models (what a different sample of
      test models changes);
    - ``metric_diff_<ref>``, ``metric_diff_<ref>_ci`` for ref in ``refs``: the paired
      difference to that method (same resamples for both; point = difference of the means) with
      its 95 % interval;

    and ``n_models``, ``n_seeds``.
    """
    out: dict[str, dict] = {}
    for g, idx in comp.split.groups.items():
        weights = uncertainty.draws(len(idx), n_boot, seed)      # shared by every method: paired
        draws = {m: {k: uncertainty.nanmean_rows(v.T) for k, v in bootstrap(P, y, idx, weights).items()}
                 for m, P in comp.preds.items()}
        out[g] = {}
        for method in comp.preds:
            sub = comp.rows[(comp.rows.method == method) & (comp.rows.group == g)]
            rec = {"n_models": int(len(idx)), "n_seeds": int(len(sub))}
            for metric in ("spearman", "pair_acc"):
                d = draws[method][metric]
                fin = d[np.isfinite(d)]
                rec[metric] = clean(sub[metric].mean())
                rec[f"{metric}_std"] = clean(fin.std(ddof=1)) if len(fin) > 1 else None
                rec[f"{metric}_ci"] = _interval(d)
                rec[f"{metric}_seed_std"] = clean(sub[metric].std(ddof=0)) if len(sub) else None
                for ref in refs:
                    if ref == method or ref not in comp.preds:
                        continue
                    other = comp.rows[(comp.rows.method == ref) & (comp.rows.group == g)][metric].mean()
                    rec[f"{metric}_diff_{ref}"] = clean(sub[metric].mean() - other)
                    rec[f"{metric}_diff_{ref}_ci"] = _interval(d - draws[ref][metric])
            out[g][method] = rec
    return out


# --------------------------------------------------------------------------- ablation
def ablation(data: ItemData, split: Split, losses=rank.LOSSES, seeds: int = 5, cfg: Config | None = None,
             done: dict[str, list[rank.Fit]] | None = None, progress=None, memo=None) -> Comparison:
    """BenchAlign with each ranking loss (same protocol, folds and settings): a :class:`Comparison`
    whose methods are the losses (rows per loss, seed, group with the chosen step; predictions for
    :func:`summarise`'s bootstrap). ``done`` holds fits already made (e.g. the comparison's
    BenchAlign for ``cfg.loss``), reused instead of refitted; ``memo`` keeps each loss's fits."""
    cfg = cfg or Config()
    memo = memo or Memo(None)
    preds, steps = {}, {}
    for loss in losses:
        fits = (done or {}).get(loss) or memo(
            f"ablation-{loss}", partial(cv_fits, data, [rank.Task(split.source, s) for s in range(seeds)], cfg, loss))
        preds[loss] = np.array([f.scores(data.X) for f in fits])
        steps[loss] = [f.step for f in fits]
        advance(progress, f"ablation {loss}")
    comp = comparison(preds, data.target, split)
    comp.rows.insert(3, "step", [steps[m][s] for m, s in zip(comp.rows.method, comp.rows.seed)])
    return comp


# --------------------------------------------------------------------------- within groups of the flag
WITHIN_METHODS = ("no_alignment", "param_count", "benchalign")
WITHIN_GROUPS = {"instruct": True, "base": False}     # label -> the flag value kept


def within_groups(data: ItemData, split: Split, seeds: int = 5, cfg: Config | None = None, n_boot: int = 1000,
                  progress=None, memo=None) -> dict:
    """Source and test models restricted to instruction-tuned only and to base only (where the flag
    is constant, so it cannot explain a ranking): :data:`WITHIN_METHODS` on each, with paired
    differences (same test models, same bootstrap resamples) to no alignment and the parameter
    count. ``{label: {"counts", "notes", "main": {group: {method: record}}}}``; a label without a
    flag or without enough models holds ``skipped``."""
    memo = memo or Memo(None)
    out = {}
    for label, value in WITHIN_GROUPS.items():
        if data.instruct is None:
            out[label] = {"skipped": "the item data carries no instruction-tuned flag"}
            advance(progress, f"within {label}")
            continue
        sub = restrict(split, data.instruct == value)
        rec = {"counts": sub.counts(), "notes": sub.notes}
        if not sub.groups or len(sub.source) < 4:
            rec["skipped"] = "; ".join(sub.notes) or "too few models"
        else:
            comp = memo(f"within-{label}", partial(compare, data, sub, WITHIN_METHODS, seeds, cfg))
            rec["main"] = summarise(comp, data.target, n_boot, refs=("no_alignment", "param_count"))
            rec["chosen_steps"] = [int(f.step) for f in comp.fits.get("benchalign", [])]
        out[label] = rec
        advance(progress, f"within {label}")
    return out


# --------------------------------------------------------------------------- subset sizes
SUBSET_STUDY = ("no_alignment", "benchalign", "metabench_like", "metabench_like+benchalign",
                "tinybenchmarks_like", "tinybenchmarks_like+benchalign")


def subset_sizes(data: ItemData, split: Split, fractions, seeds: int = 5, cfg: Config | None = None,
                 n_boot: int = 1000, progress=None, memo=None) -> dict:
    """The subset methods of :data:`SUBSET_STUDY` with ``subset_items`` = each fraction of the items,
    paired with no alignment and with BenchAlign on all items (does a subset plus alignment match
    alignment on every item?). ``{fraction: {"items": n, "main": {group: {method: record}}}}``."""
    from dataclasses import replace

    cfg = cfg or Config()
    out = {}
    for frac in fractions:
        n = subset_items(frac, data.X.shape[1])
        comp = compare(data, split, SUBSET_STUDY, seeds, replace(cfg, subset_items=n), memo=memo)
        out[f"{frac:g}"] = {"fraction": frac, "items": n,
                            "main": summarise(comp, data.target, n_boot, refs=("no_alignment", "benchalign"))}
        advance(progress, f"subsets {frac:g}")
    return out


# --------------------------------------------------------------------------- choosing source models
def spread_selection(data: ItemData, source: np.ndarray, k: int, seed: int) -> np.ndarray:
    """``k`` source models spread evenly over the range of their target ranks (uses every source
    model's target label: a selection made after the fact)."""
    y = data.target[source]
    order = np.argsort(y, kind="stable")
    pos = np.unique(np.round(np.linspace(0, len(order) - 1, min(k, len(order)))).astype(int))
    return np.sort(source[order[pos]])


def random_selection(data: ItemData, source: np.ndarray, k: int, seed: int) -> np.ndarray:
    """``k`` source models drawn at random (no label needed)."""
    return np.sort(np.random.default_rng(10_000 + seed).choice(source, size=k, replace=False))


def kcenter_selection(data: ItemData, source: np.ndarray, k: int, seed: int) -> np.ndarray:
    """``k`` source models chosen before any target label is known: greedy k-center (farthest-point)
    selection on the models' item-response vectors (Euclidean distance), starting from a model drawn
    with ``seed``; each next model is the one farthest from those already chosen."""
    X = np.asarray(data.X[source], dtype=np.float64)
    rng = np.random.default_rng(20_000 + seed)
    chosen = [int(rng.integers(len(source)))]
    dist = ((X - X[chosen[0]]) ** 2).sum(1)
    while len(chosen) < min(k, len(source)):
        nxt = int(np.argmax(dist))
        chosen.append(nxt)
        dist = np.minimum(dist, ((X - X[nxt]) ** 2).sum(1))
    return np.sort(source[chosen])


# kind of data-needs row -> how its source models are chosen
SELECTIONS: dict[str, Callable] = {
    "source_random": random_selection,
    "source_kcenter": kcenter_selection,
    "source_spread": spread_selection,
}


# --------------------------------------------------------------------------- data needs
def data_needs(data: ItemData, split: Split, source_counts=(10, 20, 40, 80), item_counts=(50, 100, 200, 400),
               seeds: int = 5, cfg: Config | None = None, progress=None, kinds=tuple(SELECTIONS),
               memo=None) -> pd.DataFrame:
    """Test rho/pair accuracy against the number of source models (chosen by each selection of
    :data:`SELECTIONS`) and of items (random subsets), BenchAlign under the cross-validated protocol
    next to no alignment on the same items. Counts above what the data has are skipped; the seeds
    of one (kind, count) run as one batch (``memo`` keeps its rows). Rows: kind, n, seed, group,
    method, metrics, step."""
    cfg = cfg or Config()
    memo = memo or Memo(None)
    frames = []
    M = data.X.shape[1]
    for kind, n in needs_jobs(split, source_counts, item_counts, M, kinds):
        frames.append(memo(f"needs-{kind}-{n}", partial(_needs_rows, data, split, kind, n, seeds, cfg, M)))
        advance(progress, f"data needs {kind} {n}")
    return pd.DataFrame([r for rows in frames for r in rows], columns=NEEDS_COLUMNS)


NEEDS_COLUMNS = ["kind", "n", "seed", "group", "method", "step", "spearman", "pair_acc"]


def _needs_rows(data: ItemData, split: Split, kind: str, n: int, seeds: int, cfg: Config, M: int) -> list[dict]:
    """The rows of one (kind, count) of :func:`data_needs`, its seeds fitted as one batch."""
    tasks = []
    for seed in range(seeds):
        if kind == "items":
            rng = np.random.default_rng(10_000 + seed)
            tasks.append(rank.Task(split.source, seed, np.sort(rng.choice(M, size=n, replace=False))))
        else:
            tasks.append(rank.Task(SELECTIONS[kind](data, split.source, n, seed), seed))
    rows = []
    for seed, (t, f) in enumerate(zip(tasks, cv_fits(data, tasks, cfg))):
        plain = data.X.mean(axis=1) if t.items is None else data.X[:, t.items].mean(axis=1)
        for method, sc in (("benchalign", f.scores(data.X)), ("no_alignment", plain)):
            for g, res in evaluate(sc, data.target, split.groups).items():
                rows.append({"kind": kind, "n": n, "seed": seed, "group": g, "method": method,
                             "step": f.step if method == "benchalign" else 0, **res})
    return rows


def needs_jobs(split: Split, source_counts, item_counts, n_items: int, kinds=tuple(SELECTIONS)) -> list:
    """The (kind, count) runs of :func:`data_needs`: the counts the data has models and items for."""
    jobs = [(kind, n) for kind in kinds for n in source_counts if 2 <= n <= len(split.source)]
    return jobs + [("items", n) for n in item_counts if 1 <= n <= n_items]


# --------------------------------------------------------------------------- across the two papers
CROSS_METHODS = tuple(m for m, spec in METHODS.items() if spec.headline)


def cross_paper(data: ItemData, source_max_b: float, test_min_b: float, seeds: int = 5,
                cfg: Config | None = None, n_boot: int = 1000, relative: bool = False) -> dict:
    """Can direct-evaluation scores predict the train-before-test ranking of larger models?
    :data:`CROSS_METHODS` compared as in the main comparison on ``data`` of
    :func:`lib.benchalign.data.load_cross_paper` (one feature per benchmark, so no alignment is the
    plain mean of the benchmark scores), with the learned weight per benchmark."""
    cfg = cfg or Config()
    group = f"size quantile {test_min_b:g}+" if relative else f"{test_min_b:g}B+"
    split = split_by_size(data, source_max_b, {group: test_min_b}, relative=relative)
    out = {"counts": split.counts(), "notes": split.notes, "source_max_b": source_max_b,
           "test_min_b": test_min_b, "benchmarks": list(data.item_benchmark)}
    if not split.groups or len(split.source) < 2:
        out["skipped"] = "; ".join(split.notes) or "too few models"
        return out
    comp = compare(data, split, CROSS_METHODS, seeds, cfg)
    out["comparison"] = summarise(comp, data.target, n_boot)[group]
    out["chosen_steps"] = {m: [int(f.step) for f in fs] for m, fs in comp.fits.items()}
    out["best_single"] = best_single_choice(data, split)
    W = np.array(comp.weights["benchalign"])
    out["weights"] = {b: {"mean": round(float(W[:, j].mean()), 5), "std": round(float(W[:, j].std()), 5)}
                      for j, b in enumerate(data.item_benchmark)}
    out["source_models"] = [data.models[i] for i in split.source]
    out["test_models"] = [data.models[i] for i in split.groups[group]]
    return out


# ------------------------------------------------------------------ the align command line, worked (notebook 07)
def example(data: ItemData, split, cfg, prefs_path, *, pairs_per_model: float = 5, flip: float = 0.0,
            seed: int = 0) -> dict:
    """Notebook 07's worked example, the same steps as the command line: Bradley-Terry pairs among the
    source models drawn from the target (:func:`bt_pairs`) written to ``prefs_path`` (CSV), read back,
    :func:`align` on every model's items, :func:`score` of every model, and the test groups' rho with
    the target for the aligned scores and for plain accuracy. ``{"bench", "scores", "summary"}``, or
    ``{"skipped": why}`` when the data cannot be aligned (the error line)."""
    w, lo, wrong = bt_pairs(data.target, split.source, pairs_per_model, flip, seed)
    prefs = pd.DataFrame({"winner": [data.models[i] for i in w], "loser": [data.models[i] for i in lo]})
    atomic_write_text(prefs_path, prefs.to_csv(index=False))
    items = Items.from_data(data)
    try:
        bench = align(items, read_preferences(prefs_path), seed=seed, folds=cfg.folds, lr=cfg.lr,
                      max_steps=cfg.max_steps, patience=cfg.patience, eval_every=cfg.eval_every, floor=cfg.floor)
    except AlignError as exc:                   # the file's name only: the summary is the same in every clone
        return {"skipped": str(exc).replace(str(prefs_path), Path(prefs_path).name)}
    scores = score(bench, items)
    by_model = scores.set_index("model").loc[data.models]
    ours = evaluate(by_model.aligned_score.to_numpy(), data.target, split.groups)
    plain = evaluate(by_model.plain_accuracy.to_numpy(), data.target, split.groups)
    test = {g: {"n_models": int(len(idx)), "aligned": clean(ours[g]["spearman"]),
                "plain": clean(plain[g]["spearman"])} for g, idx in split.groups.items()}
    summary = {"pairs_per_model": pairs_per_model, "flip": flip, "seed": seed, "wrong": clean(wrong),
               "preferences": bench["preferences"], "chosen_step": bench["settings"]["chosen_step"],
               "cv": bench["cv"], "test": test, "sha256": bench["sha256"]}
    return {"bench": bench, "scores": scores, "summary": summary}


# --------------------------------------------------------------------------- preferences from a latent score
def bt_pairs(latent: np.ndarray, rows: np.ndarray, pairs_per_model: float, flip: float, seed: int,
             beta: float = 4.0) -> tuple[np.ndarray, np.ndarray, float]:
    """Pairs among ``rows`` with a known ground truth: ``round(pairs_per_model * n / 2)`` distinct pairs
    drawn at random (all pairs when that many or more), the winner drawn by Bradley-Terry,
    ``P(i beats j) = sigmoid(beta (z_i - z_j))`` with ``z`` the latent standardised over ``rows``, then
    ``round(flip * pairs)`` of them flipped. Returns (winner rows, loser rows, share of pairs that
    disagree with the latent, ties counted 1/2)."""
    rng = np.random.default_rng([seed, int(round(flip * 1000)), int(round(pairs_per_model * 1000))])
    rows = np.asarray(rows, dtype=int)
    n = len(rows)
    iu, ju = np.triu_indices(n, 1)
    k = int(round(pairs_per_model * n / 2))
    pick = np.arange(len(iu)) if k >= len(iu) else np.sort(rng.choice(len(iu), k, replace=False))
    a, b = iu[pick], ju[pick]
    z = np.asarray(latent, dtype=np.float64)[rows]
    z = (z - z.mean()) / max(z.std(), 1e-12)
    a_wins = rng.random(len(a)) < 1.0 / (1.0 + np.exp(-beta * (z[a] - z[b])))
    win, lose = np.where(a_wins, a, b), np.where(a_wins, b, a)
    flipped = rng.choice(len(win), int(round(flip * len(win))), replace=False)
    win[flipped], lose[flipped] = lose[flipped], win[flipped].copy()
    wrong = float(np.mean(np.where(z[win] < z[lose], 1.0, np.where(z[win] == z[lose], 0.5, 0.0))))
    return rows[win], rows[lose], wrong


def noise_study(data: ItemData, split, cfg, *, flips=(0.0, 0.1, 0.2, 0.3, 0.4), pairs_per_model=(2, 10, 0),
                seeds: int = 3, beta: float = 4.0, n_boot: int = 1000) -> dict:
    """BenchAlign fitted on Bradley-Terry pairs among the source models, drawn from the target of
    ``data`` as the known latent (:func:`bt_pairs`), for every share of flipped pairs x pairs per model
    (``0`` = all pairs) and seed, in one run of :func:`lib.benchalign.rank.fit_pairs_many`, beside the
    methods of the registry that learn nothing from the target; summarised as :func:`summarise` does."""
    source = np.asarray(split.source, dtype=int)
    if len(source) < MIN_MODELS or not split.groups:
        return {"skipped": f"{len(source)} source model(s) and {len(split.groups)} test group(s): need at least "
                           f"{MIN_MODELS} source models and a test group"}
    conds = [(fl, ppm) for ppm in pairs_per_model for fl in flips]
    tasks, info = [], {}
    for fl, ppm in conds:
        for seed in range(seeds):
            w, lo, wrong = bt_pairs(data.target[source], np.arange(len(source)), ppm or len(source), fl, seed, beta)
            tasks.append(rank.PairTask(w, lo, seed=seed))
            info.setdefault(_cond(fl, ppm), {"flip": fl, "pairs_per_model": ppm, "pairs": len(w), "wrong": []})
            info[_cond(fl, ppm)]["wrong"].append(wrong)
    fits = rank.fit_pairs_many(data.X[source], tasks, folds=cfg.folds, lr=cfg.lr, max_steps=cfg.max_steps,
                               patience=cfg.patience, eval_every=cfg.eval_every, floor=cfg.floor)
    preds = {name: np.array([o.scores for o in run_method(name, data, source, range(seeds), cfg)])
             for name, m in METHODS.items() if not m.learns and (data.instruct is not None or not m.flag)}
    for c, (fl, ppm) in enumerate(conds):
        preds[_cond(fl, ppm)] = np.array([fi.scores(data.X) for fi in fits[c * seeds:(c + 1) * seeds]])
        info[_cond(fl, ppm)]["chosen_steps"] = [int(fi.step) for fi in fits[c * seeds:(c + 1) * seeds]]
    comp = comparison(preds, data.target, split)
    for v in info.values():
        v["wrong"] = clean(float(np.mean(v["wrong"])))
    return {"summary": summarise(comp, data.target, n_boot), "conditions": info, "beta": beta, "seeds": seeds,
            "baselines": [m for m in preds if m not in info], "rows": comp.rows}


def _cond(flip: float, ppm: int) -> str:
    return f"pairs flip={flip:.2f} per_model={ppm or 'all'}"


def ordered_conditions(conditions: dict) -> list[str]:
    """Condition names by pairs per model (all last), then share flipped (summary.json sorts its keys)."""
    return sorted(conditions, key=lambda n: (conditions[n]["pairs_per_model"] or np.inf, conditions[n]["flip"]))


def noise_table(study: dict) -> pd.DataFrame:
    """One row per condition and baseline: pairs, share disagreeing with the latent, and per test group
    rho [95 %] with the paired difference to plain accuracy."""
    out = []
    for name in [*study["baselines"], *ordered_conditions(study["conditions"])]:
        c = study["conditions"].get(name, {})
        r = {"method": name, "flipped": c.get("flip"), "pairs_per_model": c.get("pairs_per_model"),
             "pairs": c.get("pairs"), "wrong_share": c.get("wrong")}
        for g, ms in study["summary"].items():
            rec = ms[name]
            r[f"{g} rho"] = rec["spearman"]
            r[f"{g} rho ci"] = rec["spearman_ci"]
            r[f"{g} diff plain"] = rec.get("spearman_diff_no_alignment")
            r[f"{g} diff plain ci"] = rec.get("spearman_diff_no_alignment_ci")
        out.append(r)
    return pd.DataFrame(out)
