"""The fine-tuning recipe: what each field does to the training examples, and the training loop's
memory options (micro-batches with accumulation, gradient checkpointing, out-of-memory back-off),
each checked on a tiny model against the plain computation."""

from __future__ import annotations

import pytest

from lib.pipeline import evaluate as ev
from lib.pipeline import finetune as ft
from lib.pipeline import localtasks, tiny, training
from lib.pipeline import tasks as tk

TEXTS = [f"q{i}: what does animal {i} say ? it says {w} ." for i, w in enumerate(["moo", "woof", "baa"] * 20)]
PAPER = dict(lrs=(1e-3,), epochs=1, max_length=64)      # notebook 02's recipe, one short run


@pytest.fixture(scope="module")
def tokenizer():
    return tiny.train_tokenizer(TEXTS, 300)


@pytest.fixture(scope="module")
def lm(tokenizer):
    model = tiny.make_model("llama", tokenizer, d_model=32, n_layers=2, n_heads=2, max_len=128, seed=1)
    return ev.make_lm(model, tokenizer, 8)


@pytest.fixture(scope="module")
def tasks(tmp_path_factory):
    d = tmp_path_factory.mktemp("tasks")
    mc = [{"query": f"q{i}: it says", "choices": ["moo", "woof"], "label": i % 2} for i in range(6)]
    localtasks.write_task(d, "t_mc", "multiple_choice", {"train": mc, "validation": mc, "test": mc},
                          description="Answer the question.\n")
    gen = [{"question": f"q{i}: it says", "answer": ["moo", "woof"]} for i in range(6)]     # a list of gold answers
    localtasks.write_task(d, "t_list", "generate_until", {"train": gen, "validation": gen, "test": gen})
    manager = tk.task_manager([d])
    out = {}
    for name in ("t_mc", "t_list"):
        task, info = tk.inspect(manager, name)
        tk.install_splits(task, tk.plan_splits(task, info, {}, 0))
        out[name] = (task, info)
    return out


def _examples(tasks, lm, name, **recipe):
    task, info = tasks[name]
    return ft.training_examples(task, info, lm, ft.Recipe.default(**{**PAPER, **recipe}))


def test_loss_on_all_and_target_give_the_documented_label_masks(tasks, lm, tokenizer):
    eos = tokenizer.eos_token_id
    ids, labels = _examples(tasks, lm, "t_mc")[1]                              # the paper's recipe
    assert labels == ids                                                       # every token carries loss
    assert tokenizer.decode(ids[:-1]) == "q1: it says woof" and ids[-1] == eos  # prompt " " answer EOS
    ids_t, labels_t = _examples(tasks, lm, "t_mc", loss_on="target")[1]
    assert ids_t == ids
    answer = [t for t, y in zip(ids_t, labels_t) if y != -100]
    assert tokenizer.decode(answer[:-1]) == " woof" and answer[-1] == eos      # the answer and its EOS only
    assert labels_t[:len(ids) - len(answer)] == [-100] * (len(ids) - len(answer))
    ids_g, labels_g = _examples(tasks, lm, "t_mc", loss_on="target", end_of_text="generative")[1]
    assert ids_g == ids[:-1] and tokenizer.decode([t for t, y in zip(ids_g, labels_g) if y != -100]) == " woof"


def test_list_targets_description_and_truncation(tasks, lm, tokenizer):
    joined = _examples(tasks, lm, "t_list")[0][0]
    first = _examples(tasks, lm, "t_list", list_targets="first")[0][0]
    assert tokenizer.decode(joined[:-1]) == "q0: it says moo woof"                # all answers, space-joined
    assert tokenizer.decode(first[:-1]) == "q0: it says moo"
    bare = _examples(tasks, lm, "t_mc")[0][0]
    described = _examples(tasks, lm, "t_mc", task_description=True)[0][0]
    assert tokenizer.decode(described).startswith("Answer the question.\nq0:")
    assert not tokenizer.decode(bare).startswith("Answer")
    task, _ = tasks["t_mc"]
    assert task.config.description == "Answer the question.\n"                  # rendering leaves the task as it was
    end = _examples(tasks, lm, "t_mc", max_length=4)[1]
    start = _examples(tasks, lm, "t_mc", max_length=4, truncate="start")[1]
    full = _examples(tasks, lm, "t_mc")[1][0]
    assert end[0] == full[:4] and start[0] == full[-4:]


def test_recipe_rejects_unknown_choices():
    with pytest.raises(ValueError, match="loss_on must be one of.*did you mean 'target'"):
        ft.Recipe.default(**{**PAPER, "loss_on": "targets"})
    with pytest.raises(ValueError, match="micro_batch_size"):
        ft.Recipe.default(**{**PAPER, "micro_batch_size": 9})
    assert "micro_batch_size" not in ft.Recipe.default(**PAPER).key()               # execution, not what is computed
    assert ft.Recipe.default(**PAPER).criterion == "val_loss"


