"""BenchAlign experiments: size splits, no test model in training, the summary format, notebook 07."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from test_benchalign_data import make_pipeline_world

from lib import params, paths
from lib.analysis import uncertainty
from lib.benchalign import baselines, data, methods, rank, studies
from lib.benchalign import experiments as ex
from runner import contactsheet

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _world(K=60, M=40, seed=0):
    """Random item data: K models (sizes 0.5B..120B, every other one instruction-tuned); items of
    benchmark "a" follow the models' skill (2PL-like), items of "b" are coin flips; the target is
    the skill."""
    rng = np.random.default_rng(seed)
    skill = rng.normal(size=K)
    Xa = (rng.random((K, M // 2)) < 1 / (1 + np.exp(-(skill[:, None] - rng.normal(size=M // 2))))).astype(float)
    Xb = (rng.random((K, M - M // 2)) < 0.5).astype(float)
    sizes = np.geomspace(0.5, 120, K)
    return data.ItemData(np.hstack([Xa, Xb]), [f"m{k}" for k in range(K)],
                         np.array(["a"] * (M // 2) + ["b"] * (M - M // 2)), np.arange(M), skill, sizes,
                         instruct=np.arange(K) % 2 == 1)


def test_split_by_size_is_disjoint_and_notes_small_groups():
    d = _world()
    sp = methods.split_by_size(d, 13, {"30B+": 30, "70B+": 70, "500B+": 500})
    assert set(sp.source).isdisjoint(sp.groups["30B+"]) and set(sp.groups["70B+"]) <= set(sp.groups["30B+"])
    assert (d.size_b[sp.source] < 13).all() and (d.size_b[sp.groups["70B+"]] >= 70).all()
    assert "500B+" not in sp.groups and any("500B+ has 0 model(s)" in n for n in sp.notes)
    with pytest.raises(methods.ExperimentError, match="below the source limit"):
        methods.split_by_size(d, 13, {"bad": 7})
    rel = methods.split_by_size(d, 0.5, {"top half": 0.5}, relative=True)
    assert len(rel.source) == 30 and len(rel.groups["top half"]) == 30
    fold = methods.largest_fold(d, sp.source, 5, seed=0)           # validation="largest": the biggest fifth
    assert (fold == 0).sum() == round(len(sp.source) / 5)
    assert d.size_b[sp.source][fold == 0].min() >= d.size_b[sp.source][fold == -1].max()


def test_test_models_are_touched_once_for_the_final_score(monkeypatch):
    """A spy on the data every fit sees: only source rows, never a test row or a test target; the
    test targets are read once per method and seed, after that method's fits."""
    d = _world()
    d.X[:, 0] = np.arange(len(d.models)) / 100                 # every row unique, so rows are traceable
    sp = methods.split_by_size(d, 13, {"30B+": 30})
    test = sp.groups["30B+"]
    source_rows = {tuple(r) for r in d.X[sp.source]}
    test_rows = {tuple(r) for r in d.X[test]}
    events = []

    def fit_many_spy(X, y, tasks, **kwargs):                  # every weight-learning fit goes through here
        rows = {tuple(r) for r in np.asarray(X)[:, :d.X.shape[1]]}      # (BenchAlign + flag: one more column)
        assert rows <= source_rows and not rows & test_rows
        assert np.isfinite(y).all() and len(y) == len(X)
        events.append(("fit", len(tasks)))
        return real_fit_many(X, y, tasks, **kwargs)

    def baseline_spy(fn):
        def wrapper(X_src, *args, **kwargs):
            rows = {tuple(r) for r in np.asarray(X_src)}
            assert rows <= source_rows and not rows & test_rows
            events.append((fn.__name__, 1))
            return fn(X_src, *args, **kwargs)
        return wrapper

    def evaluate_spy(scores, y, groups):                       # the one reader of test targets
        events.append(("evaluate", 1))
        return real_evaluate(scores, y, groups)

    real_fit_many, real_evaluate = rank.fit_many, methods.evaluate
    monkeypatch.setattr(rank, "fit_many", fit_many_spy)
    monkeypatch.setattr(studies, "evaluate", evaluate_spy)
    for name in ("best_single", "metabench_like", "tinybenchmarks_like"):
        monkeypatch.setattr(baselines, name, baseline_spy(getattr(baselines, name)))
    methods._SUBSET_CACHE.clear()
    cfg = methods.Config(max_steps=20, patience=20, subset_items=8)
    comp = studies.compare(d, sp, methods.METHODS, seeds=2, cfg=cfg)
    assert set(comp.preds) == set(methods.METHODS)
    fits = [e for e in events if e[0] == "fit"]
    assert len(fits) == 5 and all(n == 2 for _, n in fits)        # 5 learned methods, the 2 seeds batched
    assert sum(e[0] == "metabench_like" for e in events) == 2      # chosen once per seed, shared
    assert sum(e[0] == "evaluate" for e in events) == len(methods.METHODS) * 2
    # per method: its fit (if any) comes before its evaluations, and nothing is fitted after them
    seen_eval = 0
    for kind, _ in events:
        if kind == "evaluate":
            seen_eval += 1
        elif kind == "fit":
            assert seen_eval % 2 == 0                              # between methods, never mid-method
    assert np.isfinite(comp.preds["benchalign"][:, test]).all()   # test models are scored, never trained on


