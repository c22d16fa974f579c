"""The paper's two protocols for one (model, benchmark), read top to bottom.

**Direct evaluation** scores the model as it is, zero-shot, on the benchmark's test split.

**Train-before-test** first fine-tunes the model on the benchmark's own training split with one
fixed recipe (:class:`lib.pipeline.finetune.Recipe`), then scores it on the same test split:

1. plan the splits: train / validation / test document ids under notebook 01's rule (both
   protocols test on the same documents), of the dataset revision it pins, and record what they are;
2. train a LoRA adapter at each learning rate, validating after every epoch (a finished unit of
   the same configuration is reused);
3. choose the (learning rate, epoch) that is best on validation;
4. score the test split once, with that adapter;
5. record the score, its per-item values and its provenance; keep only the chosen adapter.

The test split never takes part in the choice.

Cheaper forms of both (issue 42), each stored under a name of its own (:func:`lib.store.base_protocol`):
direct evaluation with ``spec.num_fewshot`` documents of the planned training split in every prompt
(:func:`lib.pipeline.tasks.install_splits`), and train-before-test on a reduced budget (one learning
rate, few epochs, ``spec.train_fraction`` of the training split: :func:`lib.pipeline.tasks.reduce_training`).

Which units run where and when (the grid, locks, failures, local or Slurm jobs) is the job
launcher's business (:mod:`lib.pipeline.launch.jobs`); where the files go is :mod:`lib.layout`'s.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from .. import layout
from ..util import atomic_write_json
from . import datasets
from . import evaluate as ev
from . import finetune as ft
from . import tasks as tk
from .spec import JobSpec
from .training import mean_loss


class ProtocolError(RuntimeError):
    """A unit's own files contradict each other (e.g. the chosen adapter is gone); the message names it."""


def run(spec: JobSpec, manager, model, tokenizer, benchmark: str, say=print) -> float | None:
    """One (model, benchmark) of a job: plan the splits, run the spec's protocol, record the result.
    Returns the test score (None for a job of one learning rate, ``spec.only_lr``: it only trains)."""
    rule = tk.SplitRule.from_dict(spec.splits)
    task, info = tk.inspect(manager, benchmark, spec.store_root, spec.task_timeout, rule.revisions.get(benchmark))
    plan = tk.plan_splits(task, info, rule)
    if spec.train_fraction < 1:                       # a reduced budget: a seeded share of the training split
        plan = tk.reduce_training(plan, spec.train_fraction, rule.seed)
    plan.dataset = datasets.record(task, plan)        # what the documents are, for the provenance
    shots = tk.install_splits(task, plan, spec.num_fewshot, rule.seed)
    if spec.trains:
        return train_before_test(spec, model, tokenizer, task, info, plan, say)
    return direct_eval(spec, model, tokenizer, task, info, plan, say, shots)


def direct_eval(spec: JobSpec, model, tokenizer, task, info: tk.TaskInfo, plan: tk.SplitPlan, say=print,
                shots: list[int] = ()) -> float:
    """Direct evaluation: the model as it is on the planned test split, zero-shot, or with the
    training documents ``shots`` in every prompt (``spec.num_fewshot`` of them, chosen by
    :func:`lib.pipeline.tasks.install_splits`)."""
    outcome = _score(spec, model, tokenizer, task, info, plan, "test")
    extra = {"num_fewshot": spec.num_fewshot, "fewshot_train_ids": list(shots)} if spec.num_fewshot else {}
    ev.record(spec.store_root, spec.work_root, spec.protocol, info, spec.model, outcome,
              spec.provenance(plan, **extra))
    return outcome.score


