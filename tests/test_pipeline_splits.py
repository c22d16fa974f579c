"""Split plans as the paper made them: its 80 / 20 carve and caps (numpy's seeded permutation),
a medmcqa-shaped task (lm-eval's test split is its validation split) under both options, and
notebook 01 rejecting what 02 could not run."""

from __future__ import annotations

import numpy as np
import pytest
import yaml

from lib import store
from lib.pipeline import finetune as ft
from lib.pipeline import localtasks, tiny
from lib.pipeline import tasks as tk
from lib.pipeline.launch import jobs


# --------------------------------------------------------------------------- the paper's procedure, written out
# lm-harmony's data_utils.get_dataset as its description reads (not our code): a task with a validation and a
# test split keeps train / validation / test; otherwise numpy.random.seed(seed), order = permutation(n),
# train = select(order[:int(0.8 n)]), validation = select(order[int(0.8 n):][:int(0.2 n)]) (select keeps the
# order it is given) and the test split is the task's test split or, without one, its validation split. Then
# each split longer than its cap: numpy.random.seed(seed), select(permutation(len(split))[:cap]).
def _papers_splits(own: dict[str, int], caps: dict[str, int], seed: int = 0, shared: bool = False
                   ) -> dict[str, list[int]]:
    """Document ids (indices into the task's own splits) of the paper's train / validation / test;
    ``shared``: the task's test split is its validation split (medmcqa's lm-eval config)."""
    import datasets

    split = {name: datasets.Dataset.from_dict({"doc": list(range(n))}) for name, n in own.items()}
    if shared:
        split["test"] = split["validation"]
    if "validation" in split and "test" in split:
        train, valid, test = split["train"], split["validation"], split["test"]
    else:
        n = len(split["train"])
        np.random.seed(seed)
        order = np.random.permutation(n)
        a, b = int(0.8 * n), int(0.2 * n)
        valid = split["train"].select(order[a:a + b])
        train = split["train"].select(order[:a])
        test = split["test"] if "test" in split else split["validation"]
    out = {}
    for role, ds in (("train", train), ("validation", valid), ("test", test)):
        if len(ds) > caps[role]:
            np.random.seed(seed)
            ds = ds.select(np.random.permutation(len(ds))[:caps[role]])
        out[role] = sorted(ds["doc"])
    return out


def _fake_task(own: dict[str, int], shared: bool = False):
    """What plan_splits reads of an lm-eval task: its split names and sizes (no documents)."""
    from types import SimpleNamespace

    dataset = {name: range(n) for name, n in own.items()}
    splits = {"train": "train", "validation": "validation" if "validation" in own else None,
              "test": "validation" if shared else ("test" if "test" in own else None)}
    info = tk.TaskInfo(name="t", kind="multiple_choice", metric="acc", filter="none", category="x", splits=splits)
    return SimpleNamespace(dataset=dataset, config=SimpleNamespace(process_docs=None)), info


PAPER_CAPS = {"train": 50000, "validation": 1000, "test": 10000}
# the paper's benchmarks whose lm-eval config lacks a validation or a test split (lm-eval 0.4.13): validation
# carved from train; the other eight keep their own splits (medmcqa's validation is also its test split)
CARVED = {"mnli", "qnli", "rte", "sst2", "mrpc", "qqp", "wic", "cola", "winogrande", "commonsense_qa", "social_iqa",
          "hellaswag", "boolq", "nq_open", "piqa", "gsm8k"}


PAPER_24 = sorted(CARVED | {"anli_r1", "openbookqa", "arc_easy", "arc_challenge", "sciq", "mathqa", "headqa_en",
                             "medmcqa"})


