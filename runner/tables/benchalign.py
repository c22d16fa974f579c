"""The results tables of stage 07 that README.md and docs/results.md quote (registered in
:mod:`runner.doctables`; they read the keys of :func:`lib.benchalign.experiments.benchalign_report`),
methods named by the registry's labels (:data:`lib.benchalign.methods.METHODS`), test groups largest
first, the paper's values (:data:`lib.benchalign.methods.PAPER_RHO`) beside ours where it has them."""

from __future__ import annotations

from lib.benchalign.methods import BASELINES, METHODS, PAPER_RHO, SUBSETS, method_label
from lib.benchalign.studies import SUBSET_STUDY, WITHIN_METHODS, ordered_conditions
from lib.plots import display
from runner.doctables import Missing, Summaries, est, f, header, row, table


def _diff(rec: dict, key: str = "spearman_diff_no_alignment") -> str:
    return est(rec[key], rec[key + "_ci"], sign=True) if rec.get(key) is not None and rec.get(key + "_ci") else ""


def _rho(rec: dict | None) -> str:
    if rec and rec.get("spearman_ci"):
        return est(rec["spearman"], rec["spearman_ci"])
    return f((rec or {}).get("spearman"))


@table("benchalign")
def benchalign_table(s: Summaries) -> list[str]:
    """07's comparison of every method on every test group (largest first), with paired differences
    to no alignment and the paper's rho where it reports one."""
    b = s("07_benchalign")
    main = b["main"]
    groups = _groups(main)
    big = groups[0]
    cols = ["method", f"{big} rho [95 %]", "seeds", f"{big} pair acc", f"Δrho vs no alignment, {big}"]
    for g in groups[1:]:
        cols += [f"{g} rho", f"Δrho, {g}"]
    out = header(*cols, f"paper, {big}")
    for m in _methods(main[big]):
        r = main[big][m]
        cells = [_method(m, b), _rho(r), f(r["spearman_seed_std"], 3), f(r["pair_acc"]), _diff(r)]
        for g in groups[1:]:
            cells += [f(main[g][m]["spearman"]), _diff(main[g][m])]
        paper = PAPER_RHO.get(big, {}).get(m)
        out.append(row(*cells, "" if paper is None else f(paper)))
    return out


@table("benchalign-short")
def benchalign_short_table(s: Summaries) -> list[str]:
    """README's BenchAlign table: BenchAlign beside plain accuracy and the model-metadata baselines,
    with BenchAlign's paired difference to each (same test models, same resamples)."""
    b = s("07_benchalign")
    main = b["main"]
    groups = _groups(main)[:2]
    cols = ["method"]
    for g in groups:
        cols += [f"{g} rho [95 %]", f"BenchAlign minus it, {g}"]
    out = header(*cols)
    for m in [m for m in ("benchalign", *BASELINES) if m in main[groups[0]] and m not in SUBSETS]:
        cells = [_method(m, b)]
        for g in groups:
            ba = main[g]["benchalign"]
            cells += [_rho(main[g][m]), "" if m == "benchalign" else _diff(ba, f"spearman_diff_{m}")]
        out.append(row(*cells))
    return out


def _groups(main: dict) -> list[str]:
    """The test groups, largest models first (70B+, 30B+, 13B+; pipeline mode: its own names)."""
    return list(main)[::-1]


def _methods(rows: dict) -> list[str]:
    """The methods of a group's records: BenchAlign first, then the registry's order (unregistered last)."""
    order = ["benchalign", *(m for m in METHODS if m != "benchalign")]
    return [m for m in order if m in rows] + [m for m in rows if m not in METHODS]


def _method(m: str, b: dict, items: int | None = None) -> str:
    """The method's registry label; the best single benchmark names its choice, a subset its size."""
    label = method_label(m)
    n = items if items is not None else b.get("config", {}).get("subset_items")
    if m == "best_single" and b.get("best_single", {}).get("benchmark"):
        label += f" ({display(b['best_single']['benchmark'])}, chosen on source models)"
    elif m.split("+")[0] in SUBSETS and m.split("+")[0] != "best_single" and n is not None:
        base, _, plus = m.partition("+")
        label = f"{METHODS[base].label}, {n} items" + (" + BenchAlign" if plus else "")
    return label


