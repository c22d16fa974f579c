"""The results tables of stages 04-06 that README.md and docs/ quote (registered in
:mod:`runner.doctables`; they read the keys of :func:`lib.analysis.agreement.agreement_report`,
:func:`lib.analysis.perplexity.perplexity_report` and :func:`lib.analysis.structure.pca_report`)."""

from __future__ import annotations

from lib.plots import display
from runner.doctables import D, Summaries, T, ci, est, f, gain, header, pair, pct, row, table


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
    return out + cheaper_rows(p.get("cheaper"))


def cheaper_rows(c: dict | None) -> list[str]:
    """Issue 42's rows of the agreement table: each cheaper protocol's mean tau with the full
    train-before-test ranking and what its units recorded (seconds, FLOPs), in the column of the
    protocol it is a form of (perplexity alone: before fine-tuning, the direct side)."""
    from lib.analysis.cheaper import PERPLEXITY, label
    from lib.store import base_protocol

    if not c:
        return []

    def cost(n: str) -> str:
        secs, flops = c["seconds"].get(n), c.get("flops", {}).get(n)
        parts = [f"{secs:,.0f} s" if secs is not None and secs == secs else None,
                 f"{flops:.1e} FLOPs" if flops is not None and flops == flops else None]
        return "; ".join(p for p in parts if p)

    k = len(c["benchmarks"])
    out = [row("seconds; FLOPs its units recorded (05)", cost(D), cost(T))]
    for n in c["candidates"]:
        value = est(c["tau_with_tbt_mean"][n], c["tau_with_tbt_mean_ci"][n])
        value = f"{value}; {cost(n)}" if cost(n) and n != D else value
        trains = n != PERPLEXITY and base_protocol(n) == T          # the reduced budget: the train-before-test side
        out.append(row(f"{label(n)}: tau with the full train-before-test ranking, mean over {k} benchmarks (05)",
                       *(("", value) if trains else (value, ""))))
    return out


# The paper's own numbers (Zhang et al. 2025; quoted, not measured): the published profile's comparison
# column and what tests/test_published.py holds the run to. Pairs are (direct evaluation, train-before-test).
PAPER = {"mean_tau": (0.52, 0.76),                   # over its 276 benchmark pairs
         "within": {"Language Understanding": (0.52, 0.75), "Math": (0.55, 0.84)},   # within-category tau
         "ppl_pairs": (0.48, 0.74),                  # perplexity ranking against each benchmark's, mean tau
         "ppl_before_after": {"base": 0.78, "instruct": 0.51},  # perplexity before -> rankings after, mean tau
         "nq_open": "outlier -> in line", "pc1": "nearly rank one"}


def arrow(values: tuple[float, float]) -> str:
    return f"{f(values[0])} -> {f(values[1])}"


def category_cell(a: dict, first: str, second: str | None = None) -> tuple[int, dict, dict]:
    """(benchmark pairs, {protocol: tau}, {protocol: [lo, hi]}) of one cell of 04's category table."""
    cells = a["category_cells"]
    k = cells["cells"].index([first, second or first])
    return (cells["n_pairs"][k], {p: v[k] for p, v in cells["tau"].items()},
            {p: v[k] for p, v in cells.get("tau_ci", {}).items()})


