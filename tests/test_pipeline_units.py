"""Pipeline building blocks without the smoke run: tiny models, task registry, split plans, errors."""

from __future__ import annotations

import json

import pytest

from lib import layout, store
from lib.pipeline import evaluate as ev
from lib.pipeline import finetune as ft
from lib.pipeline import localtasks, tiny, training
from lib.pipeline import tasks as tk
from lib.pipeline.launch import jobs
from lib.store import DIRECT, TBT

SOUNDS = {"cow": "moo", "dog": "woof", "cat": "meow", "duck": "quack", "sheep": "baa", "pig": "oink",
          "horse": "neigh", "owl": "hoot", "snake": "hiss", "bee": "buzz", "frog": "croak", "crow": "caw"}
TEXTS = [f"the {a} says {s} . the {a} walks to the farm ." for a, s in SOUNDS.items()] * 8
RECIPE: dict = {}                  # notebook 02's recipe, the paper's


@pytest.fixture(scope="module")
def tokenizer():
    return tiny.train_tokenizer(TEXTS, 300)


def test_tokenizer_has_special_tokens_and_roundtrips(tokenizer):
    assert (tokenizer.bos_token, tokenizer.eos_token, tokenizer.pad_token, tokenizer.unk_token) == \
        ("<s>", "</s>", "<pad>", "<unk>")
    assert len({tokenizer.bos_token_id, tokenizer.eos_token_id, tokenizer.pad_token_id}) == 3
    ids = tokenizer(" the cow says moo .", add_special_tokens=False)["input_ids"]
    assert tokenizer.decode(ids) == " the cow says moo ."       # byte-level: spaces survive
    assert len(tokenizer) == 300
    with pytest.raises(tiny.TinyError, match="too small"):
        tiny.train_tokenizer(TEXTS, 100)


@pytest.mark.parametrize("family, module", [("llama", "q_proj"), ("gpt2", "c_attn"), ("gpt_neox", "query_key_value")])
def test_three_architectures_with_their_lora_targets(tokenizer, family, module):
    model = tiny.make_model(family, tokenizer, d_model=32, n_layers=1, n_heads=2, max_len=64)
    assert model.config.model_type == family
    assert model.config.vocab_size == len(tokenizer)
    names = {n.split(".")[-1] for n, _ in model.named_modules()}
    assert module in names and ft.lora_targets(model)[0] == module


def test_unknown_family_and_bad_sizes(tokenizer):
    with pytest.raises(tiny.TinyError, match="did you mean 'llama'"):
        tiny.make_model("lama", tokenizer, d_model=32, n_layers=1, n_heads=2)
    with pytest.raises(tiny.TinyError, match="n_heads must divide d_model"):
        tiny.make_model("gpt2", tokenizer, d_model=30, n_layers=1, n_heads=4)


