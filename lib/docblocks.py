"""Results tables in README.md and docs/*.md, written from the runs' ``summary.json`` files.

A results table in the documentation lives between two markers that name a profile and a table::

    <!-- results:published/agreement -->
    | ... the table, generated ... |
    <!-- /results -->

``make docs`` (``python -m lib.docblocks write``) rewrites every block of a profile whose outputs
exist from :data:`TABLES` (one function per table, reading the profile's summaries) and copies the
headline figure; ``make check-docs`` (``python -m lib.docblocks check``) renders the same tables
and lists every line whose numbers differ from what is quoted (file, line, quoted, measured),
exiting 1. So a number in a table is never typed by hand, and a run that moves it makes the check
fail until ``make docs`` is run. ``make all`` ends with ``check --warn``: one line, never a failure.
Prose keeps few numbers; where it must, the sentence points at the table that holds them.
"""

from __future__ import annotations

import argparse
import itertools
import math
import re
import shutil
import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lib import paths, util

START = re.compile(r"^<!-- results:(?P<profile>[A-Za-z0-9_]+)/(?P<table>[A-Za-z0-9_-]+) -->\s*$")
END = "<!-- /results -->"
NUMBER = re.compile(r"[-+]?\d+(?:,\d{3})*(?:\.\d+)?")
# The figure at the top of README.md: written by `make docs` from the published profile's outputs.
HEADLINE = ("published", "04_rank_agreement", "figures/tau_heatmaps.png", "docs/figures/headline.png")


def doc_files(root: Path | None = None) -> list[Path]:
    """README.md and every Markdown file under docs/: where results blocks may live."""
    root = root or paths.ROOT
    return [root / "README.md", *sorted((root / "docs").rglob("*.md"))]


# ----------------------------------------------------------------------------- reading a profile's outputs
class Missing(Exception):
    """A summary the table needs has not been written (its profile or stage has not run)."""


class Summaries:
    """The ``summary.json`` files of one profile, read once each."""

    def __init__(self, profile: str):
        self.profile = profile
        self._cache: dict[str, dict] = {}

    def __call__(self, stage: str) -> dict:
        if stage not in self._cache:
            path = paths.stage_dir(self.profile, stage) / "summary.json"
            if not path.exists():
                raise Missing(f"outputs/{self.profile}/{stage}/summary.json is missing "
                              f"(`make run PROFILE={self.profile} STAGES={stage[:2]}`)")
            self._cache[stage] = util.read_json(path, rebuild=f"make run PROFILE={self.profile} STAGES={stage[:2]}")
        return self._cache[stage]


# ----------------------------------------------------------------------------- number formats
def f(x: Any, digits: int = 2, sign: bool = False) -> str:
    """A number as the tables print it (``-0.00`` becomes ``0.00``; NaN and None print ``n/a``)."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    text = f"{x:+.{digits}f}" if sign else f"{x:.{digits}f}"
    return text.replace("-0." + "0" * digits, "0." + "0" * digits).replace("+0." + "0" * digits, "0." + "0" * digits) \
        if float(text) == 0 else text


def ci(pair: Any, digits: int = 2, sign: bool = False) -> str:
    """A 95 % interval ``[lo, hi]``."""
    lo, hi = pair
    return f"[{f(lo, digits, sign)}, {f(hi, digits, sign)}]"


def est(x: Any, pair: Any, digits: int = 2, sign: bool = False, ci_sign: bool | None = None) -> str:
    """An estimate with its interval: ``0.52 [0.45, 0.57]``; a signed estimate (a difference) has a
    signed interval unless ``ci_sign`` is False (a gain whose interval is read as a range)."""
    return f"{f(x, digits, sign)} {ci(pair, digits, sign if ci_sign is None else ci_sign)}"


def pair(values: dict, intervals: dict, key: str) -> str:
    """``values[key]`` with ``intervals[key]``."""
    return est(values[key], intervals[key])


def gain(x: Any, pair: Any, digits: int = 2) -> str:
    """A paired gain: ``+0.24 [0.20, 0.29]``."""
    return est(x, pair, digits, sign=True, ci_sign=False)


def pct(x: Any, digits: int = 0) -> str:
    """A share as a percentage: ``62 %``."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    return f"{100 * x:.{digits}f} %"


def row(*cells: Any) -> str:
    return "| " + " | ".join(str(c) for c in cells) + " |"


def header(*cells: str) -> list[str]:
    return [row(*cells), row(*["---"] * len(cells))]


# ----------------------------------------------------------------------------- the tables
Table = Callable[[Summaries], list[str]]
TABLES: dict[str, Table] = {}


def table(name: str) -> Callable[[Table], Table]:
    """Register a table under ``name`` (the part after the profile in a block's marker)."""
    def register(fn: Table) -> Table:
        TABLES[name] = fn
        return fn
    return register


D, T = "direct_eval", "train_before_test"