@table("headline")
def headline_table(s: Summaries) -> list[str]:
    """README's table of the published profile: 04, 05, 06 in the paper's own metrics, next to what
    the paper reports."""
    a, p, c = s("04_rank_agreement"), s("05_perplexity"), s("06_pca")
    n_pairs, low = a["n_pairs_compared"], a["lowest_benchmark"][D]
    bt, bci = a["benchmark_mean_tau"][low], a["benchmark_mean_tau_ci"][low]
    tau, tci = p["tau_average"], p["tau_average_ci"]
    mp, mci, n = p["mean_tau_pairs"], p["mean_tau_pairs_ci"], p["n_models"]["direct"]
    out = header("", "direct evaluation", "train-before-test", "paper")
    out.append(row(f"mean Kendall tau over {n_pairs} benchmark pairs (04)", est(a["mean_tau"][D], a["mean_tau_ci"][D]),
                   est(a["mean_tau"][T], a["mean_tau_ci"][T]), arrow(PAPER["mean_tau"])))
    out.append(row("gain in mean tau, paired (04)", "", gain(a["mean_tau_gain"], a["mean_tau_gain_ci"]), ""))
    lo, hi = a["pairs_improved_ci"]
    out.append(row("pairs whose tau improves (04)", "", f"{a['pairs_improved']} of {n_pairs} [{lo:.0f}, {hi:.0f}]", ""))
    out.append(row(f"{display(low)}'s mean tau against the other {a['n_benchmarks'] - 1} (04)", est(bt[D], bci[D]),
                   est(bt[T], bci[T]), PAPER["nq_open"]))
    for category, paper in PAPER["within"].items():
        k, v, vci = category_cell(a, category)
        what = f"mean tau over its {k} benchmark pairs" if k > 1 else "tau of its one benchmark pair"
        out.append(row(f"within {category}: {what} (04)", est(v[D], vci[D]), est(v[T], vci[T]), arrow(paper)))
    n_ppl = len(p["corpora"]) * a["n_benchmarks"]
    out.append(row(f"perplexity ranking against each benchmark's: mean tau over {n_ppl} (corpus, benchmark) pairs, "
                   f"{n['all']} models (05)", est(mp["direct"]["all"], mci["direct"]["all"]),
                   est(mp["train_before_test"]["all"], mci["train_before_test"]["all"]), arrow(PAPER["ppl_pairs"])))
    before = "pre_ft_ppl_vs_tbt"
    out.append(row(f"perplexity before fine-tuning against the rankings after, mean tau over the same pairs: base "
                   f"({n['base']}) / instruct ({n['instruct']}) models; beside it the tau of the averages (05)", "",
                   f"{est(mp[before]['base'], mci[before]['base'])} / "
                   f"{est(mp[before]['instruct'], mci[before]['instruct'])}; tau of the averages "
                   f"{f(tau[before]['base'])} / {f(tau[before]['instruct'])}",
                   " / ".join(f(PAPER["ppl_before_after"][g]) for g in ("base", "instruct"))))
    out.append(row(f"tau of the averages (mean bits-per-byte against mean score), {n['all']} models (05)",
                   est(tau["direct"]["all"], tci["direct"]["all"]),
                   est(tau["train_before_test"]["all"], tci["train_before_test"]["all"]), ""))
    share = {k: f"{pct(c['pc1_explained'][k], 1)} {ci([100 * v for v in c['pc1_explained_ci'][k]], 0)}" for k in (D, T)}
    out.append(row("PC1 share of variance, standardised columns (06)", share[D], share[T], PAPER["pc1"]))
    out.append(row("gain in PC1 share, paired (06)", "",
                   f"{f(100 * c['pc1_gain'], 1, sign=True)} points {ci([100 * v for v in c['pc1_gain_ci']], 0)}", ""))
    comp = c["pc1_vs_log_compute"]
    out.append(row(f"Pearson r(PC1, log10 pre-training FLOPs), {comp[D]['all']['n_models']} models (06)",
                   *(est(comp[k]["all"]["pearson_r"], c["pc1_vs_log_compute_r_ci"][k]["all"]) for k in (D, T)), ""))
    return out


@table("categories")
def categories_table(s: Summaries) -> list[str]:
    """04: mean tau within each category and between each pair of categories, with the number of
    benchmark pairs behind each cell (a category of two benchmarks rests on one pair)."""
    a = s("04_rank_agreement")
    cells = a["category_cells"]
    out = header("categories", "benchmark pairs", "direct evaluation", "train-before-test", "paper")
    for first, second in cells["cells"]:
        k, v, vci = category_cell(a, first, second)
        name = f"within {first}" if first == second else f"{first} / {second}"
        paper = PAPER["within"].get(first) if first == second else None
        out.append(row(name, k, est(v[D], vci[D]), est(v[T], vci[T]), arrow(paper) if paper else ""))
    return out


