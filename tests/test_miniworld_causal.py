"""The causal analyses of the mini world (lib.miniworld.causal) on a hand-made zoo whose answers are known.

Six base models of rising skill that every benchmark ranks alike; three twins (format, instruct,
contam) whose preparation lifts their direct-evaluation scores on their targets in proportion to
the dose and does nothing after fine-tuning; a sham that equals its base; a benchmark at the floor
for every unprepared model. Per-item results are generated so that a model of skill p answers item
i when u_i < p (u fixed per benchmark), so item means equal the skills and rankings are exact.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import scipy.stats as st

from lib import layout, store
from lib.miniworld import causal
from lib.store import DIRECT, TBT

BENCH = ["t1", "t2", "t3", "floor"]
N_ITEMS = 400
SKILL = {f"b{i}": 0.3 + 0.08 * i for i in range(6)}
TWINS = {"b1-format25": ("b1", "format", 0.25, ["t1", "floor"]),
         "b2-instruct50": ("b2", "instruct", 0.5, ["t1", "t2", "floor"]),
         "b3-contam75": ("b3", "contam", 0.75, ["t1"])}


def _write(root, work, protocol, bench, model, p, u):
    correct = (u < p).astype(float).tolist()
    store.write(root, store.Result(protocol, bench, model, "acc", float(np.mean(correct)), stderr=0.02,
                                   n=N_ITEMS))
    layout.write_items(work, protocol, bench, model, metric="acc", doc_ids=list(range(N_ITEMS)), correct=correct)


@pytest.fixture(scope="module")
def zoo(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("causal")
    root, work = tmp / "store", tmp / "work"
    rng = np.random.default_rng(0)
    u = {b: rng.random(N_ITEMS) for b in BENCH}
    meta = {m: {"family": "mw-f", "extra": {"kind": "base", "dose": 0.0, "prepared": {}, "size": "s"}} for m in SKILL}
    for twin, (base, kind, dose, targets) in TWINS.items():
        meta[twin] = {"family": "mw-f", "instruct": True,
                      "extra": {"kind": kind, "dose": dose, "base_model": base, "size": "s",
                                "prepared": {t: int(100 * dose) for t in targets}}}
    meta["b2-sham"] = {"family": "mw-f", "extra": {"kind": "sham", "dose": 0.0, "base_model": "b2", "prepared": {},
                                                   "size": "s"}}
    store.write_meta(root, "models", meta)
    store.write_meta(root, "benchmarks", {b: {"category": "QA", "metric": "acc", "chance": 0.0} for b in BENCH})
    for model, skill in SKILL.items():
        for p in store.PROTOCOLS:
            for b in BENCH:
                floor = b == "floor" and p == DIRECT
                _write(root, work, p, b, model, 0.0 if floor else skill, u[b])
    for twin, (base, _kind, dose, targets) in TWINS.items():
        for p in store.PROTOCOLS:
            for b in BENCH:
                lift = 0.6 * dose if (p == DIRECT and b in targets) else 0.0
                base_p = 0.0 if (b == "floor" and p == DIRECT) else SKILL[base]
                _write(root, work, p, b, twin, base_p + lift, u[b])
    for p in store.PROTOCOLS:
        for b in BENCH:
            _write(root, work, p, b, "b2-sham", 0.0 if (b == "floor" and p == DIRECT) else SKILL["b2"], u[b])
    return root, work, u


def test_mean_tau_equals_scipy_tau_b():
    rng = np.random.default_rng(1)
    x = rng.integers(0, 4, (3, 7, 4)).astype(float)            # ties on purpose
    want = [np.mean([st.kendalltau(x[d, :, a], x[d, :, b]).statistic for a, b in itertools.combinations(range(4), 2)])
            for d in range(3)]
    assert causal._mean_tau(x) == pytest.approx(want)


def test_design_and_compositions(zoo):
    root, _, _ = zoo
    des = causal.design(root)
    assert set(des["kind"]) == {"base", "format", "instruct", "contam", "sham"}
    assert causal.twins(des) == {"b1": "b1-format25", "b2": "b2-instruct50", "b3": "b3-contam75"}   # no sham
    comps = causal.compositions(des)
    shares = {}
    for c in comps:
        shares.setdefault(c["zoo"], []).append(c)
        assert len(c["models"]) == 6                              # a twin replaces its base, never joins it
    assert [len(shares[f"share {s:.2f}"]) for s in causal.SHARES] == [1, 3, 3, 1]   # every subset of 3 holders
    assert shares["share 1.00"][0]["models"] == ["b0", "b1-format25", "b2-instruct50", "b3-contam75", "b4", "b5"]
    assert shares["dose 0.5"][0]["swapped"] == ["b2"] and shares["kind contam"][0]["swapped"] == ["b3"]


def test_floor_benchmark_is_not_attemptable(zoo):
    root, work, u = zoo
    df = store.load(root)
    bases = sorted(SKILL)
    assert causal.attemptable(df, root, work, bases, BENCH) == ["t1", "t2", "t3"]


def test_direct_agreement_falls_as_twins_come_in_and_fine_tuning_restores_it(zoo):
    root, work, _ = zoo
    des = causal.design(root)
    items = causal.Items(work, list(des["model"]), BENCH)
    table = causal.composition_agreement(items, des, {"attemptable": ["t1", "t2", "t3"]}, n_boot=100)
    shares = table[table["zoo"].str.startswith("share")].set_index("share")
    assert shares.loc[0.0, f"tau_{DIRECT}"] == pytest.approx(1.0)          # the bases rank alike everywhere
    direct = shares[f"tau_{DIRECT}"].to_numpy()
    assert (np.diff(direct) < 0).all()                                     # falls with every third swapped in
    assert shares[f"tau_{TBT}"].to_numpy() == pytest.approx(1.0)            # fine-tuning removes the lift
    assert shares.loc[1.0, f"change_{DIRECT}_hi"] < 0 < shares.loc[1.0, "tbt_minus_direct_change_lo"]
    by_dose = table.set_index("zoo")
    assert by_dose.loc["dose 0.75", f"change_{DIRECT}"] < by_dose.loc["dose 0.25", f"change_{DIRECT}"] <= 0


def test_leads_shrink_under_fine_tuning_and_the_sham_has_none(zoo):
    root, work, u = zoo
    des = causal.design(root)
    items = causal.Items(work, list(des["model"]), BENCH)
    lead = causal.leads(items, des, BENCH, n_boot=100).set_index("model")
    for twin, (base, _, dose, targets) in TWINS.items():
        # the lift is 0.6 x dose on every target, measured on the items (the floor target starts at 0)
        start = {t: 0.0 if t == "floor" else SKILL[base] for t in targets}
        want = np.mean([np.mean(u[t] < start[t] + 0.6 * dose) - np.mean(u[t] < start[t]) for t in targets])
        assert lead.loc[twin, f"lead_{DIRECT}"] == pytest.approx(want)
        assert lead.loc[twin, f"lead_{TBT}"] == pytest.approx(0.0, abs=1e-12)
        assert lead.loc[twin, "kept"] == pytest.approx(0.0, abs=1e-12)
        assert lead.loc[twin, "shift"] > 0                                  # it falls once everyone is fine-tuned
    assert lead.loc["b2-sham", f"lead_{DIRECT}"] == 0 and lead.loc["b2-sham", f"lead_{TBT}"] == 0
    check = causal.manipulation_check(lead.reset_index(), des)
    assert check["sham"]["ok"] and check["contam"]["ok"] and check["instruct"]["ok"]
    assert check["contam"]["lead_direct"] == pytest.approx(lead.loc["b3-contam75", f"lead_{DIRECT}"])
    pooled = lead.loc["format (all doses)"]
    assert pooled[f"lead_{DIRECT}"] == pytest.approx(lead.loc["b1-format25", f"lead_{DIRECT}"])


def test_task_leads_pool_only_the_clear_ones(zoo):
    """Task by task: b1-format25 lifts t1 and the floor by 0.15 (clear), b2-instruct50 its three
    targets by 0.30, b3-contam75 t1 by 0.45; none survives fine-tuning. A target whose lift falls
    below LEAD_MIN is not clear and stays out of its kind's pooled row."""
    root, work, u = zoo
    des = causal.design(root)
    items = causal.Items(work, list(des["model"]), BENCH)
    table = causal.task_leads(items, des, BENCH, n_boot=100)
    rows = table[table["base"].astype(bool)].set_index(["model", "task"])
    assert len(rows) == 2 + 3 + 1                                       # one row per (twin, target); no sham
    for twin, (base, _, dose, targets) in TWINS.items():
        for t in targets:
            start = 0.0 if t == "floor" else SKILL[base]
            want = np.mean(u[t] < start + 0.6 * dose) - np.mean(u[t] < start)
            assert rows.loc[(twin, t), f"lead_{DIRECT}"] == pytest.approx(want)
            assert rows.loc[(twin, t), f"lead_{TBT}"] == pytest.approx(0.0, abs=1e-12)
            assert rows.loc[(twin, t), "clear"] == (want >= causal.LEAD_MIN and rows.loc[(twin, t), "z_direct"] > 3)
    pooled = table[~table["base"].astype(bool)].set_index("kind")
    clear = rows[rows["clear"]].reset_index()
    for kind, part in clear.groupby("kind"):
        assert pooled.loc[kind, f"lead_{DIRECT}"] == pytest.approx(part[f"lead_{DIRECT}"].mean())
        assert pooled.loc[kind, "kept"] == pytest.approx(0.0, abs=1e-12)
    summary = causal._clear_summary(table)
    assert summary["instruct"]["n_rows"] == 3 and summary["instruct"]["n_clear"] == int(
        rows.loc["b2-instruct50", "clear"].sum())


def test_item_bootstrap_scores_tie_exactly_when_counts_tie():
    """Models with the same number of correct items (on different items) score the same, bit for
    bit, on the plain sample and on every draw where their counts tie: the scores are whole counts
    divided once, so Kendall's ties do not hang on a BLAS library's summation order (dividing the
    draws first broke about half of these ties)."""
    rng = np.random.default_rng(0)
    n = 997                                                   # 1/n is not a binary fraction
    values = np.zeros((6, n))
    for row in values:
        row[rng.choice(n, 300, replace=False)] = 1
    items = object.__new__(causal.Items)
    items.models, items.benchmarks = [f"m{i}" for i in range(6)], ["x"]
    items.values = {p: {"x": values} for p in (DIRECT, TBT)}
    s = items.scores(200, 0)[DIRECT][:, :, 0]
    assert (s[0] == 300 / n).all()
    counts = (values @ np.vstack([np.ones((1, n)), causal.uncertainty.draws(n, 200, 0)]).T).T
    tied = 0
    for i, j in itertools.combinations(range(6), 2):
        same = counts[:, i] == counts[:, j]
        tied += same.sum()
        assert (s[same, i] == s[same, j]).all()
    assert tied > 20