def test_compare_summary_has_the_documented_format():
    d = _world(K=80, M=60)
    sp = methods.split_by_size(d, 13, {"30B+": 30, "70B+": 70})
    cfg = methods.Config(lr=1e-3, max_steps=200, patience=100, subset_items=10)
    comp = studies.compare(d, sp, ("benchalign", "no_alignment", "random", "best_single"), seeds=2, cfg=cfg)
    main = studies.summarise(comp, d.target, n_boot=200)
    assert set(main) == {"30B+", "70B+"}
    rec = main["70B+"]["benchalign"]
    for key in ("spearman", "spearman_std", "pair_acc", "pair_acc_std", "spearman_ci", "pair_acc_ci"):
        assert rec[key] is not None, key
    assert rec["spearman_ci"][0] <= rec["spearman"] <= rec["spearman_ci"][1]
    assert 0 < rec["pair_acc_std"] < 0.5 and rec["n_models"] == len(sp.groups["70B+"])
    assert main["30B+"]["best_single"]["spearman_seed_std"] == 0.0        # deterministic on source models
    # the target is the skill behind benchmark "a": the best single benchmark and BenchAlign find it
    assert baselines.best_single(d.X[sp.source], d.target[sp.source], d.item_benchmark).info["benchmark"] == "a"
    assert main["30B+"]["best_single"]["spearman"] > main["30B+"]["no_alignment"]["spearman"]
    by_bench = ex.weights_by_benchmark(d, comp.weights["benchalign"])
    assert by_bench.loc["a", "weight_sum"] > by_bench.loc["b", "weight_sum"]
    json.dumps(main)                                                       # plain JSON types


def test_summary_records_have_the_documented_keys_and_paired_differences():
    d = _world(K=80, M=60)
    sp = methods.split_by_size(d, 13, {"30B+": 30, "70B+": 70})
    cfg = methods.Config(lr=1e-3, max_steps=200, patience=100, subset_items=10)
    comp = studies.compare(d, sp, ("no_alignment", "best_single", "benchalign"), seeds=2, cfg=cfg)
    # a method scoring exactly like no alignment: its paired difference is 0 on every resample
    comp.preds["copy"] = comp.preds["no_alignment"].copy()
    comp.rows = pd.concat([comp.rows, comp.rows[comp.rows.method == "no_alignment"].assign(method="copy")])
    # plain accuracy plus noise: the paired interval is far narrower than the two intervals
    rng = np.random.default_rng(0)
    comp.preds["noisy"] = comp.preds["no_alignment"] + 0.002 * rng.normal(size=comp.preds["no_alignment"].shape)
    rows = [{"method": "noisy", "seed": s, "group": g, **r} for s in range(2)
            for g, r in methods.evaluate(comp.preds["noisy"][s], d.target, sp.groups).items()]
    comp.rows = pd.concat([comp.rows, pd.DataFrame(rows)])
    main = studies.summarise(comp, d.target, n_boot=300)
    rec = main["70B+"]["copy"]
    assert rec["spearman_diff_no_alignment"] == 0.0 and rec["spearman_diff_no_alignment_ci"] == [0.0, 0.0]
    assert rec["pair_acc_diff_no_alignment_ci"] == [0.0, 0.0]
    assert "spearman_diff_no_alignment" not in main["70B+"]["no_alignment"]       # no difference to itself
    noisy, plain = main["30B+"]["noisy"], main["30B+"]["no_alignment"]
    width = noisy["spearman_diff_no_alignment_ci"][1] - noisy["spearman_diff_no_alignment_ci"][0]
    assert width < 0.25 * (plain["spearman_ci"][1] - plain["spearman_ci"][0])
    ba = main["70B+"]["benchalign"]
    for key in ("spearman_seed_std", "spearman_std", "pair_acc_ci", "spearman_diff_best_single",
                "pair_acc_diff_best_single_ci", "n_models", "n_seeds"):
        assert ba[key] is not None, key
    assert ba["spearman_diff_no_alignment"] == pytest.approx(ba["spearman"] - main["70B+"]["no_alignment"]["spearman"],
                                                             abs=2e-4)
    protocol = ex.protocol_summary(comp.fits, cfg)
    assert protocol["chosen_steps"]["benchalign"] == [f.step for f in comp.fits["benchalign"]]
    assert protocol["curve"]["step"][0] == 0 and len(protocol["curve"]["val_loss"]) == 2
    json.dumps(main), json.dumps(protocol)                                         # plain JSON types