@table("agreement")
def agreement_table(s: Summaries) -> list[str]:
    """The three results of the paper (04, 05, 06) under both protocols, with paired gains."""
    a, p, c = s("04_rank_agreement"), s("05_perplexity"), s("06_pca")
    n_pairs = a["n_pairs_compared"]
    out = header("", "direct evaluation", "train-before-test")
    out.append(row(f"mean Kendall tau over {n_pairs} benchmark pairs, {a['n_models'][D]} models (04)",
                   est(a["mean_tau"][D], a["mean_tau_ci"][D]), est(a["mean_tau"][T], a["mean_tau_ci"][T])))
    out.append(row("gain in mean tau, paired (04)", "", gain(a["mean_tau_gain"], a["mean_tau_gain_ci"])))
    lo, hi = a["pairs_improved_ci"]
    out.append(row("pairs whose tau improves (04)", "", f"{a['pairs_improved']} of {n_pairs} [{lo:.0f}, {hi:.0f}]"))
    ceil = a["noise_ceiling"]
    out.append(row("mean tau / mean noise ceiling (04)",
                   *(f"{f(ceil[k]['mean_tau'])} / {f(ceil[k]['mean_ceiling'])} ({pct(ceil[k]['ratio'])})"
                     for k in (D, T))))
    out.append(row("PC1 share of variance, standardised columns (06)",
                   *(pair(c["pc1_explained"], c["pc1_explained_ci"], k) for k in (D, T))))
    out.append(row("gain in PC1 share, paired (06)", "", gain(c["pc1_gain"], c["pc1_gain_ci"])))
    comp = c["pc1_vs_log_compute"]
    out.append(row(f"Pearson r(PC1, log pre-training compute), {comp[D]['all']['n_models']} models (06)",
                   *(est(comp[k]["all"]["pearson_r"], c["pc1_vs_log_compute_r_ci"][k]["all"]) for k in (D, T))))
    tau, tci, n = p["tau_average"], p["tau_average_ci"], p["n_models"]["direct"]["all"]
    out.append(row(f"tau(mean bits-per-byte, mean downstream), {n} models (05)",
                   est(tau["direct"]["all"], tci["direct"]["all"]),
                   est(tau["train_before_test"]["all"], tci["train_before_test"]["all"])))
    return out


# The paper's own numbers, for the published profile's comparison column (Zhang et al.; quoted, not measured).
PAPER = {"mean_tau": "0.52 -> 0.76", "nq_open": "outlier -> in line", "perplexity": "re-aligned",
         "pc1": "nearly rank one"}


@table("headline")
def headline_table(s: Summaries) -> list[str]:
    """README's table of the published profile: 04, 05, 06 next to what the paper reports."""
    a, p, c = s("04_rank_agreement"), s("05_perplexity"), s("06_pca")
    n_pairs, low = a["n_pairs_compared"], a["lowest_benchmark"][D]
    bt, bci = a["benchmark_mean_tau"][low], a["benchmark_mean_tau_ci"][low]
    tau, tci = p["tau_average"], p["tau_average_ci"]
    out = header("", "direct evaluation", "train-before-test", "paper")
    out.append(row(f"mean Kendall tau over {n_pairs} benchmark pairs (04)", est(a["mean_tau"][D], a["mean_tau_ci"][D]),
                   est(a["mean_tau"][T], a["mean_tau_ci"][T]), PAPER["mean_tau"]))
    out.append(row("gain in mean tau, paired (04)", "", gain(a["mean_tau_gain"], a["mean_tau_gain_ci"]), ""))
    lo, hi = a["pairs_improved_ci"]
    out.append(row("pairs whose tau improves (04)", "", f"{a['pairs_improved']} of {n_pairs} [{lo:.0f}, {hi:.0f}]", ""))
    out.append(row(f"{_name(low)}'s mean tau against the other {a['n_benchmarks'] - 1} (04)", est(bt[D], bci[D]),
                   est(bt[T], bci[T]), PAPER["nq_open"]))
    out.append(row("within-category mean tau (04)",
                   *(pair(a["category_within_mean_tau"], a["category_within_mean_tau_ci"], k) for k in (D, T)), ""))
    out.append(row(f"tau(mean bits-per-byte, mean downstream), {p['n_models']['direct']['all']} models (05)",
                   est(tau["direct"]["all"], tci["direct"]["all"]),
                   est(tau["train_before_test"]["all"], tci["train_before_test"]["all"]), PAPER["perplexity"]))
    out.append(row("... base / instruct models only (05)",
                   *(f"{est(tau[k]['base'], tci[k]['base'])} / {est(tau[k]['instruct'], tci[k]['instruct'])}"
                     for k in ("direct", "train_before_test")), ""))
    share = {k: f"{pct(c['pc1_explained'][k], 1)} {ci([100 * v for v in c['pc1_explained_ci'][k]], 0)}" for k in (D, T)}
    out.append(row("PC1 share of variance, standardised columns (06)", share[D], share[T], PAPER["pc1"]))
    out.append(row("gain in PC1 share, paired (06)", "",
                   f"{f(100 * c['pc1_gain'], 1, sign=True)} points {ci([100 * v for v in c['pc1_gain_ci']], 0)}", ""))
    comp = c["pc1_vs_log_compute"]
    out.append(row(f"Pearson r(PC1, log10 pre-training FLOPs), {comp[D]['all']['n_models']} models (06)",
                   *(est(comp[k]["all"]["pearson_r"], c["pc1_vs_log_compute_r_ci"][k]["all"]) for k in (D, T)), ""))
    return out