def _lora_model(tokenizer, dropout: float):
    model = tiny.make_model("gpt2", tokenizer, d_model=32, n_layers=2, n_heads=2, max_len=128, seed=2)
    return model, ft.Recipe.default(**{**PAPER, "lora_dropout": dropout})


def _grads(model):
    return {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.requires_grad}


def test_accumulated_gradient_equals_the_full_batch_gradient(tasks, lm, tokenizer):
    """Micro-batches of uneven lengths and label counts, each normalised by the whole batch's
    token count: the accumulated gradient is the full batch's."""
    import torch

    batch = _examples(tasks, lm, "t_mc", loss_on="target")[:5] + _examples(tasks, lm, "t_list")[:2]
    base, recipe = _lora_model(tokenizer, dropout=0.0)
    with ft.lora(base, recipe) as model:
        model.train()
        grads, losses = {}, {}
        for micro in (0, 3, 1):
            model.zero_grad(set_to_none=True)
            losses[micro] = training.batch_loss(model, batch, tokenizer.pad_token_id, micro, "cpu")
            grads[micro] = _grads(model)
    assert losses[3] == pytest.approx(losses[0], rel=1e-5) and losses[1] == pytest.approx(losses[0], rel=1e-5)
    for micro in (3, 1):
        for name, g in grads[0].items():
            assert torch.allclose(grads[micro][name], g, rtol=1e-4, atol=1e-7), (micro, name)
    assert any(g.abs().sum() > 0 for g in grads[0].values())


def test_gradient_checkpointing_gives_the_same_gradient(tasks, lm, tokenizer):
    import torch

    batch = _examples(tasks, lm, "t_mc")[:6]
    grads = []
    for checkpointing in (False, True):
        base, recipe = _lora_model(tokenizer, dropout=0.1)
        recipe = ft.Recipe.default(**{**recipe.to_dict(), "gradient_checkpointing": checkpointing})
        with ft.lora(base, recipe) as model:
            assert base.is_activation_checkpointing == checkpointing
            model.train()
            torch.manual_seed(5)                                             # the same dropout draws
            training.batch_loss(model, batch, tokenizer.pad_token_id, 0, "cpu")
            grads.append(_grads(model))
        assert not base.is_activation_checkpointing                            # left as it was
    for name, g in grads[0].items():
        assert torch.allclose(grads[1][name], g, rtol=1e-5, atol=1e-7), name


class _TightMemory(__import__("torch").nn.Module):
    """A model that raises CUDA's out-of-memory error for micro-batches of more than ``rows`` rows
    (and for any row while gradient checkpointing is off, with ``rows`` = 0)."""

    def __init__(self, inner, rows: int):
        super().__init__()
        self.inner, self.rows, self.calls = inner, rows, []

    def forward(self, **kw):
        import torch

        n = kw["input_ids"].shape[0]
        self.calls.append(n)
        on = self.inner.get_base_model().is_activation_checkpointing
        if n > self.rows and not (self.rows == 0 and on):
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return self.inner(**kw)

    def get_base_model(self):
        return self.inner.get_base_model()


def _train(tokenizer, examples, micro: int, rows: int | None):
    import torch

    base, recipe = _lora_model(tokenizer, dropout=0.1)
    with ft.lora(base, recipe) as model:
        wrapped = _TightMemory(model, rows) if rows is not None else model
        log = []
        points = list(training.train_epochs(wrapped, examples, epochs=2, batch_size=8, lr=1e-2, weight_decay=0.01,
                                           seed=0, pad_id=tokenizer.pad_token_id, micro_batch_size=micro,
                                           log=log.append))
        weights = torch.cat([p.detach().flatten() for n, p in model.named_parameters() if "lora" in n])
    return points, weights, log, wrapped, base.is_activation_checkpointing


@pytest.mark.slow
def test_out_of_memory_halves_the_micro_batch_and_keeps_the_effective_batch(tasks, lm, tokenizer):
    import torch

    examples = _examples(tasks, lm, "t_mc") + _examples(tasks, lm, "t_list")     # 12 examples: batches of 8 and 4
    points, weights, log, wrapped, _ = _train(tokenizer, examples, micro=0, rows=2)
    assert log == ["out of memory: micro-batch halved to 4 (effective batch stays 8)",
                   "out of memory: micro-batch halved to 2 (effective batch stays 8)"]
    assert [p["micro_batch_size"] for p in points] == [2, 2] and max(wrapped.calls[3:]) == 2
    # the same as asking for micro-batches of 2 from the start, draw for draw
    ref_points, ref_weights, ref_log, _, _ = _train(tokenizer, examples, micro=2, rows=None)
    assert ref_log == [] and torch.equal(weights, ref_weights)
    assert [p["train_loss"] for p in points] == [p["train_loss"] for p in ref_points]