@table("benchalign-gains")
def benchalign_gains_table(s: Summaries) -> list[str]:
    """07: BenchAlign's paired differences in rho and pairwise accuracy to each baseline, per test group."""
    b = s("07_benchalign")
    main = b["main"]
    groups = _groups(main)[:2]
    out = header("BenchAlign against", *(f"{k}, {g}" for g in groups for k in ("Δrho", "Δ pair acc")))
    for other in [o for o in BASELINES if o in main[groups[0]]]:
        cells = [_diff(main[g]["benchalign"], f"{m}_diff_{other}") for g in groups for m in ("spearman", "pair_acc")]
        out.append(row(METHODS[other].label, *cells))
    return out


@table("benchalign-within")
def within_table(s: Summaries) -> list[str]:
    """07: source and test models of one flag value only (instruction-tuned, base): rho of plain
    accuracy, the parameter count and BenchAlign, and BenchAlign's paired differences to both."""
    b = s("07_benchalign")
    within = {k: v for k, v in b.get("within", {}).items() if "main" in v}
    if not within:
        return ["(skipped: " + "; ".join(str(v.get("skipped")) for v in b.get("within", {}).values()) + ")"]
    groups = [g for g in _groups(b["main"]) if any(g in v["main"] for v in within.values())][:2]
    out = header("models (source / test)", "method", *(f"{g} rho [95 %]" for g in groups))
    labels = {"instruct": "instruction-tuned only", "base": "base only"}
    for label, rec in within.items():
        counts = rec["counts"]
        name = f"{labels.get(label, label)} ({counts['source']} / " + " / ".join(
            f"{counts.get(g, 0)}" for g in groups) + ")"
        refs = [m for m in WITHIN_METHODS if m != "benchalign"]
        for m in ("benchalign", *refs):
            out.append(row(name if m == "benchalign" else "", _method(m, b),
                           *(_rho(rec["main"].get(g, {}).get(m)) for g in groups)))
        for ref in refs:
            out.append(row("", f"BenchAlign minus {METHODS[ref].label.split(' (')[0].lower()}",
                           *(_diff(rec["main"][g]["benchalign"], f"spearman_diff_{ref}") if g in rec["main"] else ""
                             for g in groups)))
    return out


@table("benchalign-subsets")
def subsets_table(s: Summaries) -> list[str]:
    """07: the MetaBench- and TinyBenchmarks-like subsets at the paper's fractions of the items,
    alone and + BenchAlign, paired with BenchAlign on all items."""
    b = s("07_benchalign")
    subsets = b.get("subsets", {})
    if not subsets:
        return ["(no subset study in this run)"]
    groups = _groups(b["main"])[:2]
    cols = ["method"]
    for g in groups:
        cols += [f"{g} rho [95 %]", f"minus BenchAlign (all items), {g}"]
    out = header(*cols)
    first = next(iter(subsets.values()))["main"]
    for m in ("benchalign", "no_alignment"):
        out.append(row(_method(m, b), *(c for g in groups for c in (_rho(first[g][m]), ""))))
    for rec in subsets.values():
        for m in [m for m in SUBSET_STUDY if m.split("+")[0] in SUBSETS]:
            name = _method(m, b, rec["items"]) + f" ({100 * rec['fraction']:.0f} %)"
            out.append(row(name, *(c for g in groups for c in (_rho(rec["main"][g][m]),
                                                                _diff(rec["main"][g][m], "spearman_diff_benchalign")))))
    return out