def test_bootstrap_matches_direct_metrics_without_resampling():
    y = np.arange(10.0)
    S = np.random.default_rng(0).random((3, 10))
    ones = np.ones((4, 10))                                       # every "resample" is the full set
    boot = studies.bootstrap(S, y, np.arange(10), ones)
    np.testing.assert_allclose(boot["spearman"], np.array([[rank.spearman(s, y)] * 4 for s in S]))
    np.testing.assert_allclose(boot["pair_acc"], np.array([[rank.pair_accuracy(s, y)] * 4 for s in S]))
    counts = uncertainty.draws(10, 50, seed=1)                    # with repeats: counts = explicit resample
    boot = studies.bootstrap(S, y, np.arange(10), counts)
    for b in (0, 7, 49):
        pick = np.repeat(np.arange(10), counts[b].astype(int))
        assert boot["pair_acc"][1, b] == pytest.approx(rank.pair_accuracy(S[1][pick], y[pick]))
        assert boot["spearman"][2, b] == pytest.approx(rank.spearman(S[2][pick], y[pick]))


def test_kcenter_selection_is_label_free_and_spreads_out():
    d = _world(K=40)
    source = np.arange(40)
    picked = studies.kcenter_selection(d, source, 6, seed=0)
    d2 = data.ItemData(d.X, d.models, d.item_benchmark, d.item_id, -d.target, d.size_b)
    np.testing.assert_array_equal(picked, studies.kcenter_selection(d2, source, 6, seed=0))   # no target used
    X = d.X.astype(float)
    def min_dist(sel):
        D = ((X[sel][:, None] - X[sel][None]) ** 2).sum(-1)
        return D[np.triu_indices(len(sel), 1)].min()
    rng = np.random.default_rng(0)
    assert min_dist(picked) >= np.median([min_dist(rng.choice(40, 6, replace=False)) for _ in range(50)])
    assert len(set(studies.spread_selection(d, source, 6, 0))) == 6
    assert len(studies.random_selection(d, source, 6, 1)) == 6


def test_too_few_models_degrade_to_notes():
    d = _world(K=4)
    sp = methods.split_by_size(d, 13, {"30B+": 30})
    assert not sp.groups and any("not evaluated" in n for n in sp.notes)
    comp = studies.compare(d, sp, methods.METHODS, seeds=1, cfg=methods.Config(max_steps=5))
    assert studies.summarise(comp, d.target) == {}
    three = methods.split_by_size(d, 20.0, {"20B+": 20.0}, min_test=1)   # 3 source models: no cross-validation
    assert any("too few to cross-validate" in n for n in three.notes)
    comp = studies.compare(d, three, ("benchalign",), seeds=1, cfg=methods.Config(max_steps=5))
    assert comp.fits["benchalign"][0].step == 0 and "too few" in comp.fits["benchalign"][0].note
    one = methods.split_by_size(d, 1.0, {"1B+": 1.0})                # a single source model: nothing to learn
    assert any("only 1 source model" in n for n in one.notes)
    comp = studies.compare(d, one, methods.METHODS, seeds=1, cfg=methods.Config(max_steps=5))
    fixed = {m for m, spec in methods.METHODS.items() if not spec.learns}       # the flag, size, plain, random
    assert set(comp.preds) == fixed and set(studies.summarise(comp, d.target)) == {"1B+"}
    assert {"instruct_flag", "param_count", "no_alignment"} <= fixed