def test_pretrain_is_deterministic_learns_and_saves_atomically(tokenizer, tmp_path):
    import torch

    stats = []
    for run in ("a", "b"):
        model = tiny.make_model("gpt2", tokenizer, d_model=32, n_layers=1, n_heads=2, max_len=64, seed=3)
        stats.append(training.pretrain(model, tokenizer, TEXTS, steps=25, batch_size=4, seq_len=32, lr=3e-3,
                                       seed=3, out_dir=tmp_path / run))
    assert stats[0]["final_loss"] == stats[1]["final_loss"]
    assert stats[0]["loss_curve"][0][1] > stats[0]["final_loss"] + 0.5          # it learned something
    assert stats[0]["tokens"] == 25 * 4 * 32
    assert stats[0]["flops"] == pytest.approx(6 * stats[0]["n_params"] * stats[0]["tokens"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "b"]             # no temporary folders
    m_a, tok_a = tiny.load(tmp_path / "a")
    m_b, _ = tiny.load(tmp_path / "b")
    for (n, p), (_, q) in zip(m_a.named_parameters(), m_b.named_parameters()):
        assert torch.equal(p, q), n
    assert tok_a.pad_token == "<pad>"
    assert tiny.built(tmp_path / "missing") is None
    with pytest.raises(tiny.TinyError, match="not a finished tiny model folder"):
        tiny.load(tmp_path / "missing")


# ---------------------------------------------------------------------------------------------
# tasks


def _mc(n):
    return [{"query": f"q{i}:", "choices": ["a", "b"], "label": i % 2} for i in range(n)]


@pytest.fixture
def taskdir(tmp_path):
    d = tmp_path / "tasks"
    localtasks.write_task(d, "t_full", "multiple_choice", {"train": _mc(40), "validation": _mc(10), "test": _mc(12)})
    localtasks.write_task(d, "t_notest", "multiple_choice", {"train": _mc(40), "validation": _mc(10)})
    localtasks.write_task(d, "t_notrain", "multiple_choice", {"validation": _mc(10), "test": _mc(12)})
    return d


def test_select_reports_every_task_with_reason(taskdir):
    rows = {r["task"]: r for r in tk.select(["t_full", "t_notest", "t_notrain"], [taskdir], min_train=30)}
    assert rows["t_full"]["selected"] and rows["t_full"]["n_train"] == 40 and rows["t_full"]["n_test"] == 12
    assert rows["t_full"]["metric"] == "acc" and rows["t_full"]["filter"] == "none"
    assert rows["t_notest"]["selected"] and rows["t_notest"]["test_on"] == "validation"
    assert not rows["t_notrain"]["selected"] and "no training split" in rows["t_notrain"]["reason"]
    small = {r["task"]: r for r in tk.select(["t_full"], [taskdir], min_train=41)}
    assert not small["t_full"]["selected"] and "< min_train 41" in small["t_full"]["reason"]


def test_unknown_task_suggests_close_names(taskdir):
    with pytest.raises(tk.TaskError, match="unknown task 't_ful'.*did you mean 't_full'"):
        tk.select(["t_ful"], [taskdir])


def test_malformed_yaml_is_named_before_anything_runs(taskdir):
    bad = taskdir / "broken" / "broken.yaml"
    bad.parent.mkdir()
    bad.write_text("task: broken\ndataset_path: [json\n")
    with pytest.raises(tk.TaskError, match=r"malformed task YAML .*broken\.yaml"):
        tk.task_manager([taskdir])


def test_empty_dataset_is_an_error_naming_the_task(taskdir):
    (taskdir / "t_full" / "train.jsonl").write_text("")
    manager = tk.task_manager([taskdir])
    with pytest.raises(tk.TaskError, match="t_full"):
        _, info = tk.inspect(manager, "t_full")
        tk.validate_for_training(info)


def test_split_plan_carves_validation_and_caps_deterministically(taskdir):
    manager = tk.task_manager([taskdir])
    task, info = tk.inspect(manager, "t_notest")
    carve = tk.SplitRule(caps={"train": 30, "validation": 1000, "test": 1000}, seed=1, procedure="carve",
                         val_fraction=0.1)
    plan = tk.plan_splits(task, info, carve)
    assert plan.carved and plan.source == {"train": "train", "validation": "train", "test": "validation"}
    assert plan.sizes == {"train": 30, "validation": 4, "test": 10}          # 10% of 40 carved, train capped
    assert not set(plan.ids["train"]) & set(plan.ids["validation"])
    assert tk.plan_splits(task, info, carve).ids == plan.ids
    paper = tk.plan_splits(task, info, tk.SplitRule(caps={"train": 50000, "validation": 1000, "test": 10000}, seed=1))
    assert paper.sizes == {"train": 32, "validation": 8, "test": 10}         # the paper's 80 / 20
    assert not set(paper.ids["train"]) & set(paper.ids["validation"]) and not paper.validation_in_test
    task2, info2 = tk.inspect(manager, "t_full")
    plan2 = tk.plan_splits(task2, info2, tk.SplitRule(caps={"train": 0, "validation": 0, "test": 5}))
    assert not plan2.carved and plan2.sizes == {"train": 40, "validation": 10, "test": 5}
    tk.install_splits(task2, plan2)
    tk.use_split(task2, "test")
    assert len(task2.eval_docs) == 5 and task2.eval_docs[0] == task2.dataset["test"][plan2.ids["test"][0]]


def test_plan_rejects_bad_input_before_training(taskdir, tmp_path):
    root = tmp_path / "store"
    store.write_meta(root, "models", {"tiny-a": {"family": "x", "path": str(tmp_path / "nowhere")}})
    selection = {"selected": ["t_full"], "include_paths": [str(taskdir)], "include_defaults": False}
    with pytest.raises(ev.ModelError, match="tiny-a"):
        jobs.plan(DIRECT, ["tiny-a"], selection, store_root=root, work_root=tmp_path)
    with pytest.raises(ev.ModelError, match=r"unknown model path '/no/such/model'"):
        jobs.plan(DIRECT, ["/no/such/model"], selection, store_root=root, work_root=tmp_path)
    with pytest.raises(ev.ModelError, match=r"unknown model 'tiny-b'.*did you mean 'tiny-a'"):
        jobs.plan(DIRECT, ["tiny-b"], selection, store_root=root, work_root=tmp_path)
    with pytest.raises(tk.TaskError, match=r"unknown task 't_fulll'"):
        jobs.plan(DIRECT, ["tiny-a"], {**selection, "selected": ["t_fulll"]}, store_root=root, work_root=tmp_path)
    notrain = {"name": "t_notrain", "kind": "multiple_choice", "metric": "acc", "filter": "none",
               "higher_is_better": True, "category": "x", "splits": {"train": None, "validation": "validation",
                                                                      "test": "test"},
               "counts": {"train": None, "validation": 10, "test": 12}, "count_source": "dataset"}
    with pytest.raises(tk.TaskError, match="'t_notrain' has no training split"):
        jobs.plan(TBT, ["tiny-a"], {**selection, "selected": ["t_notrain"], "tasks": {"t_notrain": notrain}},
                  store_root=root, work_root=tmp_path, recipe=ft.Recipe.default(**RECIPE))
    with pytest.raises(ValueError, match="unknown executor 'slrum'.*did you mean 'slurm'"):
        jobs.launch([], executor="slrum")


def test_recipe_and_unit_names():
    assert layout.lr_name(2e-5) == "lr=2e-05" and layout.lr_name(0.003) == "lr=0.003"
    assert layout.unit_dir("/w", "org/m", "b", 1e-5).as_posix() == "/w/train_before_test/org__m/b/lr=1e-05"
    with pytest.raises(ValueError, match="learning rates must be positive"):
        ft.Recipe.default(**{**RECIPE, "lrs": (0.0,)})
    units = [ft.UnitResult(lr=1e-3, curve=[{"epoch": 1, "val_score": 0.5}, {"epoch": 2, "val_score": 0.7}]),
             ft.UnitResult(lr=3e-3, curve=[{"epoch": 1, "val_score": 0.7}, {"epoch": 2, "val_score": 0.6}])]
    assert ft.select_best(units, True) == (1e-3, 2, 0.7)                    # tie -> earlier lr
    assert ft.select_best(units, False) == (1e-3, 1, 0.5)


def test_training_examples_are_lm_eval_renderings_with_chat_template(taskdir, tokenizer):
    """Loss only on the gold continuation (``loss_on="target"``); the chat template (for instruct
    models) wraps the prompt."""
    import lib.pipeline.evaluate as ev

    model = tiny.make_model("llama", tokenizer, d_model=32, n_layers=1, n_heads=2, max_len=64)
    lm = ev.make_lm(model, tokenizer)
    task, info = tk.inspect(tk.task_manager([taskdir]), "t_full")
    tk.install_splits(task, tk.plan_splits(task, info, {}, 0))
    recipe = ft.Recipe.default(**{**RECIPE, "max_length": 64, "loss_on": "target", "end_of_text": "generative"})
    examples = ft.training_examples(task, info, lm, recipe)
    ids, labels = examples[1]                                   # doc 1: label 1 -> choice "b"
    target = [t for t, y in zip(ids, labels) if y != -100]
    assert tokenizer.decode(target) == " b"
    assert tokenizer.decode(ids) == "q1: b"
    tokenizer.chat_template = ("{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}{% endfor %}"
                               "{% if add_generation_prompt %}<|assistant|>{% endif %}")
    try:
        context, continuation = tk.render(task, info, task.dataset["tbt_train"][1], lm, chat_template=True)
    finally:
        tokenizer.chat_template = None
    assert context.startswith("<|user|>q1:") and context.endswith("<|assistant|>") and continuation.endswith("b")


def test_corpus_task_from_text_files(tmp_path):
    from lib.pipeline import perplexity

    f = tmp_path / "corpus.txt"
    f.write_text("\n\n".join(f"document number {i} ." for i in range(20)))
    yaml_path = perplexity.write_corpus_task(tmp_path / "tasks", "my_corpus", files=[f])
    rows = tk.select([], [tmp_path / "tasks"], corpora=["my_corpus"])
    assert rows[0]["selected"] and rows[0]["kind"] == "loglikelihood_rolling"
    assert (rows[0]["n_train"], rows[0]["n_validation"], rows[0]["n_test"]) == (16, 2, 2)
    assert yaml_path.exists()
    with pytest.raises(FileNotFoundError, match="missing.txt"):
        perplexity.write_corpus_task(tmp_path / "tasks", "c2", files=[tmp_path / "missing.txt"])


def test_paper_profile_validates_with_the_papers_models_and_benchmarks(harmony_data):
    from lib import params

    prof = params.load_profile("paper")
    published = json.loads((harmony_data / "lm-harmony" / "all_results.json").read_text())
    models = {m for scores in published["direct_eval"].values() for m in scores}
    s1, s2, s3 = (prof.params(s) for s in ("01_select_benchmarks", "02_finetune", "03_direct_eval"))
    assert set(s2["models"]) == models and len(models) == 61
    assert s3["models"] == s2["models"] and prof.common["models"] == s2["models"]     # written once
    assert len(s1["tasks"]) == 24 and set(s1["tasks"]) < set(published["direct_eval"])
    assert s2["executor"] == "slurm" and s1["include_defaults"] is True


def test_paper_profile_names_the_papers_recipe():
    """Every recipe field at the paper's value (lm-harmony's main.py and data_utils.py, TRL 0.17's
    SFT trainer, its lm-eval call); the paper profile overrides none of them."""
    from lib import params

    prof = params.load_profile("paper")
    s1, s2, s3 = (prof.params(s) for s in ("01_select_benchmarks", "02_finetune", "03_direct_eval"))
    recipe = ft.Recipe.from_params(s2)
    assert recipe.key() == {"lrs": [1e-5, 2e-5, 5e-5], "epochs": 5, "lora_r": 8, "lora_alpha": 32,
                            "lora_dropout": 0.1, "lora_modules": "default", "batch_size": 8, "max_length": 1024,
                            "truncate": "end", "weight_decay": 0.01, "seed": 0,
                            "loss_on": "all", "end_of_text": "every", "list_targets": "join",
                            "task_description": False, "select_on": "loss",
                            "method": "lora", "patience": 0}          # LoRA; every epoch trained, the best kept
    for stage in (s2, s3):
        assert (stage["dtype"], stage["add_bos_token"], stage["max_gen_toks"], stage["eval_batch_size"]) == \
            ("float32", True, 256, 1)                  # one document at a time, as the paper's HFLM
    assert (s1["cap_train"], s1["cap_validation"], s1["cap_test"], s1["min_train"]) == (50000, 1000, 10000, 1000)
    assert (s1["split_procedure"], s1["val_fraction"], s1["split_seed"], s1["shared_test"]) == \
        ("paper", 0.2, 0, "share")
    assert s1["allow_unreachable"] is False
    assert s2["max_array"] == 1000 and s2["benchmarks_per_job"] == 1          # 1,464 jobs: two arrays
    recipe_fields = set(ft.Recipe.__dataclass_fields__) - set(ft.EXECUTION_FIELDS) | {"dtype", "add_bos_token",
                                                                                   "max_gen_toks"}
    assert not recipe_fields & set(prof.overrides("02_finetune")) and not recipe_fields & set(prof.overrides(
        "03_direct_eval"))
    # mini and smoke depart where tiny models need it, saying so (params/mini.yaml)
    smoke = ft.Recipe.from_params(params.load_profile("smoke").params("02_finetune"))
    assert (smoke.method, smoke.loss_on, smoke.lora_modules, smoke.lora_r, smoke.end_of_text, smoke.select_on) == \
        ("lora", "target", "all", 16, "every", "loss")
    mini = ft.Recipe.from_params(params.load_profile("mini").params("02_finetune"))   # full fine-tuning, early stop
    assert (mini.method, mini.loss_on, mini.patience, mini.end_of_text, mini.select_on) == \
        ("full", "target", 2, "every", "loss")


@pytest.mark.slow
def test_unreachable_builtin_task_falls_back_to_cached_count():
    """Offline, a hub task's dataset fails fast; it is reported, and rejected unless
    ``allow_unreachable`` asks to judge it on the paper's cached count."""
    rows = {r["task"]: r for r in tk.select(["arc_easy", "wikitext"], include_defaults=True, min_train=1000,
                                            timeout=120, allow_unreachable=True)}
    arc = rows["arc_easy"]
    assert arc["selected"] and arc["count_source"] == "cached" and arc["n_train"] == 2251
    assert (arc["metric"], arc["category"]) == ("acc_norm", "Question Answering")
    assert "arc_easy" in arc["note"] and "cannot load" in arc["note"]
    assert not rows["wikitext"]["selected"] and rows["wikitext"]["count_source"] == "unavailable"
    assert "dataset unreachable" in rows["wikitext"]["reason"]
    strict = tk.select(["arc_easy"], include_defaults=True, min_train=1000, timeout=120)    # the default
    assert not strict[0]["selected"] and "dataset unreachable" in strict[0]["reason"]


_FINGERPRINT = """
import hashlib, json, tempfile
from lib.miniworld import world as mw
from lib.pipeline import tiny, training
w = mw.generate(mw.WorldConfig(seed=0, n_creatures=12, n_corpus_docs=60, train=12, validation=4, test=6,
                               corpus_train=4, corpus_validation=2, corpus_test=2))
texts = w.corpus()
tok = tiny.train_tokenizer(texts + [json.dumps(w.benchmarks)], 300)
model = tiny.make_model("llama", tok, d_model=32, n_layers=1, n_heads=2, max_len=64)
stats = training.pretrain(model, tok, texts, steps=5, batch_size=2, seq_len=32, lr=1e-3, seed=0,
                          out_dir=tempfile.mkdtemp() + "/m")
state = [w.benchmarks, tok.backend_tokenizer.to_str(), stats["loss_curve"]]
print(hashlib.sha256(json.dumps(state).encode()).hexdigest())
"""


@pytest.mark.slow
def test_world_and_tiny_models_are_identical_across_processes():
    """The world, the tokenizer and pre-training do not depend on Python's per-process hash seed."""
    import os
    import subprocess
    import sys

    from lib import paths

    digests = {subprocess.run([sys.executable, "-c", _FINGERPRINT], cwd=paths.ROOT, check=True, text=True,
                              capture_output=True, env={**os.environ, "PYTHONHASHSEED": seed}).stdout.strip()
               for seed in ("1", "2")}
    assert len(digests) == 1 and len(next(iter(digests))) == 64


def test_pretraining_stream_leaves_the_loss_off_an_examples_prompt():
    """A prepared twin's formatted examples train their answer (and the EOS after it), not the
    prompt; plain documents train every token."""
    from lib.miniworld import zoo
    from lib.pipeline import training

    tok = tiny.train_tokenizer(["Question: where does the bako live?\nAnswer: the desert", "the bako eats fish ."] * 20,
                               zoo.VOCAB["llama"])
    prompt = "Question: where does the bako live?\nAnswer:"
    ids, scored = training._token_stream(tok, [prompt + " desert", "the bako eats fish ."], [len(prompt), 0])
    n_prompt = len(tok(prompt, add_special_tokens=False)["input_ids"])
    n_first = len(tok(prompt + " desert", add_special_tokens=False)["input_ids"])
    assert scored[:n_prompt] == [False] * n_prompt
    assert all(scored[n_prompt:])                     # the answer, its EOS, then the whole document
    assert ids[n_first] == tok.eos_token_id and len(ids) == len(scored)


def test_evaluation_scores_one_document_at_a_time_unless_told_auto(tokenizer):
    """The paper's HFLM kept its default batch of 1; "auto" is an option a profile may choose (the
    params check accepts it and nothing else of its kind), a batch below 1 is refused before any job."""
    import lib.pipeline.evaluate as ev
    from lib import params

    model = tiny.make_model("llama", tokenizer, d_model=32, n_layers=1, n_heads=2, max_len=64)
    assert ev.make_lm(model, tokenizer).batch_size_per_gpu == 1
    assert ev.make_lm(model, tokenizer, 4).batch_size_per_gpu == 4
    auto = ev.make_lm(model, tokenizer, "auto")                  # on a CPU: a fixed batch, no memory probing
    assert (auto.batch_size_per_gpu, auto.max_batch_size) == (ev.AUTO_CPU_BATCH, ev.AUTO_CPU_BATCH)
    assert ev.rows_per_batch("auto") == ev.AUTO_CPU_BATCH and ev.rows_per_batch(3) == 3
    for bad in (0, "fast", True):
        with pytest.raises(ValueError, match="eval_batch_size must be a positive int or 'auto'"):
            ev.check_batch_size(bad)
    assert params.value_allowed("eval_batch_size", 1, "auto") and not params.value_allowed("eval_batch_size", 1, "fast")
    assert not params.value_allowed("batch_size", 8, "auto")