def _name(benchmark: str) -> str:
    return {"nq_open": "NQ-Open", "sst2": "SST-2", "wic": "WiC"}.get(benchmark, benchmark)


@table("noise")
def noise_table(s: Summaries) -> list[str]:
    """04's noise ceiling: how much of the agreement measurement noise alone would allow is reached."""
    a = s("04_rank_agreement")
    ceil, low = a["noise_ceiling"], a["lowest_benchmark"][D]
    bench = ceil["benchmark"][low]
    out = header("", "direct evaluation", "train-before-test")
    out.append(row(f"mean tau / mean noise ceiling over {ceil[D]['n_pairs']} pairs",
                   *(f"{f(ceil[k]['mean_tau'])} / {f(ceil[k]['mean_ceiling'])}" for k in (D, T))))
    out.append(row("ratio (share of the ceiling reached)", *(f(ceil[k]["ratio"]) for k in (D, T))))
    out.append(row(f"{_name(low)}: mean tau / mean ceiling against the others",
                   *(f"{f(bench[k]['mean_tau'])} / {f(bench[k]['mean_ceiling'])}" for k in (D, T))))
    out.append(row(f"{_name(low)}: reliability of its ranking", *(f(bench[k]["reliability"]) for k in (D, T))))
    return out


@table("robustness")
def robustness_table(s: Summaries) -> list[str]:
    """04 and 06: the paired gains on subsets of the models (a family left out, base or instruct only)."""
    a, c = s("04_rank_agreement")["robustness"], s("06_pca")["robustness"]
    out = header("models", "n", "gain in mean tau (04)", "gain in PC1 share (06)")
    for subset, rec in a.items():
        pc = c.get(subset)
        out.append(row(subset, rec["n_models"], gain(rec["gain"], rec["gain_ci"]),
                       gain(pc["gain"], pc["gain_ci"]) if pc else "n/a"))
    return out


@table("perplexity")
def perplexity_table(s: Summaries) -> list[str]:
    """05: Kendall tau between the mean bits-per-byte ranking and the mean downstream ranking."""
    p = s("05_perplexity")
    tau, tci, n = p["tau_average"], p["tau_average_ci"], p["n_models"]
    out = header("models", "direct evaluation", "train-before-test", "perplexity before fine-tuning -> ranking after")
    for group in ("all", "base", "instruct"):
        settings = ("direct", "train_before_test", "pre_ft_ppl_vs_tbt")
        out.append(row(f"{group} ({n['direct'][group]})", *(est(tau[k][group], tci[k][group]) for k in settings)))
    return out


@table("families")
def families_table(s: Summaries) -> list[str]:
    """06: PC1's share of variance within each model family."""
    c = s("06_pca")
    fam, fci = c["family_pc1"], c["family_pc1_ci"]
    out = header("family", "direct evaluation", "train-before-test")
    for name in fam[D]:
        out.append(row(name, est(fam[D][name], fci[D][name]), est(fam[T][name], fci[T][name])))
    return out


METHODS = {"benchalign": "BenchAlign (linear RankNet)", "no_alignment": "no alignment (plain accuracy)",
           "random": "random weights", "best_single": "best single benchmark",
           "metabench_like": "MetaBench-like (2PL IRT, 100 most informative items)",
           "metabench_like+benchalign": "MetaBench-like + BenchAlign",
           "tinybenchmarks_like": "TinyBenchmarks-like (100 anchor items)",
           "tinybenchmarks_like+benchalign": "TinyBenchmarks-like + BenchAlign",
           "best_single+benchalign": "best single benchmark + BenchAlign"}


def _diff(rec: dict, key: str = "spearman_diff_no_alignment") -> str:
    return est(rec[key], rec[key + "_ci"], sign=True) if key in rec else ""


@table("benchalign")
def benchalign_table(s: Summaries) -> list[str]:
    """07's comparison of every method on both test groups, with paired differences to no alignment."""
    b = s("07_benchalign")
    main = b["main"]
    big, small = _groups(main)
    out = header("method", f"{big} rho [95 %]", "seeds", f"{big} pair acc", f"Δrho vs no alignment, {big}",
                 f"{small} rho", f"Δrho vs no alignment, {small}")
    for m in _methods(main[big]):
        r, r2 = main[big][m], main[small][m]
        out.append(row(_method(m, b), est(r["spearman"], r["spearman_ci"]), f(r["spearman_seed_std"], 3),
                       f(r["pair_acc"]), _diff(r), f(r2["spearman"]), _diff(r2)))
    return out


@table("benchalign-short")
def benchalign_short_table(s: Summaries) -> list[str]:
    """README's BenchAlign table: the method, plain accuracy and the best single benchmark, paired."""
    b = s("07_benchalign")
    main = b["main"]
    big, small = _groups(main)
    out = header("method", f"{big} rho [95 %]", f"Δrho vs plain accuracy, {big}", f"{small} rho",
                 f"Δrho vs plain accuracy, {small}")
    for m in ("benchalign", "no_alignment", "best_single"):
        r, r2 = main[big][m], main[small][m]
        out.append(row(_method(m, b), est(r["spearman"], r["spearman_ci"]), _diff(r), f(r2["spearman"]), _diff(r2)))
    return out


