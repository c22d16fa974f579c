"""Learning rates trained stacked (lib.pipeline.stacked, training.StackedRuns): the same arithmetic
as each run alone, bit for bit, for the three families of the mini zoo; what cannot stack is named."""

from __future__ import annotations

import copy

import pytest
import torch

from lib.pipeline import tiny, training
from lib.pipeline.stacked import Stack, StackError, stackable

FAMILIES = ("llama", "gpt2", "gpt_neox")


@pytest.fixture(scope="module")
def tok():
    return tiny.train_tokenizer([f"the bako{i} lives in the desert and eats fish ." for i in range(300)], 300)


def _model(tok, family, d_model=32):
    return tiny.make_model(family, tok, d_model=d_model, n_layers=2, n_heads=2, max_len=64)


def _examples(tok, n=20):
    gen = torch.Generator().manual_seed(1)
    out = []
    for i in range(n):
        length = 6 + i % 9
        ids = torch.randint(5, len(tok), (length,), generator=gen).tolist()
        out.append((ids, [-100] * (length - 3) + ids[-3:]))
    return out


@pytest.mark.slow
@pytest.mark.parametrize("family", FAMILIES)
def test_stacked_runs_end_bit_identical_to_each_run_alone(tok, family):
    """Three learning rates, 2 epochs of whole batches (the last one short, padded rows): the stacked
    runs' epoch losses and final weights equal those of train_epochs on each run alone, bit for bit;
    so does a run resumed from its state after epoch 1 and stacked with a fresh one."""
    base = _model(tok, family)
    assert stackable(base) is None
    examples, lrs = _examples(tok), (1e-3, 3e-3, 1e-2)
    kw = dict(epochs=2, batch_size=8, weight_decay=0.01, seed=0, pad_id=tok.pad_token_id)
    alone = []
    for lr in lrs:
        model = copy.deepcopy(base).train()
        curve = [p["train_loss"] for p in training.train_epochs(model, examples, lr=lr, **kw)]
        alone.append((curve, model))
    models = [copy.deepcopy(base) for _ in lrs]
    runs = training.StackedRuns(models, examples, lrs=lrs, **kw)
    curves = [[], [], []]
    for _ in range(2):
        for i, point in runs.epoch([0, 1, 2]).items():
            curves[i].append(point["train_loss"])
    for (curve, model), mine, stacked in zip(alone, curves, models):
        assert mine == curve
        assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), stacked.state_dict().values()))
    # a run resumed after epoch 1 (its saved loop state) beside a fresh one: the fresh one runs epoch 1 alone,
    # then both their epoch 2 stacked; both end as alone
    first = copy.deepcopy(base)
    one = training.StackedRuns([first], examples, lrs=lrs[:1], **kw)
    one.epoch([0])
    resumed, fresh = copy.deepcopy(first), copy.deepcopy(base)
    both = training.StackedRuns([resumed, fresh], examples, lrs=lrs[:2], resumes=[one.state(0), None], **kw)
    with pytest.raises(training.TrainingError, match="different epochs"):
        both.epoch([0, 1])
    both.epoch([1])
    both.epoch([0, 1])
    for (_, model), stacked in zip(alone[:2], (resumed, fresh)):
        assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), stacked.state_dict().values()))


def test_what_cannot_stack_is_named(tok):
    base = _model(tok, "llama")
    with pytest.raises(StackError, match="does not have the parameters"):
        Stack([base, _model(tok, "llama", d_model=48)])
    with pytest.raises(StackError, match="not one of"):
        Stack([base], linear="einsum")
    dropped = _model(tok, "gpt2")
    dropped.transformer.drop.p = 0.1
    assert stackable(dropped) == "dropout 0.1 in transformer.drop"
    base.config.attention_dropout = 0.1
    assert stackable(base) == "attention_dropout 0.1"
