"""The docs table of a placement profile (stage 08; :mod:`lib.placement`)."""

from __future__ import annotations

from runner.doctables import Summaries, est, f, header, row, table


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
        out.append(row(
            model, f"{est(r['direct_mean_rank'], r['direct_ci_benchmarks'], 1)} (of {r['of']})",
            est(r["tbt_mean_rank"], r["tbt_ci_benchmarks"], 1), est(r["rank_shift"], r["rank_shift_ci"], 1, sign=True),
            f"{f(r['direct_tau_change'], 3, sign=True)} / {f(r['tbt_tau_change'], 3, sign=True)}"))
    return out