@table("within-checks")
def within_checks_table(s: Summaries) -> list[str]:
    """04: the within-category mean tau of the categories the paper reports, computed other ways
    (:func:`lib.analysis.agreement.within_checks`), under the paper's value."""
    checks = s("04_rank_agreement")["within_checks"]
    out = header("computed as", *(f"{cat}: {proto}" for cat in PAPER["within"] if cat in checks
                                  for proto in ("direct evaluation", "train-before-test")))
    cats = [cat for cat in PAPER["within"] if cat in checks]
    out.append(row("the paper", *(f(v) for cat in cats for v in PAPER["within"][cat])))
    for i in range(max(len(checks[cat]) for cat in cats)):
        label = checks[cats[0]][i]["check"]
        out.append(row(label, *(f(checks[cat][i][k], 3) if checks[cat][i]["check"] == label else "n/a"
                                for cat in cats for k in (D, T))))
    return out


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
    out.append(row(f"{display(low)}: mean tau / mean ceiling against the others",
                   *(f"{f(bench[k]['mean_tau'])} / {f(bench[k]['mean_ceiling'])}" for k in (D, T))))
    out.append(row(f"{display(low)}: reliability of its ranking", *(f(bench[k]["reliability"]) for k in (D, T))))
    out.append(row("pairs above their estimated ceiling",
                   *(f"{ceil[k]['n_above']} of {ceil[k]['n_pairs']}" for k in (D, T))))
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
    """05: Kendall tau between the ranking by perplexity and the ranking by downstream scores, as the
    paper measures it (the mean over every corpus x benchmark pair) and as the tau of the averages
    (mean bits-per-byte against mean score), per group of models."""
    p = s("05_perplexity")
    n = p["n_models"]
    settings = ("direct", "train_before_test", "pre_ft_ppl_vs_tbt")
    out = header("models", "tau", "direct evaluation", "train-before-test",
                 "perplexity before fine-tuning -> ranking after", "paper")
    paper = {("all", "mean_tau_pairs"): arrow(PAPER["ppl_pairs"])}
    paper.update({(g, "mean_tau_pairs"): f"{f(v)} (before -> after)" for g, v in PAPER["ppl_before_after"].items()})
    for group in ("all", "base", "instruct"):
        for key, what in (("mean_tau_pairs", "mean over (corpus, benchmark) pairs"),
                          ("tau_average", "of the averages")):
            values, cis = p[key], p[f"{key}_ci"]
            out.append(row(f"{group} ({n['direct'][group]})", what, *(est(values[k][group], cis[k][group])
                                                                      for k in settings),
                           paper.get((group, key), "")))
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


@table("cheaper")
def cheaper_table(s: Summaries) -> list[str]:
    """Issue 42: each cheaper protocol against train-before-test (05's ``cheaper``)."""
    from lib.analysis.cheaper import BY_CONSTRUCTION, label

    c = s("05_perplexity")["cheaper"]
    names = c["candidates"] + [T]
    lead = "lead_removed" in c
    cols = ["protocol", "models", "mean tau between benchmarks",
            f"tau with train-before-test, mean over {len(c['benchmarks'])} benchmarks",
            "lowest benchmark tau", "highest benchmark tau", "minus direct evaluation, paired (models)",
            "seconds recorded", "FLOPs recorded"]
    out = header(*cols, *(["share of the prepared models' lead removed"] if lead else []))
    for n in names:
        between = c["mean_tau_between"].get(n)
        between = est(between, c["mean_tau_between_ci"][n]) if between is not None else BY_CONSTRUCTION
        secs = c["seconds"].get(n)
        secs = "not recorded" if secs is None or secs != secs else f"{secs:,.0f} s"
        flops = c.get("flops", {}).get(n)
        flops = "not recorded" if flops is None or flops != flops else f"{flops:.2g}"
        if n == T:
            cells = [label(n), "", between, "reference", "", "", "", secs, flops]
        else:
            taus = {b: t for b, t in c["tau_with_tbt"][n].items() if t is not None and t == t}
            lo, hi = min(taus, key=taus.get), max(taus, key=taus.get)
            cells = [label(n), c["n_models"][n], between, est(c["tau_with_tbt_mean"][n], c["tau_with_tbt_mean_ci"][n]),
                     f"{f(taus[lo])} {ci(c['tau_with_tbt_ci'][n][lo])} ({display(lo)})",
                     f"{f(taus[hi])} {ci(c['tau_with_tbt_ci'][n][hi])} ({display(hi)})",
                     f"{est(c['minus_direct'][n], c['minus_direct_ci'][n], sign=True)} ({c['n_models_paired'][n]})"
                     if n in c.get("minus_direct", {}) else "", secs, flops]
        out.append(row(*cells, *([pct(c["lead_removed"].get(n))] if lead else [])))
    return out
