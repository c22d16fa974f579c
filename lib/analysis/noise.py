"""Measurement noise: how reliably does a benchmark rank models, and how high could agreement be?

A benchmark scores each model on a finite sample of test items, so its scores carry sampling
noise, and two benchmarks whose true rankings are identical still disagree by that noise. Per
benchmark and protocol this module estimates how reliable the benchmark's model ranking is, and
from that the **noise ceiling** of Kendall tau between two benchmarks: the tau they would show if
they ranked the models identically in truth and differed only by their measurement noise.

**The estimator** (one for every profile; only the source of the half-tests differs):

1. *Half-tests.* The benchmark's test is split into two random halves and every model is scored on
   each half, ``halvings`` times. Per-item results (our own profiles,
   ``outputs/<profile>/work/items/<protocol>/<benchmark>/<model>.json``) are split for real (items
   every model has; an odd item out is left out so the halves are equal). Where only a score s and
   its standard error se exist (the published results), the halves are drawn from their
   distribution given the score: h = s + d and s - d with d ~ N(0, se^2). Two independent
   half-length measurements whose mean is s have exactly this distribution when the noise is
   normal (each half has variance 2 se^2, their mean se^2), so both sources estimate the same thing.
2. *Split-half reliability of the ranking.* Kendall tau-b between the two halves' scores across
   models, averaged over the halvings, is turned into a correlation rho_half = sin(pi tau / 2)
   (Greiner's relation) and corrected to the full test with Spearman-Brown,
   rho = 2 rho_half / (1 + rho_half) (0 when rho_half <= 0): ``reliability``.
   ``tau_reliability`` = (2 / pi) arcsin(rho) is the tau expected between two independent full
   runs of the benchmark.
3. *Noise ceiling of a pair.* Two measures whose true scores correlate perfectly correlate at most
   sqrt(rho_a rho_b) (classical attenuation); on the tau scale
   ``ceiling`` = (2 / pi) arcsin(sqrt(rho_a rho_b)). ``corrected`` = tau / ceiling: 1 means all of
   the remaining disagreement is noise, well below 1 means the rankings really differ.

**Assumptions.** Noise is independent across models, benchmarks and the two halves (a random
halving makes the halves parallel tests); true scores and noise are linked by a Gaussian copula,
which the tau <-> correlation conversions and Spearman-Brown need (they are exact for bivariate
normal scores); item scores are averaged (that is the metric for accuracy and exact match; for a
metric that is not an item mean, such as Matthews correlation, the halves score item accuracy as a
stand-in). The tests check the estimator on synthetic benchmarks with known truth: a pair with
identical true rankings comes out near its ceiling, independent rankings near zero.

A benchmark without per-item results *and* without standard errors (the published perplexity
corpora store "N/A") is listed in :attr:`Measurements.missing`, reported in one line and left out
of every ceiling: it is never treated as noise-free.

**Measurement quality** (:func:`quality_table`), per benchmark and protocol: mean score and its
position between chance (:attr:`lib.metadata.Benchmark.chance`) and the ceiling of the metric (1),
the typical standard error of a model's score (root mean square over models), the spread
(standard deviation) of model scores, the standard error of a difference between two models
relative to the typical difference between two models (``se_to_gap`` = sqrt(2) typical se / mean
|s_i - s_j| over model pairs), and the split-half
reliability above. A benchmark is flagged as unable to rank the models (``cannot_rank``) when its
mean lies outside [chance + 0.1, 0.9], when ``se_to_gap`` exceeds 0.5 (a typical pair of models
differs by less than two standard errors of the difference), or when its reliability is below 0.8.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from .. import layout, store
from ..util import note_read
from . import uncertainty

HALVINGS = 100               # random halvings averaged
NEAR_CHANCE = 0.1            # mean must exceed chance by this much ...
NEAR_CEILING = 0.9           # ... and stay below this
MAX_SE_TO_GAP = 0.5          # se of a difference / typical difference between two models
MIN_RELIABILITY = 0.8        # split-half (Spearman-Brown) reliability
ITEMS, STDERR, MISSING = "items", "standard errors", "missing"


@dataclass
class Measurements:
    """One protocol's scores with what is known about their noise (rows: models, columns: benchmarks)."""
    protocol: str
    scores: pd.DataFrame
    stderr: pd.DataFrame                                   # per-item: sd / sqrt(items); else the store's
    source: dict[str, str]                                 # benchmark -> ITEMS | STDERR | MISSING
    items: dict[str, np.ndarray] = field(default_factory=dict)   # benchmark -> models x items (scores' rows)

    @property
    def missing(self) -> list[str]:
        return [b for b, s in self.source.items() if s == MISSING]

    def n_items(self, benchmark: str) -> int | None:
        return int(self.items[benchmark].shape[1]) if benchmark in self.items else None


