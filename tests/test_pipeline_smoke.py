"""The pipeline end to end on the smoke profile (prepare + notebooks 01-03, one shared run), plus
kill-and-resume, same-seed determinism, test-split isolation and the submitit path."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lib import layout, outputs, paths, store
from lib.pipeline import evaluate as ev
from lib.pipeline import finetune as ft
from lib.pipeline.launch import jobs
from lib.store import DIRECT, TBT

pytestmark = pytest.mark.slow
PROFILE = "smoke"


def _scores(root, protocol):
    df = store.load(root, protocol)
    return {(r.model, r.benchmark): r for r in df.itertuples()}


def test_every_model_and_task_scored_under_both_protocols(smoke):
    sel = smoke["selection"]
    assert sel["benchmarks"] == ["mw_facts", "mw_quiz", "mw_recall"]
    assert sel["corpora"] == ["mw_wiki"]
    models = ev.default_models(smoke["store"])
    assert models == ["mw-gpt2-s", "mw-gpt2-s-format50", "mw-llama-s", "mw-llama-s-contam50"]
    for protocol in ("direct_eval", "train_before_test"):
        got = _scores(smoke["store"], protocol)
        assert set(got) == {(m, b) for m in models for b in sel["selected"]}
        assert got[("mw-llama-s", "mw_wiki")].metric == "bits_per_byte"
        assert got[("mw-llama-s", "mw_wiki")].higher_is_better is False
        assert got[("mw-llama-s", "mw_facts")].metric == "acc_norm"
        assert got[("mw-llama-s", "mw_quiz")].metric == "acc"
        assert got[("mw-llama-s", "mw_recall")].metric == "exact_match"


def test_fine_tuned_beats_untouched(smoke):
    direct, tbt = _scores(smoke["store"], "direct_eval"), _scores(smoke["store"], "train_before_test")
    models = ev.default_models(smoke["store"])
    gain = {b: [tbt[(m, b)].score - direct[(m, b)].score for m in models] for b in ("mw_recall", "mw_wiki")}
    # zero-shot hardly any model answers the recall questions in their format (a bare value after
    # "Answer:": at most 2 of 100); fine-tuning teaches the format, and the models answer more of what
    # they know (today: +0.00 for the smallest base, whose 100 test questions are beyond it, to +0.12)
    assert max(direct[(m, "mw_recall")].score for m in models) <= 0.02
    assert sum(g > 0 for g in gain["mw_recall"]) >= len(models) - 1 and min(gain["mw_recall"]) >= 0
    assert sum(gain["mw_recall"]) / len(models) > 0.04
    assert max(gain["mw_wiki"]) < -0.3             # fine-tuning on the corpus lowers every model's bits/byte


def test_prepared_twins_are_not_damaged(smoke):
    """Preparation (the zoo's twins, directly evaluated) does not damage a twin: its held-out
    perplexity is not more than 10 % above its base's and no unprepared task costs more than the
    noise. (Lower is not damage: the format twin's passages resemble the wiki corpus's sentences,
    and with preparation added to the base's last phase its mw_wiki perplexity falls by 15 % here
    (0.85x); notebook 04's two-sided table ``preparation_twin_health`` reports that as outside
    10 %.) That a prepared task is *clearly* above the base needs the mini world's 500-item test
    splits; the smoke world's splits are too small to show it."""
    from lib.miniworld import analysis as mwa

    table = mwa.twin_health(store.load(smoke["store"]), smoke["store"])
    assert set(table["model"]) == {"mw-gpt2-s-format50", "mw-llama-s-contam50"}
    ppl = table[table["kind"] == "perplexity"]
    assert len(ppl) == 2 and (ppl["ratio"] <= 1 + mwa.PPL_TOLERANCE).all(), ppl
    other = table[table["kind"] == "other"]
    assert len(other) == 2 and other["ok"].all(), other   # the format twin's mw_facts, the contam twin's mw_quiz


def test_chosen_lr_and_epoch_are_the_validation_best(smoke):
    tbt = _scores(smoke["store"], "train_before_test")
    for (model, bench), res in tbt.items():
        prov = res.provenance
        assert "recipe" not in prov and prov["config"]["recipe"]["epochs"] == 3    # the recipe, stored once
        units = [ft.read_unit(layout.unit_dir(smoke["work"], model, bench, lr)) for lr in prov["config"]["lrs"]]
        key = "val_loss" if prov["select_on"] == "loss" else "val_score"      # the paper chose on the loss
        higher = res.higher_is_better if key == "val_score" else False
        points = [(u.lr, p["epoch"], p[key]) for u in units for p in u.curve]
        assert len(points) == 2 * 3
        best = max(p[2] for p in points) if higher else min(p[2] for p in points)
        first = next(p for p in points if p[2] == best)
        assert (prov["lr"], prov["epoch"], prov[key]) == first
        assert prov["val_curves"] == {layout.lr_name(u.lr): [p[key] for p in u.curve] for u in units}
        chosen = layout.unit_dir(smoke["work"], model, bench, prov["lr"]) / f"epoch={prov['epoch']}"
        assert (chosen / "adapter_config.json").exists()
        assert prov["adapter"] == chosen.relative_to(smoke["work"]).as_posix()        # moves with outputs/
        others = [d for d in layout.benchmark_dir(smoke["work"], model, bench).glob("lr=*/epoch=*") if d != chosen]
        assert others == []                                            # only the chosen adapter is kept
        assert prov["n_test"] == res.n and prov["n_train"] > 0 and prov["validation_carved_from_train"] is False


def test_per_item_correctness_matches_the_scores(smoke):
    for protocol in ("direct_eval", "train_before_test"):
        for (model, bench), res in _scores(smoke["store"], protocol).items():
            path = layout.items_path(smoke["work"], protocol, bench, model)
            if bench == "mw_wiki":
                assert not path.exists()
                continue
            items = json.loads(path.read_text())
            assert (items["model"], items["benchmark"], items["protocol"], items["metric"]) == \
                (model, bench, protocol, res.metric)
            assert len(items["doc_ids"]) == len(items["correct"]) == res.n
            assert items["doc_ids"] == sorted(set(items["doc_ids"]))
            assert sum(items["correct"]) / res.n == pytest.approx(res.score)


def test_stage_summaries(smoke):
    s2 = outputs.read_summary(PROFILE, "02_finetune")
    s3 = outputs.read_summary(PROFILE, "03_direct_eval")
    assert s2["n_results"] == 16 and sum(s2["chosen_lr_counts"].values()) == 16
    assert s3["n_results"] == 16
    assert s3["mean_gain_tbt_minus_direct"]["mw_recall"] > 0
    assert s3["perplexity_mean_change"]["mw_wiki"] < 0
    for stage, fig in (("02_finetune", "val_curves"), ("03_direct_eval", "direct_vs_tbt")):
        assert (paths.stage_dir(PROFILE, stage) / "figures" / f"{fig}.pdf").exists()


# ---------------------------------------------------------------------------------------------
# resume, determinism, test isolation, submitit


def _spec(smoke, tmp: Path, protocol=TBT, benchmarks=("mw_quiz",), model="mw-llama-s"):
    sel = smoke["selection"]
    for kind in ("models", "benchmarks"):
        store.write_meta(tmp / "store", kind, store.read_meta(smoke["store"], kind))
    recipe = ft.Recipe.default(lrs=(3e-3, 1e-2, 2e-2), epochs=3, batch_size=16, max_length=256, weight_decay=0.0,
                               loss_on="target", end_of_text="generative", select_on="metric")
    (spec,) = jobs.plan(protocol, [model], {**sel, "selected": list(benchmarks)}, store_root=tmp / "store",
                        work_root=tmp / "work", recipe=recipe, bootstrap_iters=0, eval_batch_size=32, max_gen_toks=0)
    return spec


def _outcome(spec):
    res = store.read(store.path_for(spec.store_root, spec.protocol, spec.benchmarks[0], spec.model))
    items = json.loads(layout.items_path(spec.work_root, spec.protocol, spec.benchmarks[0], spec.model).read_text())
    p = res.provenance
    return res.score, p["lr"], p["epoch"], p["val_curves"], items["correct"]


def test_killed_run_resumes_to_the_same_results_and_same_seed_same_scores(smoke, tmp_path, monkeypatch):
    # 1) uninterrupted, in process, spying on which split each evaluation used
    spec_a = _spec(smoke, tmp_path / "a")
    calls, loads = [], []
    real_eval, real_select, real_load = ev.evaluate, ft.select_best, ev.load_model
    monkeypatch.setattr(ev, "load_model", lambda *a, **k: loads.append(a) or real_load(*a, **k))
    monkeypatch.setattr(ev, "evaluate", lambda lm, task, info, role, *a, **k:
                        calls.append(role) or real_eval(lm, task, info, role, *a, **k))
    monkeypatch.setattr(ft, "select_best", lambda *a, **k: calls.append("select") or real_select(*a, **k))
    jobs.run_job(spec_a)
    # the test split is evaluated once, after the choice; every choice-relevant call saw validation
    assert calls == ["validation"] * 9 + ["select", "test"]
    assert len(loads) == 1             # the base model stays in memory across 3 learning rates x 3 epochs
    monkeypatch.undo()
    a = _outcome(spec_a)

    # 2) the same job in a subprocess, killed while it trains the second learning rate
    spec_b = _spec(smoke, tmp_path / "b")
    spec_file = tmp_path / "spec.json"
    spec_file.write_text(json.dumps(spec_b.to_dict()))
    first = layout.unit_dir(spec_b.work_root, spec_b.model, "mw_quiz", 3e-3) / layout.UNIT_FILE
    second = layout.unit_dir(spec_b.work_root, spec_b.model, "mw_quiz", 1e-2)
    proc = subprocess.Popen([sys.executable, "-m", "lib.pipeline.launch.jobs", str(spec_file)], cwd=paths.ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 240
    while not first.exists() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL, "the job finished before it could be killed"
    assert first.exists() and not (second / layout.UNIT_FILE).exists()
    assert not store.path_for(spec_b.store_root, spec_b.protocol, "mw_quiz", spec_b.model).exists()
    assert store.load(spec_b.store_root).empty                         # nothing half-written is read

    # 3) resume: the finished unit is reused, the killed one redone; same results as uninterrupted
    mtime = first.stat().st_mtime
    jobs.run_job(spec_b)
    assert first.stat().st_mtime == mtime
    assert _outcome(spec_b) == a
    assert jobs.run_job(spec_b).scores == {}                        # finished: nothing to do
    changed = dataclasses.replace(spec_b, recipe=dataclasses.replace(spec_b.recipe, epochs=2))
    assert changed.pending() == ["mw_quiz"]                       # another recipe is not reused
    assert ft.read_unit(first.parent, changed.config(3e-3)) is None
    assert ft.read_unit(first.parent, spec_b.config(3e-3)).curve

    # 4) a second uninterrupted run with the same seed gives the same scores
    spec_c = _spec(smoke, tmp_path / "c")
    jobs.run_job(spec_c)
    assert _outcome(spec_c) == a


def test_direct_eval_through_submitit_local_executor(smoke, tmp_path):
    spec = _spec(smoke, tmp_path, protocol=DIRECT, benchmarks=("mw_facts",), model="mw-gpt2-s")
    out = jobs.launch([spec], executor="submitit_local", resources={"timeout_min": 10},
                      log_folder=tmp_path / "submitit")
    ours = store.read(store.path_for(spec.store_root, "direct_eval", "mw_facts", "mw-gpt2-s"))
    shared = store.read(store.path_for(smoke["store"], "direct_eval", "mw_facts", "mw-gpt2-s"))
    assert out == {"mw-gpt2-s": {"mw_facts": ours.score}}
    assert ours.score == shared.score and ours.n == shared.n
    assert any((tmp_path / "submitit").glob("*_log.out"))
    assert jobs.launch([spec], executor="submitit_local") == {}         # nothing pending: nothing submitted