@pytest.mark.slow
def test_out_of_memory_at_one_row_switches_gradient_checkpointing_on(tasks, lm, tokenizer):
    examples = _examples(tasks, lm, "t_mc")
    points, _, log, _, left_on = _train(tokenizer, examples, micro=1, rows=0)
    assert log == ["out of memory: one row does not fit: gradient checkpointing switched on"]
    assert len(points) == 2 and not left_on                               # switched off again on exit


def test_mean_loss_is_the_token_weighted_mean(tasks, lm, tokenizer):
    import torch

    examples = _examples(tasks, lm, "t_mc") + _examples(tasks, lm, "t_list", loss_on="target")
    base, recipe = _lora_model(tokenizer, dropout=0.1)
    with ft.lora(base, recipe) as model:
        got = training.mean_loss(model, examples, batch_size=5, pad_id=tokenizer.pad_token_id)
        ids, labels, mask = training._pad(examples, tokenizer.pad_token_id)
        model.eval()
        with torch.no_grad():
            whole = model(input_ids=ids, attention_mask=mask, labels=labels).loss.item()   # the model's own mean
    assert got == pytest.approx(whole, rel=1e-5)


def test_cached_templates_render_the_same_examples(tasks, lm):
    ev.cache_templates(enable=False)
    try:
        plain = {n: _examples(tasks, lm, n) for n in ("t_mc", "t_list")}
    finally:
        ev.cache_templates()
    assert {n: _examples(tasks, lm, n) for n in ("t_mc", "t_list")} == plain


def test_generation_cap_reaches_lm_eval(tasks, lm):
    task, info = tasks["t_list"]
    assert task.config.generation_kwargs["max_gen_toks"] == 16               # the task's own
    out = ev.evaluate(lm, task, info, "test", list(range(6)), max_gen_toks=0)
    assert task.config.generation_kwargs["max_gen_toks"] == 16 and out.n == 6
    ev.evaluate(lm, task, info, "test", list(range(6)), max_gen_toks=3)      # the paper passed 256
    assert task.config.generation_kwargs["max_gen_toks"] == 3


def test_load_model_in_the_recipes_dtype_and_gemma_with_eager_attention(tokenizer, tmp_path):
    import torch
    import transformers as tf

    llama = tiny.make_model("llama", tokenizer, d_model=32, n_layers=1, n_heads=2, max_len=64)
    llama.save_pretrained(tmp_path / "llama")
    tokenizer.save_pretrained(tmp_path / "llama")
    model, tok = ev.load_model(str(tmp_path / "llama"), device="cpu", dtype="bfloat16")
    assert next(model.parameters()).dtype == torch.bfloat16 and tok.pad_token is not None
    model, _ = ev.load_model(str(tmp_path / "llama"), device="cpu")
    assert next(model.parameters()).dtype == torch.float32                    # the paper's default
    with pytest.raises(ev.ModelError, match="dtype must be one of.*did you mean 'float16'"):
        ev.load_model(str(tmp_path / "llama"), dtype="float61")
    config = tf.GemmaConfig(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                            num_attention_heads=2, num_key_value_heads=1, head_dim=16, max_position_embeddings=64)
    tf.GemmaForCausalLM(config).save_pretrained(tmp_path / "gemma")
    tokenizer.save_pretrained(tmp_path / "gemma")
    gemma, _ = ev.load_model(str(tmp_path / "gemma"), device="cpu")
    assert gemma.config._attn_implementation == "eager"                       # as the paper's code loaded Gemma


def test_the_recipes_defaults_are_notebook_02s_and_written_nowhere_else():
    """Tests and benchmarks start from Recipe.default(), which reads notebook 02's parameters cell;
    the dataclass itself holds no default that could disagree with it."""
    import dataclasses

    from lib import params

    assert all(f.default is dataclasses.MISSING for f in dataclasses.fields(ft.Recipe))
    nb = params.notebook_parameters("02_finetune")
    recipe = ft.Recipe.default()
    assert recipe.to_dict() == {k: nb[k] for k in ft.Recipe.__dataclass_fields__}
    assert ft.Recipe.default(epochs=2, patience=1) == dataclasses.replace(recipe, epochs=2, patience=1)
    with pytest.raises(ValueError, match=r"recipe: no field \['epoch'\]"):
        ft.Recipe.default(epoch=2)