def _read_items(work, protocol: str, benchmark: str, models: list[str]) -> np.ndarray | None:
    """models x items correctness on the doc ids every model has; None unless every model has a file."""
    per = {}
    for m in models:
        path = layout.items_path(work, protocol, benchmark, m)
        if not path.exists():
            return None
        data = layout.read_items(path)
        per[m] = dict(zip(data["doc_ids"], data["correct"]))
    common = set.intersection(*(set(v) for v in per.values())) if per else set()
    ids = sorted(common, key=str)
    if not ids:
        return None
    return np.array([[float(per[m][i]) for i in ids] for m in models])


def load_measurements(df: pd.DataFrame, protocol: str, benchmarks: list[str], work: str | Path | None = None,
                      models: list[str] | None = None) -> Measurements:
    """Scores of ``benchmarks`` under ``protocol`` with their noise: per-item results from
    ``<work>/items/<protocol>/<benchmark>/`` where every scored model has a file, else the store's
    standard errors where every model has one, else the benchmark is MISSING.

    ``models`` fixes the rows (default: the models scored on any of ``benchmarks``); a model not
    scored on a benchmark has NaN there and is left out of that benchmark's estimates.
    """
    sub = df[(df["protocol"] == protocol) & (df["benchmark"].isin(benchmarks))]
    scores = sub.pivot(index="model", columns="benchmark", values="score").reindex(columns=benchmarks)
    ses = sub.pivot(index="model", columns="benchmark", values="stderr").reindex(columns=benchmarks)
    if models is not None:
        scores, ses = scores.reindex(models), ses.reindex(models)
    scores.columns.name = ses.columns.name = None
    ses = ses.astype(float)
    if work is not None:
        note_read(layout.items_dir(work, protocol))
    source, items = {}, {}
    for b in benchmarks:
        scored = list(scores.index[scores[b].notna()])
        mat = None
        if work is not None and layout.items_dir(work, protocol, b).is_dir() and scored:
            mat = _read_items(work, protocol, b, scored)
        if mat is not None:
            full = np.full((len(scores), mat.shape[1]), np.nan)
            full[[scores.index.get_loc(m) for m in scored]] = mat
            items[b] = full
            n_ok = np.isfinite(mat).sum(axis=1)
            sd = np.nanstd(mat, axis=1, ddof=1) if mat.shape[1] > 1 else np.full(len(mat), np.nan)
            ses.loc[scored, b] = sd / np.sqrt(np.maximum(n_ok, 1))
            source[b] = ITEMS
        elif scored and ses.loc[scored, b].notna().all():
            source[b] = STDERR
        else:
            source[b] = MISSING
    return Measurements(protocol, scores, ses, source, items)