def _groups(main: dict) -> tuple[str, str]:
    """The test groups, largest models first (70B+ before 30B+; pipeline mode: its own names)."""
    names = list(main)
    return (names[-1], names[0]) if len(names) > 1 else (names[0], names[0])


def _methods(rows: dict) -> list[str]:
    return [m for m in METHODS if m in rows] + [m for m in rows if m not in METHODS]


def _method(m: str, b: dict) -> str:
    label = METHODS.get(m, m)
    if m == "best_single" and b.get("best_single", {}).get("benchmark"):
        label += f" ({_bench(b['best_single']['benchmark'])}, chosen on source models)"
    return label


def _bench(name: str) -> str:
    return {"openllm_math": "MATH-hard", "musr": "MuSR", "ifeval": "IFEval", "hellaswag": "HellaSwag"}.get(
        name, name)


@table("benchalign-gains")
def benchalign_gains_table(s: Summaries) -> list[str]:
    """07: BenchAlign's paired differences in rho and pairwise accuracy, per test group."""
    b = s("07_benchalign")
    main = b["main"]
    big, small = _groups(main)
    out = header("BenchAlign against", f"Δrho, {big}", f"Δ pair acc, {big}", f"Δrho, {small}", f"Δ pair acc, {small}")
    for other, label in (("no_alignment", "no alignment (plain accuracy)"), ("best_single", "best single benchmark")):
        rec = {g: main[g]["benchalign"] for g in (big, small)}
        cells = [_diff(rec[g], f"{m}_diff_{other}") for g in (big, small) for m in ("spearman", "pair_acc")]
        out.append(row(label, *cells))
    return out


@table("benchalign-ablation")
def ablation_table(s: Summaries) -> list[str]:
    """07: the ranking loss, everything else the same protocol."""
    b = s("07_benchalign")
    group = list(b["ablation"])[-1]
    names = {"ranknet": "RankNet (BenchAlign's)", "pointwise": "pointwise", "ndcg_loss2": "NDCG-Loss2",
             "lambdarank": "LambdaRank"}
    out = header("loss", f"{group} rho", "seeds", f"{group} pair acc", "steps chosen (per seed)")
    for loss, r in sorted(b["ablation"][group].items(), key=lambda kv: -kv[1]["spearman"]):
        out.append(row(names.get(loss, loss), f(r["spearman"]), f(r["spearman_std"], 3), f(r["pair_acc"]),
                       ", ".join(str(x) for x in r["steps"])))
    return out


@table("benchalign-data")
def data_needs_table(s: Summaries) -> list[str]:
    """07: how many items and which source models BenchAlign needs (rho on the largest test group)."""
    b = s("07_benchalign")
    group = list(b["data_needs"])[-1]
    needs = b["data_needs"][group]
    out = []
    if "items" in needs:
        counts = sorted(needs["items"], key=int)
        out += header("random item subset of", *counts)
        out.append(row(f"BenchAlign, {group} rho", *(f(needs["items"][k]["benchalign"]) for k in counts)))
        out.append(row(f"plain accuracy on the same items, {group} rho",
                       *(f(needs["items"][k]["no_alignment"]) for k in counts)))
        out.append("")
    kinds = [k for k in ("source_kcenter", "source_random", "source_spread") if k in needs]
    if kinds:
        counts = sorted(needs[kinds[0]], key=int)
        labels = {"source_kcenter": "k-center on item responses (no labels)", "source_random": "random k",
                  "source_spread": "spread over the target's range (needs every label)"}
        out += header(f"k source models chosen by ({group} rho)", *counts)
        for k in kinds:
            out.append(row(labels[k], *(f(needs[k][c]["benchalign"]) for c in counts)))
    return out[:-1] if out and out[-1] == "" else out


@table("benchalign-cross-paper")
def cross_paper_table(s: Summaries) -> list[str]:
    """07: weights learned on one paper's direct-eval scores of small models, tested on the other
    paper's train-before-test ranking of large ones."""
    cp = s("07_benchalign")["cross_paper"]
    if cp.get("skipped"):
        return ["(skipped: " + str(cp.get("skipped")) + ")"]
    comp = cp["comparison"]
    out = header("method", f"rho, {cp['counts'].get('6B+', '')} test models", "Δrho vs plain mean", "pair acc")
    for m in ("benchalign", "no_alignment", "best_single", "random"):
        if m in comp:
            r = comp[m]
            label = {"no_alignment": "plain mean of the benchmarks",
                     "best_single": f"best single benchmark ({_bench(cp['best_single']['benchmark'])})"}.get(
                m, METHODS.get(m, m))
            out.append(row(label, est(r["spearman"], r["spearman_ci"]), _diff(r), f(r["pair_acc"])))
    return out


# ----------------------------------------------------------------------------- the mini world's tables
@table("quality")
def quality_table(s: Summaries) -> list[str]:
    """04's measurement quality: can each benchmark rank these models under each protocol?"""
    q = s("04_rank_agreement")["measurement_quality"]

    def cell(r: dict) -> str:
        text = f"{f(r['mean'])} / {f(r['reliability'])}"
        if r.get("cannot_rank"):
            why = "floor" if r["mean"] < r["chance"] + 0.1 else "ceiling" if r["mean"] > 0.9 else "noisy"
            text += f", **{why}**"
        return text

    out = header("benchmark (chance)", "direct evaluation: mean / reliability", "train-before-test: mean / reliability")
    for bench, r in q[D].items():
        r2 = q[T].get(bench, {})
        out.append(row(f"{bench} ({r['chance']:.2g})", cell(r), cell(r2) if r2 else "n/a"))
    return out