# --------------------------------------------------------------------------- notebook 07
def _run_notebook(tmp_path, monkeypatch, parameters):
    import papermill as pm

    monkeypatch.setenv("TBT_OUTPUTS", str(tmp_path))
    monkeypatch.setenv("TBT_READS", str(tmp_path / "reads.log"))          # as the runner runs it: values as given
    out = tmp_path / "07.ipynb"
    parameters = {**params.load_profile(parameters["profile"]).params("07_benchalign"), **parameters}
    pm.execute_notebook(str(params.notebook_path("07_benchalign")), str(out), parameters=parameters,
                        cwd=str(paths.NOTEBOOKS), progress_bar=False, kernel_name="python3")
    return json.loads((tmp_path / parameters["profile"] / "07_benchalign" / "summary.json").read_text())


FAST = dict(seeds=1, max_steps=40, patience=40, subset_items=10, subset_fractions=[0.05], source_counts=[4],
            item_counts=[5],
            need_seeds=1, n_boot=50, threads=1)


@pytest.mark.slow
def test_notebook_runs_on_pipeline_items_and_degrades(tmp_path, monkeypatch):
    """Pipeline mode (smoke/mini): our direct-eval items as features, train-before-test as target."""
    profile = "smoke" if "07_benchalign" in _stages("smoke") else "published"
    make_pipeline_world(tmp_path / profile, n_models=8)
    summary = _run_notebook(tmp_path, monkeypatch, dict(
        profile=profile, data_source="pipeline", feature_benchmarks=[], relative_sizes=True, source_max_b=0.5,
        test_groups={"larger half": 0.5, "largest": 0.9}, cross_paper=False, **FAST))
    assert summary["data"]["data_source"] == "pipeline" and summary["data"]["items"] == 21
    assert set(summary["main"]) == {"larger half"}                 # "largest" has 1 model: noted, skipped
    assert set(summary["main"]["larger half"]) == set(methods.METHODS)
    assert any("largest has 1 model" in n for n in summary["notes"])
    assert summary["cross_paper"]["skipped"]
    review = contactsheet.check(tmp_path / profile / "07_benchalign")
    assert review and not any(review.values()), review


@pytest.mark.slow
@pytest.mark.published
def test_notebook_runs_on_leaderboard_items(published_run):
    """The published profile's 07 as `make all` runs it (the run the docs check reads: tests/conftest.py)."""
    out = published_run / "07_benchalign"
    summary = json.loads((out / "summary.json").read_text())
    assert summary["data"]["models"] == 428 and summary["data"]["data_source"] == "oll_items"
    assert set(summary["main"]) == {"13B+", "30B+", "70B+"}
    assert summary["flag_counts"]["70B+"]["instruct"] > 0 and summary["flag_counts"]["70B+"]["base"] > 0
    assert set(summary["within"]) == {"instruct", "base"} and "main" in summary["within"]["instruct"]
    assert set(summary["subsets"]) == {"0.071", "0.237"} and summary["subsets"]["0.071"]["items"] == 117
    assert summary["config"]["subset_items"] == 117          # 7.1 % of the 1,650 items: the paper's 1,500 of 21,065
    assert summary["ablation"]["30B+"]["ranknet"]["spearman_ci"] is not None
    flags = pd.read_csv(out / "instruct_flag.csv", index_col=0)
    assert len(flags) == 428 and flags.loc["google/gemma-2-27b-it", "instruct"]
    assert not flags.loc["meta-llama/Llama-3.1-70B", "instruct"]
    for group in ("30B+", "70B+"):
        for method in methods.METHODS:
            rec = summary["main"][group][method]
            assert {"spearman", "spearman_std", "pair_acc", "pair_acc_std"} <= set(rec)
            assert {"spearman_seed_std", "spearman_ci", "pair_acc_ci"} <= set(rec)
            if method != "no_alignment":
                assert {"spearman_diff_no_alignment", "spearman_diff_no_alignment_ci"} <= set(rec)
    assert summary["cross_paper"]["counts"]["source"] == 32
    assert "spearman_diff_no_alignment_ci" in summary["cross_paper"]["comparison"]["benchalign"]
    assert len(summary["protocol"]["chosen_steps"]["benchalign"]) == 5 and summary["protocol"]["curve"]["step"][0] == 0
    assert set(summary["source_selection"]["70B+"]["10"]) == set(studies.SELECTIONS)
    assert "19 model names" in summary["data"]["duplicates_line"] and summary["data"]["duplicates"] == "first"
    assert len(summary["data"]["info"]["duplicated_names"]) == 3
    arena = summary["arena"]            # issue 52: both Arena targets; in the cross-validation every model is tested
    assert set(arena) == {"mapping", "text", "instruction_following"} and arena["mapping"]["hand"] > 0
    for rec in (arena["text"], arena["instruction_following"]):
        (cv,) = rec["cv"].values()
        assert cv["benchalign"]["n_models"] == rec["models"] >= 30 and "30B+" in rec["hold_out"]
        assert cv["benchalign"]["spearman_diff_no_alignment_ci"] is not None
    assert summary["align"]["example"]["target"] == "Arena text"      # the worked example on human preferences
    figs = out / "figures"
    assert {p.name for p in figs.iterdir()} >= {"methods.pdf", "methods.png", "weights.png", "cross_paper_weights.png",
                                                  "learning_curve.png", "data_needs.png"}
    review = contactsheet.check(out)                  # sizes, text, overlap, labels (runner.figreview)
    assert not any(review.values()), review


