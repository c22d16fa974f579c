"""runner.published (importer) and the analysis notebooks 04-06 run end to end through runner.run.

The published-data test runs the real notebooks on the paper's results and checks their
summary.json against the paper's numbers and against values computed here, independently, from
the raw all_results.json with scipy/numpy.
"""

from __future__ import annotations

import json
import math
import shutil

import numpy as np
import pytest
from scipy import stats

from lib import metadata, outputs, paths, published, store, util
from runner import run
from runner.published import import_store

PAPER_BENCHMARKS = 24


def _write(path, data):
    path.write_text(json.dumps(data))
    return path


SMALL = {"direct_eval": {"mnli": {"openai-community/gpt2": 0.35, "google/gemma-2b": 0.5},
                         "wiki_2025": {"openai-community/gpt2": 1.2, "google/gemma-2b": 0.8}},
         "direct_eval_stderr": {"mnli": {"openai-community/gpt2": 0.01, "google/gemma-2b": 0.02},
                                "wiki_2025": {"openai-community/gpt2": "N/A", "google/gemma-2b": "N/A"}},
         "train_before_test": {"mnli": {"openai-community/gpt2": 0.6, "google/gemma-2b": 0.8}}}


def test_import_small_file_is_faithful_and_idempotent(tmp_path, monkeypatch):
    monkeypatch.setattr(paths, "OUTPUTS", tmp_path / "out")
    src = _write(tmp_path / "all_results.json", SMALL)
    rec = import_store("p", source=src)
    assert rec["n_results"] == 6 and rec["sha256"] == util.sha256_file(src)
    df = store.load(paths.store_dir("p"))
    row = df[(df.protocol == "direct_eval") & (df.benchmark == "mnli") & (df.model == "google/gemma-2b")].iloc[0]
    assert (row.score, row.stderr, row.metric, row.higher_is_better) == (0.5, 0.02, "acc", True)
    wiki = df[df.benchmark == "wiki_2025"]
    assert wiki["stderr"].isna().all() and not wiki["higher_is_better"].any()
    assert wiki.iloc[0].metric == "bits_per_byte" and row.provenance["sha256"] == rec["sha256"]
    first = store.path_for(paths.store_dir("p"), "direct_eval", "mnli", "google/gemma-2b")
    mtime = first.stat().st_mtime_ns
    assert import_store("p", source=src)["sha256"] == rec["sha256"]
    assert first.stat().st_mtime_ns == mtime                                   # skipped: same file hash
    changed = {k: v for k, v in SMALL.items() if k != "train_before_test"}
    import_store("p", source=_write(src, changed))
    assert set(store.load(paths.store_dir("p"))["protocol"]) == {"direct_eval"}   # stale results removed


def test_import_rejects_bad_files_before_writing(tmp_path, monkeypatch):
    monkeypatch.setattr(paths, "OUTPUTS", tmp_path / "out")
    broken = tmp_path / "broken.json"
    broken.write_text('{"direct_eval": {"mnli": ')
    with pytest.raises(store.StoreError, match=r"corrupt data file .*broken\.json \(.*\): replace it"):
        import_store("p", source=broken)
    bad = _write(tmp_path / "bad.json", {"direct_eval": {"mnli": {"gpt2": "0.5"}}})
    with pytest.raises(store.StoreError, match=r"bad\.json \(direct_eval/mnli/gpt2: score '0\.5'"):
        import_store("p", source=bad)
    unknown = _write(tmp_path / "unknown.json", {"direct_eval": {"mnli": {"openai-community/gpt3": 0.5}}})
    with pytest.raises(metadata.MetadataError, match=r"unknown\.json: no metadata for model 'openai-community/gpt3'"):
        import_store("p", source=unknown)
    assert not paths.store_dir("p").exists()                                   # nothing half-written


def test_missing_data_folder_is_one_clear_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HARMONY_DATA", str(tmp_path / "nowhere"))
    with pytest.raises(paths.DataMissing, match="published data not found.*HARMONY_DATA"):
        import_store("published")
    assert run.main(["published"]) == 2                                        # the runner stops before any stage
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: published data not found") and "HARMONY_DATA" in err[0]


# ------------------------------------------------------------------ notebooks on a tiny store
TINY_PROFILE = "test_analysis_tiny"