# --------------------------------------------------------------------------- half-tests
def halves(meas: Measurements, benchmark: str, halvings: int = HALVINGS,
           seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Two (models x halvings) arrays of half-test scores (NaN for models not scored)."""
    rng = np.random.default_rng(seed)
    if meas.source[benchmark] == ITEMS:
        mat = meas.items[benchmark]
        scored = np.isfinite(meas.scores[benchmark].to_numpy(float))
        keep = np.isfinite(mat[scored]).all(axis=0)              # items every scored model has
        mat = np.where(np.isfinite(mat), mat, 0.0)[:, keep]
        n_items = mat.shape[1]
        half = n_items // 2
        if half < 1:
            return np.full((len(mat), halvings), np.nan), np.full((len(mat), halvings), np.nan)
        rank = np.argsort(np.argsort(rng.random((halvings, n_items)), axis=1), axis=1)
        first = (rank < half).astype(float).T                    # items x halvings
        second = (rank >= n_items - half).astype(float).T
        h1, h2 = mat @ first / half, mat @ second / half
        h1[~scored], h2[~scored] = np.nan, np.nan
        return h1, h2
    if meas.source[benchmark] == STDERR:
        s = meas.scores[benchmark].to_numpy(float)[:, None]
        se = meas.stderr[benchmark].to_numpy(float)[:, None]
        d = rng.normal(size=(len(s), halvings)) * se
        return s + d, s - d
    raise ValueError(f"benchmark {benchmark!r} ({meas.protocol}) has neither per-item results nor standard errors")


def tau_to_rho(tau):
    """Greiner's relation: the correlation of a bivariate normal whose Kendall tau is ``tau``."""
    return np.sin(np.pi * np.asarray(tau, float) / 2)


def rho_to_tau(rho):
    return 2 / np.pi * np.arcsin(np.clip(np.asarray(rho, float), -1, 1))


def spearman_brown(rho_half):
    """Reliability of the full test from the correlation of its two halves (0 when it is <= 0)."""
    r = np.asarray(rho_half, float)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(r > 0, 2 * r / (1 + r), np.where(np.isfinite(r), 0.0, np.nan))


def split_half(meas: Measurements, benchmark: str, halvings: int = HALVINGS, seed: int = 0,
               min_models: int = 3) -> dict[str, float]:
    """``{"tau_half", "reliability", "tau_reliability", "halvings_used"}`` of one benchmark (NaN
    when its scores cannot be split, e.g. constant on every half)."""
    taus = uncertainty.paired_tau(*halves(meas, benchmark, halvings, seed), min_models=min_models)
    used = int(np.isfinite(taus).sum())
    tau_half = float(np.nanmean(taus)) if used else float("nan")
    rel = float(spearman_brown(tau_to_rho(tau_half)))
    return {"tau_half": tau_half, "reliability": rel, "tau_reliability": float(rho_to_tau(rel)),
            "halvings_used": used}


def reliabilities(meas: Measurements, halvings: int = HALVINGS, seed: int = 0, min_models: int = 3) -> pd.DataFrame:
    """One row per benchmark: source, n_items and :func:`split_half`'s numbers (the k-th benchmark
    uses seed ``seed + k``; NaN for MISSING benchmarks)."""
    rows = []
    for k, b in enumerate(meas.scores.columns):
        row = {"benchmark": b, "source": meas.source[b], "n_items": meas.n_items(b)}
        if meas.source[b] == MISSING:
            row.update(tau_half=np.nan, reliability=np.nan, tau_reliability=np.nan, halvings_used=0)
        else:
            row.update(split_half(meas, b, halvings, seed + k, min_models))
        rows.append(row)
    return pd.DataFrame(rows).set_index("benchmark")


# --------------------------------------------------------------------------- ceiling
def ceiling(rel_a, rel_b):
    """Noise ceiling of Kendall tau between two benchmarks with reliabilities ``rel_a``, ``rel_b``."""
    return rho_to_tau(np.sqrt(np.asarray(rel_a, float) * np.asarray(rel_b, float)))


def ceiling_pairs(pairs: pd.DataFrame, rel: dict[str, pd.Series], protocols=store.PROTOCOLS) -> pd.DataFrame:
    """``pairs`` (a, b, tau_<p>, ...) plus ceiling_<p> and corrected_<p> = tau / ceiling per protocol;
    NaN where a benchmark's reliability is unknown (missing noise) or the ceiling is 0."""
    out = pairs[["a", "b"] + [f"tau_{p}" for p in protocols]].copy()
    for p in protocols:
        r = rel[p]
        ra = out["a"].map(r).astype(float).to_numpy()
        rb = out["b"].map(r).astype(float).to_numpy()
        ceil = ceiling(ra, rb)
        out[f"ceiling_{p}"] = ceil
        with np.errstate(invalid="ignore", divide="ignore"):
            out[f"corrected_{p}"] = np.where(ceil > 0, out[f"tau_{p}"].to_numpy(float) / ceil, np.nan)
    return out


def ceiling_summary(table: pd.DataFrame, protocols=store.PROTOCOLS) -> dict:
    """Per protocol, over the pairs where tau and ceiling are both known: number of pairs, how many of
    them lie above their estimated ceiling (``n_above``), mean tau, mean ceiling, their ratio and the
    mean corrected tau."""
    out = {}
    for p in protocols:
        ok = table.dropna(subset=[f"tau_{p}", f"ceiling_{p}"])
        mt, mc = ok[f"tau_{p}"].mean(), ok[f"ceiling_{p}"].mean()
        out[p] = {"n_pairs": int(len(ok)), "n_above": int((ok[f"tau_{p}"] > ok[f"ceiling_{p}"]).sum()),
                  "mean_tau": float(mt) if len(ok) else math.nan,
                  "mean_ceiling": float(mc) if len(ok) else math.nan,
                  "ratio": float(mt / mc) if len(ok) and mc > 0 else math.nan,
                  "mean_corrected": float(ok[f"corrected_{p}"].mean()) if len(ok) else math.nan}
    return out


def ceiling_per_benchmark(table: pd.DataFrame, protocols=store.PROTOCOLS) -> pd.DataFrame:
    """Per benchmark: mean tau and mean ceiling against the others, per protocol (pairs with both)."""
    frames = []
    for p in protocols:
        ok = table.dropna(subset=[f"tau_{p}", f"ceiling_{p}"])
        long = pd.concat([ok[["a", f"tau_{p}", f"ceiling_{p}"]].rename(columns={"a": "benchmark"}),
                          ok[["b", f"tau_{p}", f"ceiling_{p}"]].rename(columns={"b": "benchmark"})])
        frames.append(long.groupby("benchmark")[[f"tau_{p}", f"ceiling_{p}"]].mean())
    out = pd.concat(frames, axis=1)
    for p in protocols:
        out[f"ratio_{p}"] = out[f"tau_{p}"] / out[f"ceiling_{p}"].where(out[f"ceiling_{p}"] > 0)
    return out


def missing_line(measurements: dict[str, Measurements]) -> str | None:
    """One line naming the benchmarks without any noise estimate, per protocol (None when none)."""
    parts = [f"{p}: {', '.join(m.missing)}" for p, m in measurements.items() if m.missing]
    if not parts:
        return None
    return ("no per-item results and no standard errors, so no reliability and no noise ceiling (left out, "
            "not treated as noise-free) for " + "; ".join(parts))


# --------------------------------------------------------------------------- quality
def quality_table(measurements: dict[str, Measurements], chance: dict[str, float | None],
                  rel: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """One row per (benchmark, protocol): can this benchmark rank these models? (see the module
    docstring for the columns and the flag). ``rel``: :func:`reliabilities` per protocol."""
    rows = []
    for p, meas in measurements.items():
        r = rel[p]
        for b in meas.scores.columns:
            s = meas.scores[b].dropna()
            se = meas.stderr[b].reindex(s.index)
            c = chance.get(b)
            n = len(s)
            gap = float(np.abs(s.to_numpy()[:, None] - s.to_numpy()[None, :])[np.triu_indices(n, 1)].mean()) \
                if n > 1 else math.nan
            typical = float(np.sqrt(np.mean(se.to_numpy(float) ** 2))) if meas.source[b] != MISSING else math.nan
            row = {"benchmark": b, "protocol": p, "source": meas.source[b], "n_models": n,
                   "n_items": meas.n_items(b), "chance": c if c is not None else math.nan,
                   "mean": float(s.mean()) if n else math.nan,
                   "position": (float(s.mean()) - c) / (1 - c) if c is not None and c < 1 and n else math.nan,
                   "typical_se": typical, "spread": float(s.std(ddof=1)) if n > 1 else math.nan,
                   "mean_gap": gap,
                   "se_to_gap": math.sqrt(2) * typical / gap if gap and gap > 0 else math.nan,
                   "reliability": float(r.loc[b, "reliability"]),
                   "tau_reliability": float(r.loc[b, "tau_reliability"])}
            reasons = []
            if c is not None and n and not (c + NEAR_CHANCE <= row["mean"] <= NEAR_CEILING):
                reasons.append(f"mean {row['mean']:.2f} outside [chance + {NEAR_CHANCE:g}, {NEAR_CEILING:g}]")
            if meas.source[b] == MISSING:
                reasons.append("noise unknown")
            elif not np.isfinite(row["se_to_gap"]) or row["se_to_gap"] > MAX_SE_TO_GAP:
                reasons.append(f"se of a difference {row['se_to_gap']:.2f} of the typical gap")
            if meas.source[b] != MISSING and not np.isfinite(row["reliability"]):
                reasons.append("reliability undefined (scores too tied to split)")
            elif meas.source[b] != MISSING and row["reliability"] < MIN_RELIABILITY:
                reasons.append(f"reliability {row['reliability']:.2f} < {MIN_RELIABILITY:g}")
            row["cannot_rank"] = bool(reasons)
            row["reasons"] = "; ".join(reasons)
            rows.append(row)
    return pd.DataFrame(rows)