def _stages(profile):
    try:
        return params.load_profile(profile, validate=False).stages
    except params.ParamsError:
        return {}


# --------------------------------------------------------------------------- the baselines that could explain a gain
def test_instruct_mark_reads_the_name_part_only():
    cases = {"Qwen/Qwen2-72B-Instruct": "instruct", "google/gemma-2-27b-it": "it", "01-ai/Yi-34B-Chat": "chat",
             "openchat/openchat-3.5-0106": "chat", "allenai/Llama-3.1-Tulu-3-70B-DPO": "dpo",
             "mlabonne/OrpoLlama-3-8B": "orpo", "OpenAssistant/oasst-sft-1-pythia-12b": "sft",
             "meta-llama/Llama-3.1-70B": None, "instruct-org/Llama-2-7b-hf": None,      # the owner does not count
             "tiiuae/Falcon3-10B-Base": None, "google/gemma-2-27b": None,
             "microsoft/Phi-3-medium-128k-instruct": "instruct", "HuggingFaceH4/zephyr-7b-beta": None}
    assert {m: data.instruct_mark(m) for m in cases} == cases
    assert data.instruct_flags(list(cases)).sum() == sum(v is not None for v in cases.values())


def test_instruct_rule_agrees_with_the_metadata_of_the_papers_models():
    from lib import metadata

    ids = [m for m in metadata._MODELS]
    assert len(ids) >= 61
    wrong = [m for m in ids if (data.instruct_mark(m) is not None) != metadata.model_info(m).instruct]
    assert not wrong, wrong


def test_flag_baselines_score_as_documented():
    d = _world(K=40)
    sp = methods.split_by_size(d, 13, {"30B+": 30})
    cfg = methods.Config(max_steps=20, patience=20)
    flag = methods.run_method("instruct_flag", d, sp.source, [0], cfg)[0].scores
    np.testing.assert_array_equal(flag, d.instruct.astype(float))
    both = methods.run_method("flag_accuracy", d, sp.source, [0], cfg)[0].scores
    plain = d.X.mean(1)
    assert both[d.instruct].min() > both[~d.instruct].max()                   # the flag first ...
    sub = d.instruct
    assert (np.argsort(both[sub], kind="stable") == np.argsort(plain[sub], kind="stable")).all()   # ... then accuracy
    np.testing.assert_array_equal(methods.run_method("param_count", d, sp.source, [0], cfg)[0].scores, d.size_b)
    aug = methods.with_flag(d)
    assert aug.X.shape[1] == d.X.shape[1] + 1 and aug.item_benchmark[-1] == "flag"
    out = methods.run_method("benchalign_flag", d, sp.source, [0], cfg)[0]
    assert len(out.weights) == d.X.shape[1] + 1
    no_flag = data.ItemData(d.X, d.models, d.item_benchmark, d.item_id, d.target, d.size_b)
    comp = studies.compare(no_flag, sp, methods.METHODS, seeds=1, cfg=cfg)
    assert not {m for m, spec in methods.METHODS.items() if spec.flag} & set(comp.preds)   # skipped, not faked


