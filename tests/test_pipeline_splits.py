"""Split plans as the paper made them: its 80 / 20 carve and caps (numpy's seeded permutation),
a medmcqa-shaped task (lm-eval's test split is its validation split) under both options, and
notebook 01 rejecting what 02 could not run."""

from __future__ import annotations

import numpy as np
import pytest
import yaml

from lib import store
from lib.pipeline import finetune as ft
from lib.pipeline import jobs, localtasks, tiny
from lib.pipeline import tasks as tk


def _papers_random_split(n: int, seed: int):
    """lm-harmony's data_utils.random_split, written out: numpy's global generator, floor sizes."""
    np.random.seed(seed)
    order = np.random.permutation(n)
    a, b = int(0.8 * n), int(0.2 * n)
    return sorted(order[:a].tolist()), sorted(order[a:a + b].tolist())


@pytest.mark.parametrize("n", [10, 277, 2490, 7473])
def test_paper_carve_is_the_papers_random_split(n):
    train, val = tk.paper_carve(n, 0.2, seed=0)
    assert (train, val) == _papers_random_split(n, 0)
    assert (len(train), len(val)) == (int(0.8 * n), int(0.2 * n))          # 7473 -> 5978 + 1494: one dropped
    assert not set(train) & set(val)
    assert tk.paper_carve(n, 0.2, seed=0) == (train, val)                   # deterministic
    assert tk.paper_carve(n, 0.2, seed=1) != (train, val)


def test_paper_cap_is_a_seeded_permutation_prefix():
    ids = list(range(100, 400))
    np.random.seed(0)
    expected = sorted(ids[i] for i in np.random.permutation(len(ids))[:50])
    assert tk.paper_cap(ids, 50, seed=0) == expected
    assert tk.paper_cap(ids, 1000, seed=0) == ids and tk.paper_cap(ids, 0, seed=0) == ids


def _mc(n, tag=""):
    return [{"query": f"q{tag}{i}: it says", "choices": ["moo", "woof"], "label": i % 2} for i in range(n)]


@pytest.fixture(scope="module")
def shared_taskdir(tmp_path_factory):
    """t_shared: lm-eval config with validation_split = test_split = validation (as medmcqa's)."""
    d = tmp_path_factory.mktemp("tasks")
    path = localtasks.write_task(d, "t_shared", "multiple_choice", {"train": _mc(40, "t"), "validation": _mc(12, "v")})
    spec = yaml.safe_load(path.read_text())
    spec["test_split"] = "validation"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    localtasks.write_task(d, "t_tiny", "multiple_choice", {"train": _mc(1), "validation": _mc(5)})
    return d


def test_a_medmcqa_shaped_task_plans_under_both_options(shared_taskdir):
    task, info = tk.inspect(tk.task_manager([shared_taskdir]), "t_shared")
    assert info.splits == {"train": "train", "validation": "validation", "test": "validation"}
    caps = {"train": 50000, "validation": 5, "test": 10000}
    share = tk.plan_splits(task, info, tk.SplitRule(caps=caps))
    assert share.source == {"train": "train", "validation": "validation", "test": "validation"}
    assert not share.carved and share.validation_in_test
    assert share.sizes == {"train": 40, "validation": 5, "test": 12}
    assert set(share.ids["validation"]) < set(share.ids["test"])          # as the paper: validation inside test
    carve = tk.plan_splits(task, info, tk.SplitRule(caps=caps, shared_test="carve"))
    assert carve.source == {"train": "train", "validation": "train", "test": "validation"}
    assert carve.carved and not carve.validation_in_test
    assert carve.sizes == {"train": 32, "validation": 5, "test": 12}      # 8 carved, capped to 5
    assert not set(carve.ids["train"]) & set(carve.ids["validation"])


def test_notebook_01_rejects_what_02_could_not_run_and_says_why(shared_taskdir):
    rows = {r["task"]: r for r in tk.select(["t_shared", "t_tiny"], [shared_taskdir], min_train=1,
                                            rule=tk.SplitRule(caps={}))}
    assert rows["t_shared"]["selected"] and "part of the test set" in rows["t_shared"]["reason"]
    assert rows["t_shared"]["validation_in_test"] and rows["t_shared"]["plan_validation"] == 12
    assert rows["t_shared"]["chars_per_example"] > 10
    assert not rows["t_tiny"]["selected"] and "too small (1) to carve" in rows["t_tiny"]["reason"]
    summary = tk.selection_summary(list(rows.values()), [shared_taskdir], False, 1,
                                   tk.SplitRule(caps={"test": 7}, seed=3, shared_test="carve"), task_timeout=42.0)
    assert summary["selected"] == ["t_shared"] and summary["task_timeout"] == 42.0
    assert summary["split_rule"] == {"caps": {"test": 7}, "seed": 3, "procedure": "paper", "val_fraction": 0.2,
                                     "shared_test": "carve"}
    assert tk.SplitRule.from_selection(summary) == tk.SplitRule(caps={"test": 7}, seed=3, shared_test="carve")
    with pytest.raises(tk.TaskError, match="did you mean 'share'"):
        tk.SplitRule(caps={}, shared_test="shared")


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    tok = tiny.train_tokenizer([r["query"] + " moo woof" for r in _mc(40)], 300)
    model = tiny.make_model("llama", tok, d_model=32, n_layers=1, n_heads=2, max_len=64)
    out = tmp_path_factory.mktemp("model") / "tiny-a"
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out


@pytest.mark.parametrize("shared_test", ["share", "carve"])
def test_a_medmcqa_shaped_task_runs_under_both_options(shared_taskdir, tiny_model, tmp_path, shared_test):
    rule = tk.SplitRule(caps={"validation": 5}, shared_test=shared_test)
    rows = tk.select(["t_shared"], [shared_taskdir], min_train=1, rule=rule, timeout=77.0)
    selection = tk.selection_summary(rows, [shared_taskdir], False, 1, rule, task_timeout=77.0)
    recipe = ft.Recipe(lrs=(1e-3,), epochs=2, lora_r=4, lora_alpha=8, lora_dropout=0.0, lora_modules="default",
                       batch_size=8,
                       micro_batch_size=0, gradient_checkpointing=False, max_length=64, truncate="end",
                       weight_decay=0.01, seed=0, loss_on="all", end_of_text="every", list_targets="join",
                       task_description=False, select_on="loss")
    (spec,) = jobs.plan(store.TBT, [str(tiny_model)], selection, store_root=tmp_path / "store",
                        work_root=tmp_path / "work", recipe=recipe, bootstrap_iters=0)
    assert spec.task_timeout == 77.0                                      # notebook 01's timeout reaches the job
    report = jobs.run_job(spec)
    assert report["failed"] == {} and set(report["scores"]) == {"t_shared"}
    res = store.read(store.path_for(tmp_path / "store", store.TBT, "t_shared", "tiny-a"))
    prov = res.provenance
    assert (prov["validation_in_test"], prov["validation_carved_from_train"]) == \
        ((True, False) if shared_test == "share" else (False, True))
    assert (prov["n_train"], prov["n_val"], prov["n_test"]) == ((40, 5, 12) if shared_test == "share" else (32, 5, 12))
    assert prov["select_on"] == "loss" and prov["epoch"] in (1, 2) and prov["val_loss"] > 0
    assert len(prov["val_curves"]["lr=0.001"]) == 2 and prov["dtype"] == "float32"
