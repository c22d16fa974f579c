"""The results tables of stages 01-03 that README.md and docs/ quote (registered in
:mod:`runner.doctables`; they read the keys of 01's selection and of
:func:`lib.pipeline.reports.finetune_report` / :func:`lib.pipeline.reports.direct_eval_report`)."""

from __future__ import annotations

from runner.doctables import Summaries, f, header, pct, row, table


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
    for bench in sorted(inside):        # by name: an order by share reorders with the CPU's last bits
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
