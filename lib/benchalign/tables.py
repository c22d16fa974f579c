"""The results tables of stage 07 that README.md and docs/results.md quote (registered in
:mod:`lib.doctables`; they read the keys of :func:`lib.benchalign.experiments.benchalign_report`),
methods named by the registry's labels (:data:`lib.benchalign.methods.METHODS`)."""

from __future__ import annotations

from ..doctables import Summaries, est, f, header, row, table
from ..plots import display
from .methods import METHODS, SUBSETS


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
    """The methods of a group's records: BenchAlign first, then the registry's order (unregistered last)."""
    order = ["benchalign", *(m for m in METHODS if m != "benchalign")]
    return [m for m in order if m in rows] + [m for m in rows if m not in METHODS]


def _method(m: str, b: dict) -> str:
    """The method's registry label; the best single benchmark names its choice, a subset its size."""
    label = METHODS[m].label if m in METHODS else m
    if m == "best_single" and b.get("best_single", {}).get("benchmark"):
        label += f" ({display(b['best_single']['benchmark'])}, chosen on source models)"
    elif m in SUBSETS and m != "best_single" and "subset_items" in b.get("config", {}):
        label += f", {b['config']['subset_items']} items"
    return label


@table("benchalign-gains")
def benchalign_gains_table(s: Summaries) -> list[str]:
    """07: BenchAlign's paired differences in rho and pairwise accuracy, per test group."""
    b = s("07_benchalign")
    main = b["main"]
    big, small = _groups(main)
    out = header("BenchAlign against", f"Δrho, {big}", f"Δ pair acc, {big}", f"Δrho, {small}", f"Δ pair acc, {small}")
    rec = {g: main[g]["benchalign"] for g in (big, small)}
    for other in ("no_alignment", "best_single"):
        cells = [_diff(rec[g], f"{m}_diff_{other}") for g in (big, small) for m in ("spearman", "pair_acc")]
        out.append(row(METHODS[other].label, *cells))
    return out


@table("benchalign-ablation")
def ablation_table(s: Summaries) -> list[str]:
    """07: the ranking loss, everything else the same protocol."""
    b = s("07_benchalign")
    group = list(b["ablation"])[-1]
    out = header("loss", f"{group} rho", "seeds", f"{group} pair acc", "steps chosen (per seed)")
    for loss, r in sorted(b["ablation"][group].items(), key=lambda kv: -kv[1]["spearman"]):
        name = display(loss) + (" (BenchAlign's)" if loss == b["config"]["loss"] else "")
        out.append(row(name, f(r["spearman"]), f(r["spearman_std"], 3), f(r["pair_acc"]),
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
    n_test = next(iter(comp.values()))["n_models"]
    out = header("method", f"rho, {n_test} test models", "Δrho vs plain mean", "pair acc")
    labels = {"no_alignment": "Plain mean of the benchmarks"}
    for m in [m for m in ("benchalign", "no_alignment", "best_single", "random") if m in comp]:
        r = comp[m]
        out.append(row(labels.get(m) or _method(m, cp), est(r["spearman"], r["spearman_ci"]), _diff(r),
                       f(r["pair_acc"])))
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