@pytest.mark.slow
def test_analysis_notebooks_on_a_tiny_store(tmp_path, monkeypatch):
    """Few models, a one-benchmark category, a missing result, one corpus, no compute: 04-06 run
    through runner.run and report NaN with notes instead of crashing."""
    params_dir = tmp_path / "params"
    params_dir.mkdir()
    (params_dir / f"{TINY_PROFILE}.yaml").write_text(
        "description: tiny store for the analysis notebooks\nstages:\n"
        "  04_rank_agreement: {min_models: 3, rank_plot_pair: []}\n"
        "  05_perplexity: {min_models: 3}\n"
        "  06_pca: {min_models: 3, max_components: 10}\n")
    monkeypatch.setenv("TBT_PARAMS", str(params_dir))
    monkeypatch.setattr(paths, "PARAMS", params_dir)
    root = paths.store_dir(TINY_PROFILE)
    shutil.rmtree(paths.profile_dir(TINY_PROFILE), ignore_errors=True)
    models = {"tiny/a": False, "tiny/b": False, "tiny/c": True, "other/d": False}
    store.write_meta(root, "models", {m: {"family": m.split("/")[0], "instruct": i} for m, i in models.items()})
    store.write_meta(root, "benchmarks", {"t_qa": {"category": "Question Answering", "metric": "acc"},
                                          "t_qa2": {"category": "Question Answering", "metric": "acc_norm"},
                                          "t_math": {"category": "Math", "metric": "exact_match"},
                                          "t_corpus": {"category": "Perplexity", "metric": "bits_per_byte"}})
    rng = np.random.default_rng(1)
    for p in store.PROTOCOLS:
        for k, m in enumerate(models):
            for b in ("t_qa", "t_qa2", "t_math"):
                if (p, b, m) != ("train_before_test", "t_math", "other/d"):      # one missing result
                    store.write(root, store.Result(p, b, m, "acc", 0.2 + 0.1 * k + rng.uniform(0, 0.05)))
            store.write(root, store.Result(p, "t_corpus", m, "bits_per_byte", 2.0 - 0.2 * k, higher_is_better=False))
    log = run.run_profile(TINY_PROFILE, force=True)
    assert [s["status"] for s in log.values()] == ["ran"] * 3
    s04 = outputs.read_summary(TINY_PROFILE, "04_rank_agreement")
    assert s04["n_pairs"] == 3 and s04["n_benchmarks"] == 3
    assert any("one benchmark" in n for n in s04["notes"])
    s05 = outputs.read_summary(TINY_PROFILE, "05_perplexity")
    assert s05["corpora"] == ["t_corpus"] and s05["tau_average"]["direct"]["instruct"] is None   # NaN -> null
    s06 = outputs.read_summary(TINY_PROFILE, "06_pca")
    assert s06["n_models"] == {"direct_eval": 4, "train_before_test": 3}
    assert any("compute" in n for n in s06["notes"])