def test_within_groups_restrict_source_and_test_models_to_one_flag_value():
    d = _world(K=120, M=40)
    d.target = d.target + 3.0 * d.instruct                  # the flag explains most of the target ...
    sp = methods.split_by_size(d, 13, {"30B+": 30})
    cfg = methods.Config(lr=1e-3, max_steps=100, patience=50)
    comp = studies.compare(d, sp, ("no_alignment", "instruct_flag", "flag_accuracy", "benchalign"), seeds=1, cfg=cfg)
    main = studies.summarise(comp, d.target, n_boot=100)["30B+"]
    assert main["flag_accuracy"]["spearman"] > main["no_alignment"]["spearman"]
    assert {"spearman_diff_instruct_flag", "spearman_diff_flag_accuracy_ci"} <= set(main["benchalign"])
    sub = methods.restrict(sp, d.instruct)
    assert d.instruct[sub.source].all() and d.instruct[sub.groups["30B+"]].all()
    assert set(sub.source) <= set(sp.source)
    within = studies.within_groups(d, sp, seeds=1, cfg=cfg, n_boot=100)
    assert set(within) == {"instruct", "base"}
    for label, value in studies.WITHIN_GROUPS.items():
        rec = within[label]
        assert rec["counts"]["source"] == int((d.instruct[sp.source] == value).sum())
        r = rec["main"]["30B+"]
        assert set(r) == set(studies.WITHIN_METHODS) and r["benchalign"]["n_models"] == rec["counts"]["30B+"]
        assert {"spearman_diff_no_alignment_ci", "spearman_diff_param_count_ci"} <= set(r["benchalign"])
    few = methods.restrict(sp, np.zeros(len(d.models), bool))
    assert not few.groups and few.notes


def test_subset_study_and_ablation_carry_paired_bootstrap_intervals():
    d = _world(K=80, M=60)
    sp = methods.split_by_size(d, 13, {"30B+": 30, "70B+": 70})
    cfg = methods.Config(lr=1e-3, max_steps=60, patience=30, subset_items=6)
    out = studies.subset_sizes(d, sp, [0.1, 0.25], seeds=1, cfg=cfg, n_boot=100)
    assert [v["items"] for v in out.values()] == [6, 15]
    rec = out["0.25"]["main"]["70B+"]["tinybenchmarks_like+benchalign"]
    assert rec["spearman_diff_benchalign_ci"] is not None and "spearman_diff_best_single" not in rec
    abl = studies.ablation(d, sp, ("ranknet", "pointwise"), seeds=2, cfg=cfg)
    summ = ex.ablation_summary(abl, d.target, 100)
    for g in ("30B+", "70B+"):
        r = summ[g]["pointwise"]
        assert r["spearman_ci"][0] <= r["spearman"] <= r["spearman_ci"][1] and len(r["steps"]) == 2


def test_anchor_points_do_not_depend_on_threads():
    """k-means runs on one thread whatever the pool holds (its threads sum partial centres in the
    order they finish): the same anchors every time."""
    from threadpoolctl import threadpool_limits

    X = (np.random.default_rng(3).random((50, 300)) < 0.4).astype(float)
    runs = []
    for threads in (1, 2, 2, 1):
        with threadpool_limits(limits=threads):
            b = baselines.tinybenchmarks_like(X, 40, seed=0)
        runs.append((b.items.tolist(), b.weights.tolist()))
    assert all(r == runs[0] for r in runs)