KINDS = {"format": "format exposure", "instruct": "instruction-style", "contam": "contamination",
         "answers": "answer-contaminated (positive control)", "sham": "sham (negative control)"}


def _prep(s: Summaries) -> dict:
    prep = s("04_rank_agreement").get("preparation")
    if not prep or "leads" not in prep:
        raise KeyError("preparation (04 ran without the zoo's causal design)")
    return prep


def _lead(r: dict, p: str = D, digits: int = 2) -> str:
    return est(r[f"lead_{p}"], [r[f"lead_{p}_lo"], r[f"lead_{p}_hi"]], digits, sign=True, ci_sign=False)


@table("p1")
def p1_table(s: Summaries) -> list[str]:
    """P1, the manipulation check: each kind's top-dose twin's lead over its base on its targets,
    under direct evaluation (04's ``preparation.manipulation``)."""
    prep = _prep(s)
    check, rows = prep["manipulation"], [r for r in prep["leads"] if r.get("base")]
    out = header("kind", "top-dose twin (base, dose)", "lead, direct evaluation", "z", "P1")
    for kind in [k for k in KINDS if k in check and k != "sham"]:
        top = [r for r in rows if r["kind"] == kind and r["dose"] == check[kind]["dose"]]
        for r in top:
            out.append(row(KINDS[kind], f"{r['model']} ({r['base']}, {r['dose']:g})", _lead(r), f(r["z_direct"], 1),
                           "met" if check[kind]["ok"] else "not met"))
    if "sham" in check:
        c = check["sham"]
        out.append(row(KINDS["sham"], f"{c['n']} models", f"largest \\|lead\\| {f(c['max_abs_lead_direct'], 3)}", "",
                       "met" if c["ok"] else "not met"))
    return out


@table("subsets")
def subsets_table(s: Summaries) -> list[str]:
    """(i): agreement over every benchmark and over those every model can attempt (04)."""
    prep = _prep(s)
    out = header("models, benchmarks", "direct evaluation", "train-before-test", "gain, paired")
    for r in prep["subsets"]:
        if f"tau_{D}" not in r:
            continue
        benches = (f"all {r['n_benchmarks']} benchmarks" if r["benchmarks"] == "all benchmarks" else
                   f"the {r['n_benchmarks']} every model can attempt ({r['names']})")
        out.append(row(f"{r['models']} ({r['n_models']}), {benches}",
                       *(est(r[f"tau_{p}"], [r[f"tau_{p}_lo"], r[f"tau_{p}_hi"]]) for p in (D, T)),
                       gain(r["gain"], [r["gain_lo"], r["gain_hi"]])))
    return out


def _zoo_label(r: dict, n_twins: int) -> str:
    zoo = r["zoo"]
    if zoo.startswith("share"):
        return {0.0: "none (mean tau)", 1.0: "all"}.get(round(r["share"], 2),
                                                         "a third" if r["share"] < 0.5 else "two thirds")
    n = int(round(r["share"] * n_twins))
    if zoo.startswith("dose"):
        return f"the {n} dose-{r['dose']:g} twins only"
    kind = zoo.split(" ", 1)[1]
    return f"the {n} {KINDS.get(kind, kind).split(' (')[0]} twins only"


@table("compositions")
def compositions_table(s: Summaries) -> list[str]:
    """(ii): the base zoo with a share (or a dose, or a kind) of the twins swapped in for their
    bases: mean tau's change against the base zoo, per benchmark set (04)."""
    prep = _prep(s)
    sets = list(dict.fromkeys(r["benchmarks"] for r in prep["compositions"]))
    by = {(r["benchmarks"], r["zoo"]): r for r in prep["compositions"]}
    zoos = list(dict.fromkeys(r["zoo"] for r in prep["compositions"]))
    names = {"all benchmarks": "all benchmarks", "attemptable": "the attemptable ones"}
    out = header("twins swapped in", *(f"{names.get(b, b)}: direct / train-before-test" for b in sets))
    for zoo in zoos:
        cells = []
        for b in sets:
            r = by.get((b, zoo))
            if r is None:
                cells.append("n/a")
            elif zoo == "share 0.00":
                cells.append(f"{f(r[f'tau_{D}'])} / {f(r[f'tau_{T}'])}")
            else:
                cells.append(" / ".join(est(r[f"change_{p}"], [r[f"change_{p}_lo"], r[f"change_{p}_hi"]], sign=True,
                                            ci_sign=False) for p in (D, T)))
        first = by[(sets[0], zoo)]
        out.append(row(_zoo_label(first, prep["n_twins"]), *cells))
    return out


