"""The mini world's results tables that docs/miniworld.md quotes: 04's ``preparation``
(:mod:`lib.miniworld.analysis`'s P1 manipulation check, benchmark subsets, zoo compositions and the
leads of prepared models), registered in :mod:`runner.doctables`."""

from __future__ import annotations

from runner.doctables import D, Missing, Summaries, T, est, f, gain, header, row, table

KINDS = {"format": "format exposure", "instruct": "instruction-style", "contam": "contamination",
         "answers": "answer-contaminated (positive control)", "sham": "sham (negative control)"}


def _prep(s: Summaries) -> dict:
    prep = s("04_rank_agreement").get("preparation")
    if not prep or "leads" not in prep:
        raise Missing(f"outputs/{s.profile}/04_rank_agreement has no preparation: this profile's zoo has no "
                      "prepared twins (the mini profile has them: `make all`)")
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