def test_params_typo_stops_the_run_before_any_stage(tmp_path, monkeypatch, capsys):
    params_dir = tmp_path / "params"
    params_dir.mkdir()
    (params_dir / "typo.yaml").write_text("description: typo\nstages:\n"
                                          "  04_rank_agreement: {min_model: 3, rank_plot_pair: []}\n")
    monkeypatch.setattr(paths, "PARAMS", params_dir)
    monkeypatch.setattr(paths, "OUTPUTS", tmp_path / "out")
    assert run.main(["typo"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert "typo.yaml: stages.04_rank_agreement.min_model: unknown key (did you mean 'min_models'?)" in err[0]
    assert not (tmp_path / "out").exists()


# ------------------------------------------------------------------ the paper's numbers
def _raw(harmony_data):
    return json.loads((harmony_data / published.RESULTS_FILE).read_text())


@pytest.mark.slow
@pytest.mark.published
def test_published_profile_reproduces_the_paper(harmony_data, published_analyses):
    s04 = published_analyses["04_rank_agreement"]              # the analysis stages (07 is tested on its own)
    assert s04["n_pairs"] == 276 and s04["n_benchmarks"] == PAPER_BENCHMARKS
    assert round(s04["mean_tau"]["direct_eval"], 2) == 0.52
    assert round(s04["mean_tau"]["train_before_test"], 2) == 0.76
    assert s04["pairs_improved"] == 274
    assert round(s04["benchmark_mean_tau"]["nq_open"]["direct_eval"], 2) == 0.23
    assert round(s04["benchmark_mean_tau"]["nq_open"]["train_before_test"], 2) == 0.74
    assert s04["lowest_benchmark"]["direct_eval"] == "nq_open"

    raw = _raw(harmony_data)
    corpora = ["arxiv_2025", "stackexchange_2025", "wiki_2025"]
    downstream = sorted(b for b in raw["direct_eval"] if b not in corpora)
    instruct = lambda m: m.endswith(("-Instruct", "-Chat", "-it"))

    def mean_over(protocol, names, models):
        return np.array([np.mean([raw[protocol][b][m] for b in names]) for m in models])

    s05 = outputs.read_summary("published", "05_perplexity")
    with_ppl = sorted(raw["direct_eval"]["wiki_2025"])
    assert len(with_ppl) == 53
    for setting, ppl_p, ds_p, group in [("direct", "direct_eval", "direct_eval", "all"),
                                        ("train_before_test", "train_before_test", "train_before_test", "all"),
                                        ("pre_ft_ppl_vs_tbt", "direct_eval", "train_before_test", "base"),
                                        ("direct", "direct_eval", "direct_eval", "instruct")]:
        ms = [m for m in with_ppl if group == "all" or instruct(m) == (group == "instruct")]
        expected = stats.kendalltau(-mean_over(ppl_p, corpora, ms), mean_over(ds_p, downstream, ms)).statistic
        assert s05["tau_average"][setting][group] == pytest.approx(expected, abs=1e-9), (setting, group)
        assert s05["n_models"][setting][group] == len(ms)

    s06 = outputs.read_summary("published", "06_pca")
    models = sorted(raw["direct_eval"]["mnli"])
    for protocol in store.PROTOCOLS:
        x = np.array([[raw[protocol][b][m] for b in downstream] for m in models])
        z = (x - x.mean(0)) / x.std(0)
        sv = np.linalg.svd(z, compute_uv=False)
        ratio = sv ** 2 / (sv ** 2).sum()
        assert s06["explained_variance"][protocol][:3] == pytest.approx(ratio[:3].tolist())
        qwen = [i for i, m in enumerate(models) if m.startswith("Qwen/")]
        zq = (x[qwen] - x[qwen].mean(0)) / x[qwen].std(0)
        svq = np.linalg.svd(zq, compute_uv=False)
        assert s06["family_pc1"][protocol]["Qwen"] == pytest.approx(svq[0] ** 2 / (svq ** 2).sum())
        assert s06["pc1_vs_log_compute"][protocol]["all"]["n_models"] == 36
        assert s06["pc1_vs_log_compute"][protocol]["base"]["n_models"] == 22
    assert s06["pc1_explained"]["train_before_test"] > s06["pc1_explained"]["direct_eval"] + 0.1
    assert not math.isnan(s06["pc1_vs_log_compute"]["train_before_test"]["all"]["pearson_r"])


@pytest.mark.slow
@pytest.mark.published
def test_the_papers_own_metrics_come_out_as_the_paper_reports(harmony_data, published_analyses):
    """Each paper row of the README's table, as the paper defines it, against the paper's value (two
    digits) and against scipy on the raw file; language understanding's direct value is the one gap
    (0.539 for the paper's 0.52), and none of the ways of computing it that docs/results.md lists
    gives the paper's pair of values."""
    from runner.tables.analysis import PAPER

    raw = _raw(harmony_data)
    s04, s05 = published_analyses["04_rank_agreement"], published_analyses["05_perplexity"]
    corpora = ["arxiv_2025", "stackexchange_2025", "wiki_2025"]
    downstream = sorted(b for b in raw["direct_eval"] if b not in corpora)
    with_ppl = sorted(raw["direct_eval"]["wiki_2025"])
    instruct = {m for m in with_ppl if m.endswith(("-Instruct", "-Chat", "-it"))}

    def tau(p, a, q, b, models):
        return stats.kendalltau([raw[p][a][m] for m in models], [raw[q][b][m] for m in models]).statistic

    def pairwise(ppl_p, ds_p, models):      # perplexity ranking (lower is better) against each benchmark's
        return np.mean([-tau(ppl_p, c, ds_p, b, models) for c in corpora for b in downstream])

    mp = s05["mean_tau_pairs"]
    for setting, ppl_p, ds_p in [("direct", "direct_eval", "direct_eval"),
                                 ("train_before_test", "train_before_test", "train_before_test")]:
        assert mp[setting]["all"] == pytest.approx(pairwise(ppl_p, ds_p, with_ppl), abs=1e-9)
    assert (round(mp["direct"]["all"], 2), round(mp["train_before_test"]["all"], 2)) == PAPER["ppl_pairs"]
    for group, models in (("base", [m for m in with_ppl if m not in instruct]), ("instruct", sorted(instruct))):
        value = mp["pre_ft_ppl_vs_tbt"][group]
        assert value == pytest.approx(pairwise("direct_eval", "train_before_test", models), abs=1e-9)
        assert round(value, 2) == PAPER["ppl_before_after"][group]
        assert s05["tau_average"]["pre_ft_ppl_vs_tbt"][group] > value        # the tau of averages is another number

    cells = s04["category_cells"]
    models = sorted(raw["direct_eval"]["mnli"])
    for category, paper in PAPER["within"].items():
        names = [b for b in downstream if metadata.benchmark_info(b).category == category]
        k = cells["cells"].index([category, category])
        assert cells["n_pairs"][k] == len(names) * (len(names) - 1) // 2
        for protocol, expected in zip(store.PROTOCOLS, paper):
            value = cells["tau"][protocol][k]
            pairs = [tau(protocol, a, protocol, b, models) for i, a in enumerate(names) for b in names[i + 1:]]
            assert value == pytest.approx(np.mean(pairs), abs=1e-9)
            if (category, protocol) == ("Language Understanding", "direct_eval"):
                assert round(value, 3) == 0.539 and expected == 0.52          # the documented, unexplained gap
            else:
                assert round(value, 2) == expected, (category, protocol)
    assert cells["n_pairs"][cells["cells"].index(["Math", "Math"])] == 1
    checks = s04["within_checks"]["Language Understanding"]
    assert len(checks) == 8 and not any((round(c["direct_eval"], 2), round(c["train_before_test"], 2))
                                        == PAPER["within"]["Language Understanding"] for c in checks)
    assert s04["rank_plot"]["a"] == "nq_open" and s04["rank_plot"]["b"] == "arc_challenge"
    assert s04["rank_plot"]["highlight"] == ["google/gemma-2-9b"]