def _n(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


@table("leads")
def leads_table(s: Summaries) -> list[str]:
    """(iii): the lead over the base under both protocols pooled by kind (each twin's mean over its
    targets), and pooled over the (twin, task) rows with a clear direct lead (04)."""
    prep = _prep(s)
    pooled = {r["kind"]: r for r in prep["leads"] if not r.get("base") and str(r["model"]).endswith("(all doses)")}
    clear = prep.get("clear_task_leads", {})
    out = header("kind", "lead, direct evaluation", "lead, train-before-test", "share kept",
                 "clear (twin, task) rows: direct / train-before-test / kept")
    for kind in [k for k in KINDS if k in pooled]:
        r, c = pooled[kind], clear.get(kind, {})
        n = int(r["targets"].split(" ")[0])
        rows_cell = (f"{_n(c['n_clear'], 'row')}: {f(c[f'lead_{D}'], 3, sign=True)} / {f(c[f'lead_{T}'], 3, sign=True)}"
                     f" / {est(c['kept'], [c['kept_lo'], c['kept_hi']])}" if c.get("n_clear") and f"lead_{D}" in c
                     else ("" if kind == "sham" else "0 rows"))
        out.append(row(f"{KINDS[kind]}, {_n(n, 'model')}", _lead(r, D, 3), _lead(r, T, 3),
                       "" if kind == "sham" else est(r["kept"], [r["kept_lo"], r["kept_hi"]]), rows_cell))
    return out


@table("budget")
def budget_table(s: Summaries) -> list[str]:
    """02: where in the learning-rate x epoch grid the chosen points lie."""
    b = s("02_finetune")
    edges = b["grid_edges"]
    lrs = sorted(b["chosen_lr_counts"], key=float)
    epochs = sorted(b["chosen_epoch_counts"], key=float)
    out = header(f"of {edges['n']} results", "count or share")
    out.append(row("chosen learning rate " + " / ".join(f"{float(x):g}" for x in lrs),
                   " / ".join(str(b["chosen_lr_counts"][x]) for x in lrs)))
    out.append(row(f"chosen epoch {float(epochs[0]):g}-{float(epochs[-1]):g}",
                   " / ".join(str(b["chosen_epoch_counts"][x]) for x in epochs)))
    for key, label in (("interior", "fully inside the grid"), ("largest_lr", "at the largest rate"),
                       ("smallest_lr", "at the smallest rate"), ("last_epoch", "at the last epoch"),
                       ("last_epoch_still_improving", "at a last epoch that still lowered the validation loss >1 %")):
        if f"share_{key}" in edges:
            out.append(row(label, pct(edges[f"share_{key}"], 1)))
    inside = edges.get("interior_by_benchmark", {})
    out.append("")
    out += header("benchmark or corpus", "results inside the grid")
    for bench in sorted(inside, key=lambda x: -inside[x]):
        out.append(row(bench, pct(inside[bench])))
    return out


@table("scores")
def scores_table(s: Summaries) -> list[str]:
    """Stages 01-03 of a profile: each benchmark's test documents and mean test score under both
    protocols (over the profile's models; with one model, its scores)."""
    sel, tbt, direct = s("01_select_benchmarks"), s("02_finetune"), s("03_direct_eval")
    out = header("benchmark (metric)", "test documents", "direct evaluation", "train-before-test")
    for bench in sel["selected"]:
        task = sel["tasks"][bench]
        if task.get("role", "benchmark") != "benchmark":
            continue
        out.append(row(f"{bench} (`{task['metric']}`)", task.get("plan_test", task["counts"].get("test", "")),
                       f(direct["mean_direct"].get(bench), 3), f(tbt["mean_score"].get(bench), 3)))
    return out


@table("benchalign-pipeline")
def benchalign_pipeline_table(s: Summaries) -> list[str]:
    """07 on our own items (smoke, mini): every method on the test group, paired differences to
    plain accuracy, and the benchmark-level variant (``cross_paper``)."""
    b = s("07_benchalign")
    if not b["main"]:
        return ["(no test group large enough: " + "; ".join(b.get("notes", [])) + ")"]
    group = list(b["main"])[-1]
    rows = b["main"][group]
    out = header("method", f"rho, {group} [95 %]", "Δrho vs plain accuracy")
    for m in [m for m in ("benchalign", "no_alignment") if m in rows]:
        out.append(row(_method(m, b), est(rows[m]["spearman"], rows[m]["spearman_ci"]), _diff(rows[m])))
    cp = b.get("cross_paper", {})
    if not cp.get("skipped") and "comparison" in cp and "benchalign" in cp["comparison"]:
        r = cp["comparison"]["benchalign"]
        out.append(row("benchmark-level weights (one per benchmark's score)", est(r["spearman"], r["spearman_ci"]),
                       _diff(r)))
    return out


@table("placement")
def placement_table(s: Summaries) -> list[str]:
    """08 (a placement profile): the calibration verdict, then each new model's mean rank among the
    reference's and the new models under both protocols (95 % intervals over benchmarks), its shift
    and the change it brings to the benchmarks' mean Kendall tau."""
    p = s("08_placement")
    c = p["calibration"]
    out = [f"Calibration ({', '.join(p['calibration_models'])}): {c['n_checks'] - c['n_failed']} of {c['n_checks']} "
           f"checked scores within bounds, {c['n_identical']} of {c['n_results']} results identical to the "
           f"reference's; {'comparable' if p['comparable'] else 'NOT comparable: nothing is ranked'}.", ""]
    out += header("new model", "mean rank, direct (of N)", "mean rank, train-before-test", "shift [95 %]",
                  "change in mean tau: direct / train-before-test")
    for model in p["new_models"]:
        r = p["placement"].get(model)
        if r is None:
            continue
        out.append(row(model, f"{est(r['direct_mean_rank'], r['direct_ci_benchmarks'], 1)} (of {r['of']})",
                       est(r["tbt_mean_rank"], r["tbt_ci_benchmarks"], 1),
                       est(r["rank_shift"], r["rank_shift_ci"], 1, sign=True),
                       f"{f(r['direct_tau_change'], 3, sign=True)} / {f(r['tbt_tau_change'], 3, sign=True)}"))
    return out


# ----------------------------------------------------------------------------- blocks in a file
@dataclass
class Block:
    path: Path
    line: int                    # 1-based line of the opening marker
    profile: str
    table: str
    body: list[str]              # the lines between the markers, as quoted


class DocError(Exception):
    """A malformed block (no closing marker, an unknown table): names the file and line."""


def blocks(path: Path, lines: list[str] | None = None) -> list[Block]:
    """Every results block of a file."""
    lines = path.read_text(encoding="utf-8").splitlines() if lines is None else lines
    out, i = [], 0
    while i < len(lines):
        m = START.match(lines[i])
        if not m:
            if lines[i].startswith("<!-- results:"):
                raise DocError(f"{_rel(path)}:{i + 1}: a results marker must read "
                               f"`<!-- results:<profile>/<table> -->`, not {lines[i].strip()!r}")
            i += 1
            continue
        if m["table"] not in TABLES:
            raise DocError(f"{_rel(path)}:{i + 1}: unknown results table {m['table']!r} "
                           f"(known: {', '.join(sorted(TABLES))}; lib/docblocks.py)")
        try:
            end = lines.index(END, i + 1)
        except ValueError:
            raise DocError(f"{_rel(path)}:{i + 1}: results block {m['profile']}/{m['table']} has no "
                           f"closing `{END}`") from None
        out.append(Block(path, i + 1, m["profile"], m["table"], lines[i + 1:end]))
        i = end + 1
    return out


def _rel(path: Path) -> str:
    try:
        return str(Path(path).resolve().relative_to(paths.ROOT))
    except ValueError:
        return str(path)


def render(block: Block, cache: dict[str, Summaries]) -> list[str]:
    """The block's table as the profile's outputs say now (:class:`Missing` when they do not exist)."""
    s = cache.setdefault(block.profile, Summaries(block.profile))
    try:
        return TABLES[block.table](s)
    except (KeyError, IndexError, TypeError) as exc:
        raise Missing(f"outputs/{block.profile} lack what table {block.table!r} reads ({type(exc).__name__}: "
                      f"{exc}): re-run the profile (`make all PROFILE={block.profile}`)") from None


# ----------------------------------------------------------------------------- comparing
@dataclass
class Difference:
    path: Path
    line: int
    quoted: str
    measured: str
    block: int = 0               # the line of its block's opening marker

    def __str__(self) -> str:
        return f"{_rel(self.path)}:{self.line}: quoted {self.quoted}, measured {self.measured}"


def differences(block: Block, measured: list[str]) -> list[Difference]:
    """Each line of the block that differs from its table: the numbers that differ (or the whole
    line when the numbers agree and the text does not, or a line is missing)."""
    out = []
    for k, (q, m) in enumerate(itertools.zip_longest(block.body, measured)):
        if q == m:
            continue
        line = block.line + 1 + k
        if q is None or m is None:
            out.append(Difference(block.path, line, repr(q) if q is not None else "(no line)",
                                  repr(m) if m is not None else "(no line)", block.line))
            continue
        nq, nm = NUMBER.findall(q), NUMBER.findall(m)
        pairs = [(a, b) for a, b in itertools.zip_longest(nq, nm) if a != b]
        if pairs:
            out.append(Difference(block.path, line, " ".join(a or "(none)" for a, _ in pairs),
                                  " ".join(b or "(none)" for _, b in pairs), block.line))
        else:
            out.append(Difference(block.path, line, repr(q), repr(m), block.line))
    return out


@dataclass
class Report:
    checked: list[Block]
    skipped: dict[str, str]              # profile -> why its blocks were not checked
    diffs: list[Difference]


def _rendered(found: Iterable[Block], profiles: list[str] | None, skipped: dict[str, str],
              cache: dict[str, Summaries]) -> Iterator[tuple[Block, list[str]]]:
    """(block, its lines rendered from the outputs) for each of ``found`` of ``profiles``; a profile
    whose outputs are missing goes into ``skipped`` with the reason, and its blocks are passed over."""
    for block in found:
        if (profiles and block.profile not in profiles) or block.profile in skipped:
            continue
        try:
            yield block, render(block, cache)
        except Missing as exc:
            skipped[block.profile] = str(exc)


def check(files: list[Path] | None = None, profiles: list[str] | None = None) -> Report:
    """Render every block (of ``profiles``, default all) and compare it with what is quoted."""
    cache: dict[str, Summaries] = {}
    checked, skipped, diffs = [], {}, []
    for path in files or doc_files():
        for block, measured in _rendered(blocks(path), profiles, skipped, cache):
            checked.append(block)
            diffs += differences(block, measured)
    return Report(checked, skipped, diffs)


def write(files: list[Path] | None = None, profiles: list[str] | None = None) -> Report:
    """Rewrite every block (of ``profiles``) from the outputs; blocks of a profile that has not run
    are left as they are (and named in the report)."""
    cache: dict[str, Summaries] = {}
    checked, skipped, diffs = [], {}, []
    for path in files or doc_files():
        lines = path.read_text(encoding="utf-8").splitlines()
        changed = False
        # from the end: earlier line numbers hold
        for block, measured in _rendered(reversed(blocks(path, lines)), profiles, skipped, cache):
            checked.append(block)
            found = differences(block, measured)
            if found:
                diffs += found
                lines[block.line:block.line + len(block.body)] = measured
                changed = True
        if changed:
            util.atomic_write_text(path, "\n".join(lines) + "\n")
    return Report(checked, skipped, diffs)


def copy_headline(root: Path | None = None) -> Path | None:
    """Copy the headline figure from the published outputs into docs/figures/ (None: not run yet)."""
    profile, stage, name, target = HEADLINE
    src = paths.stage_dir(profile, stage) / name
    if not src.exists():
        return None
    dst = (root or paths.ROOT) / target
    dst.parent.mkdir(parents=True, exist_ok=True)
    if not dst.exists() or dst.read_bytes() != src.read_bytes():
        shutil.copyfile(src, dst)
    return dst


# ----------------------------------------------------------------------------- links
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
FENCE = re.compile(r"^\s*(```|~~~)")
CODE_SPAN = re.compile(r"`[^`]*`")


def _prose(lines: list[str], code: bool = False) -> list[tuple[int, str]]:
    """(line number, text) of the lines outside fenced code, inline code removed unless ``code``."""
    out, fenced = [], False
    for k, line in enumerate(lines, 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            out.append((k, line if code else CODE_SPAN.sub("", line)))
    return out


def slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower().replace("`", ""))
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """The anchors of a Markdown file's headings (a repeated heading gets ``-1``, ``-2``, ...)."""
    seen: dict[str, int] = {}
    out = set()
    for _, line in _prose(path.read_text(encoding="utf-8").splitlines(), code=True):
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if m:
            s = slug(m.group(1))
            out.add(s if s not in seen else f"{s}-{seen[s]}")
            seen[s] = seen.get(s, 0) + 1
    return out


def broken_links(files: list[Path]) -> list[str]:
    """Every relative link or image in ``files`` whose target file (or heading) does not exist,
    as ``file:line: why``; web links are not followed."""
    out = []
    for path in files:
        for k, line in _prose(path.read_text(encoding="utf-8").splitlines()):
            for target in LINK.findall(line):
                if re.match(r"^[a-z][a-z0-9+.-]*:", target):          # https:, mailto:, ...
                    continue
                file_part, _, anchor = target.partition("#")
                dest = (path.parent / file_part).resolve() if file_part else path
                if not dest.exists():
                    out.append(f"{_rel(path)}:{k}: {file_part} does not exist")
                elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                    out.append(f"{_rel(path)}:{k}: {target}: no such heading in {file_part or _rel(path)}")
    return out


# ----------------------------------------------------------------------------- command line
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m lib.docblocks", description=__doc__.split("\n\n")[0])
    ap.add_argument("action", choices=("write", "check"))
    ap.add_argument("profiles", nargs="*", help="only the blocks of these profiles (default: every profile that ran)")
    ap.add_argument("--warn", action="store_true", help="check: one line on a difference, exit status 0")
    args = ap.parse_intermixed_args(argv)
    try:
        rep = (write if args.action == "write" else check)(profiles=args.profiles or None)
    except DocError as exc:
        print(f"{'warning' if args.warn else 'error'}: {exc}", file=sys.stderr)
        return 0 if args.warn else 2
    for profile, why in rep.skipped.items():
        what = "left as they are" if args.action == "write" else "not checked"
        print(f"docs: the {profile} blocks are {what}: {why}", file=sys.stderr)
    changed = sorted({(_rel(d.path), d.block) for d in rep.diffs})
    if args.action == "write":
        fig = copy_headline() if not args.profiles or HEADLINE[0] in args.profiles else None
        print(f"docs: {len(rep.checked)} results block(s) from outputs/, {len(changed)} rewritten"
              + "".join(f"\n  rewrote {p}:{line}" for p, line in changed)
              + (f"\ndocs: headline figure {_rel(fig)}" if fig else ""))
        return 0
    if args.warn:
        if rep.diffs:
            print(f"warning: {len(rep.diffs)} quoted line(s) in README.md / docs/ differ from outputs/ "
                  f"(first: {rep.diffs[0]}): run `make docs` to rewrite them", file=sys.stderr)
        return 0
    for d in rep.diffs:
        print(d)
    if not rep.checked:
        print("error: no results block could be checked (no profile's outputs): run `make all` first",
              file=sys.stderr)
        return 2
    if rep.diffs:
        print(f"check-docs: {len(rep.diffs)} line(s) in {len(changed)} block(s) differ from the outputs: "
              "run `make docs` to rewrite them", file=sys.stderr)
        return 1
    profiles = sorted({b.profile for b in rep.checked})
    print(f"check-docs: {len(rep.checked)} results block(s) of {', '.join(profiles)} agree with the outputs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