@table("benchalign-ablation")
def ablation_table(s: Summaries) -> list[str]:
    """07: the ranking loss, everything else the same protocol; every test group, 95 % bootstrap intervals."""
    b = s("07_benchalign")
    abl = b["ablation"]
    groups = [g for g in _groups(b["main"]) if g in abl][:2]
    big = groups[0]
    out = header("loss", *(f"{g} rho [95 %]" for g in groups), "seeds", f"{big} pair acc", "steps chosen (per seed)")
    for loss, r in sorted(abl[big].items(), key=lambda kv: -kv[1]["spearman"]):
        name = display(loss) + (" (BenchAlign's)" if loss == b["config"]["loss"] else "")
        out.append(row(name, *(_rho(abl[g][loss]) for g in groups), f(r["spearman_seed_std"], 3), f(r["pair_acc"]),
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
    for m in [m for m in ("benchalign", "benchalign_flag", *BASELINES, "random") if m in comp]:
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


@table("benchalign-arena")
def arena_table(s: Summaries) -> list[str]:
    """07's Arena targets: every method's rho [95 %] and paired difference to plain accuracy, on the
    cross-validation over all matched models and on each size hold-out group (n models in the header)."""
    b = s("07_benchalign")
    arena = {t: r for t, r in b.get("arena", {}).items() if t != "mapping"}
    if not arena:
        raise Missing("07_benchalign ran without Arena targets (they need the leaderboard's items: published)")
    out = header("target", "method", "rho [95 %]", "Δrho vs plain accuracy", "design, test models")
    for t, rec in sorted(arena.items(), key=lambda kv: kv[0] != "text"):     # the text rating first
        for g, rows in {**rec["cv"], **rec["hold_out"]}.items():
            n = next(iter(rows.values()))["n_models"]
            cv = g in rec["cv"]
            design = f"{g}, n = {n}" + ("" if cv else f" (source {rec['counts']['source']})")
            for i, m in enumerate(_methods(rows)):
                label = _method(m, {} if cv else rec) + (" (chosen in each fold)" if cv and m == "best_single" else "")
                out.append(row("" if i else "Arena " + t.replace("_", " "), label,
                               _rho(rows[m]), _diff(rows[m]), "" if i else design))
    return out


# --------------------------------------------------------------------------- the worked example (docs/align.md)
@table("align-example")
def example_table(s: Summaries) -> list[str]:
    """docs/align.md: the worked example's cross-validated metrics and the test models' rho."""
    a = _part(s, "example")
    out = header("", "aligned (BenchAlign on the pairs)", "plain accuracy", "difference")
    cv = a["cv"]
    for k, label in (("rho", "cross-validated rho with the Bradley-Terry strengths, source models"),
                     ("pair_acc", "cross-validated pair accuracy, source models' pairs")):
        out.append(row(label, *(est(cv[n][k], cv[n][k + "_ci"], sign=n == "diff")
                                for n in ("aligned", "plain_accuracy", "diff"))))
    for g, r in a["test"].items():
        target = a.get("target") or "the target"
        out.append(row(f"rho with {target}, {r['n_models']} test models {g}", f(r["aligned"]), f(r["plain"]),
                       f(r["aligned"] - r["plain"], sign=True)))
    return out


@table("align-noise")
def noise_doc_table(s: Summaries) -> list[str]:
    """docs/align.md: the noise / sparsity study, rho on each test group and the paired difference."""
    n = _part(s, "noise")
    groups = list(n["summary"])
    out = header("preferences", "pairs", "share against the latent", *(f"{g} rho [95 %]" for g in groups),
                 *(f"Δrho vs plain, {g}" for g in groups))
    labels = {"no_alignment": "plain accuracy (no preferences)", "random": "random weights"}
    for name in [*n["baselines"], *ordered_conditions(n["conditions"])]:
        c = n["conditions"].get(name)
        recs = [n["summary"][g][name] for g in groups]
        what = (f"{c['pairs_per_model']} per model" if c and c["pairs_per_model"] else "all pairs") if c else ""
        what = f"{what}, {round(c['flip'] * 100)} % flipped" if c else labels.get(name, method_label(name))
        out.append(row(what, str(c["pairs"]) if c else "", f(c["wrong"]) if c else "",
                       *(est(r["spearman"], r["spearman_ci"]) for r in recs),
                       *(est(r["spearman_diff_no_alignment"], r["spearman_diff_no_alignment_ci"], sign=True)
                         if "spearman_diff_no_alignment" in r else "" for r in recs)))
    return out


def _part(s: Summaries, key: str) -> dict:
    part = s("07_benchalign").get("align", {}).get(key)
    if part is None or "skipped" in part:
        raise Missing(f"07_benchalign's align.{key} " + (f"was skipped: {part['skipped']}" if part else
                                                          f"is missing (`make run PROFILE={s.profile} STAGES=07`)"))
    return part


# --------------------------------------------------------------------------- the command line
