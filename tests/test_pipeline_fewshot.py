"""The cheaper protocols of issue 42 at the unit level: k-shot direct evaluation shows every test
prompt the same k documents of the planned training split (never a validation or test document),
the reduced budget trains on a seeded share of it, and both are stored under names of their own
with the tokens they cost."""

from __future__ import annotations

import pytest

from lib import store
from lib.pipeline import evaluate as ev
from lib.pipeline import localtasks, tiny
from lib.pipeline import tasks as tk
from lib.pipeline.spec import JobSpec

TEXTS = [f"q{i}: what does animal {i} say ? it says {w} ." for i, w in enumerate(["moo", "woof", "baa"] * 20)]


def _docs(role: str, n: int) -> list[dict]:
    return [{"query": f"{role} question {i}: it says", "choices": ["moo", "woof"], "label": i % 2} for i in range(n)]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    d = tmp_path_factory.mktemp("tasks")
    localtasks.write_task(d, "t_mc", "multiple_choice",
                          {"train": _docs("train", 30), "validation": _docs("validation", 8), "test": _docs("test", 6)})
    localtasks.write_task(d, "t_carved", "multiple_choice",          # no validation split: carved from train
                          {"train": _docs("train", 30), "test": _docs("test", 6)})
    return d


def _contexts(folder, name: str, k: int, seed: int = 0) -> tuple[list[str], list[int], tk.SplitPlan]:
    """The prompts lm-eval builds for the test split of a freshly loaded task (as one job does)."""
    task, info = tk.inspect(tk.task_manager([folder]), name)
    plan = tk.plan_splits(task, info, {}, 0)
    shots = tk.install_splits(task, plan, k, seed)
    tk.use_split(task, "test")
    task.build_all_requests(rank=0, world_size=1)
    return [inst.args[0] for inst in task.instances], shots, plan


@pytest.mark.parametrize("name", ["t_mc", "t_carved"])
def test_kshot_examples_come_from_the_training_split_only_and_are_the_same_for_every_prompt(folder, name):
    contexts, shots, plan = _contexts(folder, name, 3)
    assert len(shots) == 3 and set(shots) <= set(plan.ids["train"])
    assert not set(shots) & set(plan.ids["validation"]) or plan.source["validation"] != plan.source["train"]
    shown = [f"train question {i}:" for i in shots]
    for ctx in contexts:
        assert [c for c in shown if c in ctx] == shown                       # all k, in the chosen order
        assert ctx.index(shown[-1]) < ctx.index("test question")
        assert "validation question" not in ctx and ctx.count("test question") == 1
        assert ctx.split("test question")[0] == contexts[0].split("test question")[0]   # the same prefix
    carved_val = {f"train question {i}:" for i in plan.ids["validation"]} if plan.carved else set()
    assert not any(v in ctx for v in carved_val for ctx in contexts)           # carved validation never shown


def test_kshot_examples_are_the_same_for_every_model_and_nested_in_k(folder):
    a, shots_a, _ = _contexts(folder, "t_mc", 5)
    b, shots_b, _ = _contexts(folder, "t_mc", 5)       # another job, another model: a task loaded afresh
    one, shot_one, _ = _contexts(folder, "t_mc", 1)
    zero, none, _ = _contexts(folder, "t_mc", 0)
    assert a == b and shots_a == shots_b and shot_one == shots_a[:1] and none == []
    assert not any("train question" in c for c in zero)
    _, other_seed, _ = _contexts(folder, "t_mc", 5, seed=1)
    assert other_seed != shots_a


def test_more_shots_than_training_documents_is_refused_naming_the_task(folder):
    with pytest.raises(tk.TaskError, match="t_mc.*40 in-context examples"):
        _contexts(folder, "t_mc", 40)


def test_a_reduced_budget_keeps_a_seeded_share_of_the_training_split_and_nothing_else(folder):
    task, info = tk.inspect(tk.task_manager([folder]), "t_mc")
    plan = tk.plan_splits(task, info, {}, 0)
    small = tk.reduce_training(plan, 0.25, 0)
    assert len(small.ids["train"]) == round(len(plan.ids["train"]) * 0.25)
    assert set(small.ids["train"]) <= set(plan.ids["train"])
    assert small.ids["validation"] == plan.ids["validation"] and small.ids["test"] == plan.ids["test"]
    assert tk.reduce_training(plan, 0.25, 0).ids == small.ids != tk.reduce_training(plan, 0.25, 1).ids
    assert plan.ids["train"] != small.ids["train"]                      # the plan itself is left alone