def test_figures_say_what_they_draw_and_part_in_greyscale(tmp_path):
    """The weights figures give the sums they draw (no 'normalised to sum to 1'), the test groups
    differ in marker or hatch, not only in grey, the paper's value is marked, and the ablation's
    whiskers are its bootstrap intervals."""
    import matplotlib.pyplot as plt

    from lib import plots
    from lib.benchalign import figures

    d = _world(K=80, M=60)
    sp = methods.split_by_size(d, 13, {"30B+": 30, "70B+": 70})
    cfg = methods.Config(lr=1e-3, max_steps=60, patience=30)
    comp = studies.compare(d, sp, ("no_alignment", "instruct_flag", "benchalign"), seeds=2, cfg=cfg)
    main = studies.summarise(comp, d.target, n_boot=100)
    fig = figures.method_bars(main)
    ax = fig.axes[0]
    markers = {(line.get_marker(), line.get_markerfacecolor()) for line in ax.get_lines()
               if line.get_linewidth() == 0 and line.get_marker() not in ("*", "None")}
    assert len(markers) == 2                                         # one (marker, fill) per test group
    stars = [line for line in ax.get_lines() if line.get_marker() == "*"]
    assert [list(s.get_xdata()) for s in stars] == [[methods.PAPER_RHO["70B+"]["no_alignment"],
                                                     methods.PAPER_RHO["70B+"]["benchalign"]]]
    w = comp.weights["benchalign"]
    hist = figures.weight_hist(d.item_benchmark, w)
    assert "normalised to sum to 1" not in plots.caption(hist)
    assert f"Σ = {np.mean(w, axis=0).sum():.2f}" in hist._tbt_title
    cross = figures.cross_weights({"a": {"mean": -0.5, "std": 0.1}, "b": {"mean": 0.7, "std": 0.1}})
    assert "Σ = 0.20" in cross.axes[0].get_xlabel()
    abl = ex.ablation_summary(studies.ablation(d, sp, ("ranknet", "pointwise"), seeds=2, cfg=cfg), d.target, 100)
    bars = figures.ablation_bars(abl)
    containers = bars.axes[0].containers
    hatches = {c.patches[0].get_hatch() for c in containers if hasattr(c, "patches")}
    assert len(hatches) == 2
    first = [c for c in containers if hasattr(c, "patches")][0]      # 70B+ (largest first), losses by rho
    losses = sorted(abl["70B+"], key=lambda loss: -abl["70B+"][loss]["spearman"])
    seg = first.errorbar.lines[2][0].get_segments()
    for loss, s in zip(losses, seg):
        assert [s[0][0], s[1][0]] == pytest.approx(abl["70B+"][loss]["spearman_ci"])
    plt.close("all")


def test_uniform_weights_tie_models_with_the_same_count_exactly():
    """Plain accuracy (and any uniform weighting) counts first and scales once: models with the same
    number of correct items, on different items, get the same score bit for bit (a sum of 1/M terms
    broke 43 such ties among the leaderboard's 428 models, in a machine-dependent way)."""
    rng = np.random.default_rng(0)
    X = np.zeros((40, 997))
    for row in X:
        row[rng.choice(997, 300, replace=False)] = 1
    scores = baselines.no_alignment(997).score(X)
    assert len(set(scores.tolist())) == 1
    sub = baselines.ItemWeighting("s", np.arange(500), np.full(500, 1 / 500))
    counts = X[:, :500].sum(1)
    for c in np.unique(counts):
        assert len(set(sub.score(X)[counts == c].tolist())) == 1


def test_stored_units_of_two_subset_sizes_do_not_overwrite_each_other(tmp_path, monkeypatch):
    """The comparison's subsets and the subset study's other size are stored apart, so a second run
    reuses every unit (one file per size, not one file rewritten by each)."""
    from lib.benchalign import memo

    d = _world(K=60, M=40)
    sp = methods.split_by_size(d, 13, {"30B+": 30})
    cfg = methods.Config(max_steps=20, patience=20, subset_items=4)

    def both(m):
        studies.compare(d, sp, ("no_alignment", "metabench_like", "tinybenchmarks_like"), 1, cfg, memo=m)
        studies.subset_sizes(d, sp, [0.1, 0.25], 1, cfg, n_boot=20, memo=m)

    both(memo.Memo(tmp_path, k=1))
    assert {p.stem for p in tmp_path.glob("method-metabench_like-*.pkl")} == {"method-metabench_like-4",
                                                                             "method-metabench_like-10"}
    monkeypatch.setattr(studies, "run_method", lambda *a, **k: pytest.fail("a stored unit was computed again"))
    again = memo.Memo(tmp_path, k=1)
    both(again)
    assert again.reused and not again.redone