def train_before_test(spec: JobSpec, model, tokenizer, task, info: tk.TaskInfo, plan: tk.SplitPlan,
                      say=print) -> float | None:
    """Train-before-test, as the paper does it (the module's steps 2-5). A job of one learning rate
    (``spec.only_lr``, a unit split to fit a time limit) stops after step 2 and returns None."""
    recipe = spec.recipe
    lm = ev.make_lm(model, tokenizer, spec.eval_batch_size, add_bos_token=spec.add_bos_token)
    rendered: dict[str, list] = {}

    def examples(role: str) -> list:              # a split's training examples, tokenised once
        if role not in rendered:
            rendered[role] = ft.training_examples(task, info, lm, recipe, spec.chat_template, role=role)
            if role == "train":                       # what the model trains on, decoded, for the reader
                _write_example(spec, info, tokenizer, rendered[role][0])
        return rendered[role]

    def validate(tuned) -> float:                 # the recipe's criterion, on the validation split
        if recipe.select_on == "loss":
            return mean_loss(tuned, examples("validation"), batch_size=ev.rows_per_batch(spec.eval_batch_size),
                             pad_id=tokenizer.pad_token_id)
        return _score(spec, tuned, tokenizer, task, info, plan, "validation").score

    def train(lrs, reuse: bool = True) -> list[ft.UnitResult]:
        return ft.train_units(model, tokenizer, lambda: examples("train"), recipe, lrs,
                              lambda lr: layout.unit_dir(spec.work_root, spec.model, info.name, lr, spec.protocol),
                              validate,
                              info.higher_is_better, spec.config, reuse=reuse,
                              progress=lambda m: say(f"{spec.model} / {info.name}: {m}"))

    # 2. train each learning rate (a finished unit of the same configuration is reused; the others
    #    one after another: ft.train_units)
    units = train(recipe.lrs if spec.only_lr is None else (spec.only_lr,))  # a pruned adapter: retrained below
    if spec.only_lr is not None:                  # the job of all the rates chooses and tests
        return None

    # 3. choose on validation
    lr, epoch, val_value = ft.select_best(units, info.higher_is_better, recipe.criterion)
    i = next(i for i, u in enumerate(units) if u.lr == lr)
    problem = layout.adapter_problem(units[i].adapter) if units[i].adapter else "no adapter was kept"
    if problem:             # removed or damaged since: train it again (deterministic, so the same adapter)
        say(f"{spec.model} / {info.name}: {problem}: training {layout.lr_name(lr)} again")
        units[i] = train([lr], reuse=False)[0]
    chosen = units[i]
    if chosen.best_epoch != epoch or layout.adapter_problem(chosen.adapter):
        raise ProtocolError(f"{spec.model} / {info.name}: adapter of {layout.lr_name(lr)} epoch={epoch} missing at "
                            f"{chosen.adapter}")
    curves = {layout.lr_name(u.lr): [p[recipe.criterion] for p in u.curve] for u in units}
    adapter = Path(chosen.adapter).relative_to(spec.work_root).as_posix()      # moves with outputs/
    atomic_write_json(layout.selection_path(spec.work_root, spec.model, info.name, spec.protocol),
                      {"lr": lr, "epoch": epoch, recipe.criterion: val_value, "adapter": adapter,
                       "curves": curves, "criterion": recipe.criterion, "higher_is_better": info.higher_is_better})

    # 4. score the test split once, with the chosen adapter
    with ft.adapter(model, chosen.adapter) as tuned:
        outcome = _score(spec, tuned, tokenizer, task, info, plan, "test")

    # 5. record, and keep only the chosen adapter
    ev.record(spec.store_root, spec.work_root, spec.protocol, info, spec.model, outcome, spec.provenance(
        plan, lr=lr, epoch=epoch, select_on=recipe.select_on, **{recipe.criterion: val_value},
        val_curves=curves, adapter=adapter, gradient_checkpointing=recipe.gradient_checkpointing,
        micro_batch_size=min(p.get("micro_batch_size", recipe.batch_size) for u in units for p in u.curve),
        train_seconds=sum(u.seconds for u in units), **_training_tokens(units, examples)))
    for u in units:
        if u.lr != lr and u.adapter:
            shutil.rmtree(u.adapter, ignore_errors=True)
    return outcome.score


def _training_tokens(units: list[ft.UnitResult], examples) -> dict:
    """Tokens of the units' training epochs and their validations (the cost measure: training FLOPs
    ~ 6 x parameters x tokens, validation ~ 2 x): a split's tokens times the epochs the units ran."""
    epochs = sum(len(u.curve) for u in units)
    return {f"{role}_tokens": epochs * sum(len(ids) for ids, _ in examples(role))
            for role in ("train", "validation")}


def _write_example(spec: JobSpec, info: tk.TaskInfo, tokenizer, example: tuple[list[int], list[int]]) -> None:
    """The first training example, decoded as the model sees it (special tokens included), and the part
    that carries the loss."""
    ids, labels = example
    scored = [t for t, y in zip(ids, labels) if y != -100]
    atomic_write_json(layout.example_path(spec.work_root, spec.model, info.name, spec.protocol), {
        "text": tokenizer.decode(ids), "tokens": len(ids), "loss_tokens": len(scored),
        "loss_text": tokenizer.decode(scored)})


def _score(spec: JobSpec, model, tokenizer, task, info: tk.TaskInfo, plan: tk.SplitPlan, role: str) -> ev.Outcome:
    """lm-eval's score of ``role`` (validation or test) of the planned splits, with the spec's settings."""
    lm = ev.make_lm(model, tokenizer, spec.eval_batch_size, add_bos_token=spec.add_bos_token)
    return ev.evaluate(lm, task, info, role, plan.ids[role], chat_template=spec.chat_template,
                       bootstrap_iters=spec.bootstrap_iters if role == "test" else 0,
                       seed=spec.seed, max_gen_toks=spec.max_gen_toks)