def test_cheaper_protocols_are_stored_under_names_of_their_own_and_keep_old_results_valid():
    assert store.fewshot_protocol(0) == store.DIRECT and store.fewshot_protocol(5) == "direct_eval_5shot"
    assert store.base_protocol("direct_eval_5shot") == store.DIRECT
    assert store.base_protocol(store.REDUCED) == store.TBT
    with pytest.raises(ValueError, match="unknown protocol 'finetuned'"):
        store.base_protocol("finetuned")
    common = dict(model="m", source="/nonexistent", benchmarks=["b"], include_paths=[], include_defaults=False,
                  store_root="/s", work_root="/w")
    with pytest.raises(ValueError, match="stored as 'direct_eval_5shot'"):
        JobSpec(protocol=store.DIRECT, num_fewshot=5, **common)
    with pytest.raises(ValueError, match="train_fraction"):
        JobSpec(protocol=store.fewshot_protocol(1), num_fewshot=1, train_fraction=0.5, **common)


def test_cheaper_specs_cross_the_slurm_record_and_keep_their_own_identity():
    """What a Slurm job receives (the spec as JSON) is the spec; the record keys k-shot, reduced and
    full jobs of one model apart, and each form's config differs from the others (no result reused)."""
    from lib.pipeline import finetune as ft
    from lib.pipeline.launch import slurm

    common = dict(model="m", source="/m", benchmarks=["b"], include_paths=[], include_defaults=False,
                  store_root="/s", work_root="/w")
    specs = [JobSpec(protocol=store.DIRECT, **common),
             JobSpec(protocol=store.fewshot_protocol(5), num_fewshot=5, **common),
             JobSpec(protocol=store.TBT, recipe=ft.Recipe.default(), **common),
             JobSpec(protocol=store.REDUCED, recipe=ft.Recipe.default(lrs=(1e-5,), epochs=1), train_fraction=0.25,
                     **common)]
    for spec in specs:
        assert JobSpec.from_dict(spec.to_dict()) == spec
    assert len({slurm.spec_key(s) for s in specs}) == 4
    configs = [s.config() for s in [specs[0], specs[1]]]
    assert "num_fewshot" not in configs[0] and configs[1]["num_fewshot"] == 5     # zero-shot results stay valid
    assert specs[3].config()["train_fraction"] == 0.25 and "train_fraction" not in specs[2].config()


def test_evaluation_records_the_tokens_it_read(folder):
    tokenizer = tiny.train_tokenizer(TEXTS + [d["query"] for d in _docs("train", 30)], 300)
    lm = ev.make_lm(tiny.make_model("llama", tokenizer, d_model=32, n_layers=2, n_heads=2, max_len=256, seed=1),
                    tokenizer, 8)
    tokens = {}
    for k in (0, 2):
        task, info = tk.inspect(tk.task_manager([folder]), "t_mc")
        plan = tk.plan_splits(task, info, {}, 0)
        tk.install_splits(task, plan, k)
        out = ev.evaluate(lm, task, info, "test", plan.ids["test"])
        tokens[k] = out.tokens
        assert out.n_params == sum(p.numel() for p in lm.model.parameters())
    contexts, _, _ = _contexts(folder, "t_mc", 0)
    by_hand = sum(len(lm.tok_encode(c)) + len(lm.tok_encode(cont)) for c, cont in
                  (inst.args for inst in _requests(folder)))
    assert tokens[0] == by_hand and tokens[2] > 2 * tokens[0]


def _requests(folder):
    task, info = tk.inspect(tk.task_manager([folder]), "t_mc")
    tk.install_splits(task, tk.plan_splits(task, info, {}, 0))
    tk.use_split(task, "test")
    task.build_all_requests(rank=0, world_size=1)
    return task.instances