@pytest.mark.parametrize("bench", PAPER_24)
def test_every_paper_benchmark_gets_the_papers_documents(bench):
    """At the paper's sizes (its training counts; caps 50k / 1k / 10k), each of the 24 benchmarks gets
    the documents of the paper's procedure: ids compared, not sizes. (Capping the *sorted* carve
    kept as many documents but other ones: 14 validation sets and 5 training sets differed, mnli's
    validation shared 13 of 1,000 documents.) Own validation / test sizes are made up so caps bite."""
    n = tk.CACHED_TRAIN_COUNTS[bench]
    shared = bench == "medmcqa"
    if bench == "gsm8k":
        own = {"train": n, "test": 1319}
    elif bench in CARVED:
        own = {"train": n, "validation": 12000}
    else:
        own = {"train": n, "validation": 4183} if shared else {"train": n, "validation": 1500, "test": 11000}
    task, info = _fake_task(own, shared)
    plan = tk.plan_splits(task, info, tk.SplitRule(caps=PAPER_CAPS))
    assert plan.carved == (bench in CARVED) and plan.validation_in_test == shared
    assert plan.ids == _papers_splits(own, PAPER_CAPS, shared=shared)


def test_paper_carve_keeps_the_permuted_order():
    train, val = tk.paper_carve(7473, 0.2, seed=0)
    order = np.random.RandomState(0).permutation(7473).tolist()
    assert (train, val) == (order[:5978], order[5978:5978 + 1494])       # floor sizes: one document dropped
    assert tk.paper_carve(7473, 0.2, seed=1) != (train, val)
    assert tk.paper_cap(val, 1000, seed=0) == [val[i] for i in np.random.RandomState(0).permutation(1494)[:1000]]
    assert tk.paper_cap(val, 0, seed=0) == val and tk.paper_cap(val, 5000, seed=0) != val   # permuted, all kept


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


CASES = {                               # own split sizes, caps scaled down so that every cap bites
    "own splits (arc_easy)": ({"train": 300, "validation": 90, "test": 150}, False),
    "carved, tests on validation (GLUE)": ({"train": 400, "validation": 60}, False),
    "carved, tests on test (gsm8k)": ({"train": 377, "test": 70}, False),
    "validation is the test split (medmcqa)": ({"train": 250, "validation": 80}, True),
}


@pytest.mark.parametrize("case", list(CASES))
def test_the_planned_documents_are_the_papers(case, tmp_path):
    """Through lm-eval itself (a local task whose documents carry their index): the documents that
    install_splits hands to training, validation and test are the paper's, case by case."""
    own, shared = CASES[case]
    caps = {"train": 200, "validation": 30, "test": 50}
    records = {name: [{**r, "doc": i} for i, r in enumerate(_mc(n, name[0]))] for name, n in own.items()}
    path = localtasks.write_task(tmp_path, "t_case", "multiple_choice", records)
    if shared:
        spec = yaml.safe_load(path.read_text())
        spec["test_split"] = "validation"
        path.write_text(yaml.safe_dump(spec, sort_keys=False))
    task, info = tk.inspect(tk.task_manager([tmp_path]), "t_case")
    plan = tk.plan_splits(task, info, tk.SplitRule(caps=caps))
    tk.install_splits(task, plan)
    got = {role: sorted(d["doc"] for d in tk.docs(task, role)) for role in tk.SPLITS}
    assert got == _papers_splits(own, caps, shared=shared) == plan.ids
    assert plan.carved == ("validation" not in own or ("test" not in own and not shared))
    assert plan.validation_in_test == shared


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
    recipe = ft.Recipe.default(lrs=(1e-3,), epochs=2, lora_r=4, lora_alpha=8, lora_dropout=0.0, max_length=64)
    (spec,) = jobs.plan(store.TBT, [str(tiny_model)], selection, store_root=tmp_path / "store",
                        work_root=tmp_path / "work", recipe=recipe, bootstrap_iters=0)
    assert spec.task_timeout == 77.0                                      # notebook 01's timeout reaches the job
    report = jobs.run_job(spec)
    assert report.failed == {} and set(report.scores) == {"t_shared"}
    res = store.read(store.path_for(tmp_path / "store", store.TBT, "t_shared", "tiny-a"))
    prov = res.provenance
    assert (prov["validation_in_test"], prov["validation_carved_from_train"]) == \
        ((True, False) if shared_test == "share" else (False, True))
    assert (prov["n_train"], prov["n_val"], prov["n_test"]) == ((40, 5, 12) if shared_test == "share" else (32, 5, 12))
    assert prov["select_on"] == "loss" and prov["epoch"] in (1, 2) and prov["val_loss"] > 0
    assert len(prov["val_curves"]["lr=0.001"]) == 2 and prov["dtype"] == "float32"
