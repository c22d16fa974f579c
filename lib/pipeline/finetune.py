"""Train-before-test fine-tuning: LoRA on a task's training split, as lm-eval renders it.

A training example is the gold request lm-eval itself would score (:func:`lib.pipeline.tasks.render`),
tokenised with lm-eval's own ``_encode_pair``, so training and scoring see identical tokens. Where
the loss lies and how an example is rendered and cut are recipe fields (:class:`Recipe`; the paper's
values are notebook 02's defaults: TRL's SFT trainer on ``prompt + " " + answer + EOS`` with the
loss on every token).

One learning-rate *unit* (:func:`train_units`) trains, validates after every epoch, keeps the best
epoch and resumes after a kill bit for bit; with ``tensorboard`` set it also writes its curves
(:class:`_Curves`).
"""

from __future__ import annotations

import importlib.util
import json
import pickle
import shutil
import time
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .. import layout
from ..util import atomic_dir, did_you_mean
from .tasks import TaskInfo, docs, render
from .training import random_states, set_random_states, train_epochs

CHOICES = {
    "loss_on": ("all", "target"),             # every token (the paper: TRL's default) or the answer only
    "end_of_text": ("every", "generative"),   # EOS after every answer (TRL appends it) or generative only
    "list_targets": ("join", "first"),        # a list of gold answers (nq_open): all, space-joined, or the first
    "truncate": ("end", "start"),             # an overlong example loses its end (TRL) or its start
    "select_on": ("loss", "metric"),          # the best epoch: lowest validation loss or best lm-eval metric
    "lora_modules": ("default", "all"),       # peft's default modules (the paper) or every linear layer
    "method": ("lora", "full"),               # a LoRA adapter (the paper) or every parameter trained
}
# fields that change how a unit runs but not what it computes (not part of a result's configuration)
EXECUTION_FIELDS = ("micro_batch_size", "gradient_checkpointing", "tensorboard")
LORA_FIELDS = ("lora_r", "lora_alpha", "lora_dropout", "lora_modules")     # unused by ``method`` "full"


@dataclass(frozen=True)
class Recipe:
    """The fixed fine-tuning recipe. Its values come from notebook 02's parameters, whose defaults
    are the paper's: LoRA r 8 / alpha 32 / dropout 0.1 on peft's default modules, 5 epochs,
    learning rates {1e-5, 2e-5, 5e-5}, batch 8, AdamW with weight decay 0.01 and a linear decay
    without warm-up, examples of at most 1,024 tokens, loss on every token of
    ``prompt + " " + answer + EOS`` (a list of answers joined, no task description), the epoch
    with the lowest validation loss. ``micro_batch_size`` (0: the whole batch) and
    ``gradient_checkpointing`` trade speed for memory without changing the effective batch;
    ``tensorboard`` writes each unit's curves for TensorBoard and changes no number either.
    ``method`` "full" trains every parameter instead of a LoRA adapter (the ``lora_*`` fields are
    then unused) and keeps the best epoch's whole model; ``patience`` > 0 stops a learning rate
    after that many epochs without a better validation value (the paper: 0, every epoch runs; the
    learning-rate schedule still decays over ``epochs``, so the epochs that do run are the same)."""
    lrs: tuple[float, ...]
    epochs: int
    lora_r: int
    lora_alpha: int
    lora_dropout: float
    lora_modules: str
    batch_size: int
    micro_batch_size: int
    gradient_checkpointing: bool
    tensorboard: bool
    max_length: int
    weight_decay: float
    seed: int
    loss_on: str
    end_of_text: str
    list_targets: str
    task_description: bool
    truncate: str
    select_on: str
    method: str
    patience: int

    def __post_init__(self):
        object.__setattr__(self, "lrs", tuple(self.lrs))
        if not self.lrs or any(lr <= 0 for lr in self.lrs):
            raise ValueError(f"recipe: learning rates must be positive, got {self.lrs}")
        if self.epochs < 1 or self.batch_size < 1 or self.max_length < 2 or self.patience < 0:
            raise ValueError(f"recipe: epochs, batch_size must be >= 1, max_length >= 2 and patience >= 0 ({self})")
        if not 0 <= self.micro_batch_size <= self.batch_size:
            raise ValueError(f"recipe: micro_batch_size must be 0 (the whole batch) or 1..batch_size "
                             f"{self.batch_size}, got {self.micro_batch_size}")
        for name, allowed in CHOICES.items():
            value = getattr(self, name)
            if value not in allowed:
                raise ValueError(f"recipe: {name} must be one of {list(allowed)}, got {value!r}"
                                 f"{did_you_mean(str(value), allowed)}")
        if self.tensorboard and importlib.util.find_spec("tensorboard") is None:
            from ..params import PrerequisiteError

            raise PrerequisiteError("recipe: tensorboard is set, but the tensorboard package is not installed: "
                                    "run `make venv` (or pip install 'train-before-test[tensorboard]')")

    @classmethod
    def from_params(cls, params: dict) -> Recipe:
        """The recipe from a stage's parameters (notebook 02's, which name every field)."""
        missing = sorted(set(cls.__dataclass_fields__) - set(params))
        if missing:
            raise ValueError(f"recipe: parameters lack {missing}")
        return cls(**{k: params[k] for k in cls.__dataclass_fields__})

    @classmethod
    def default(cls, **changes) -> Recipe:
        """Notebook 02's defaults (the paper's recipe, the one place they are written) with ``changes``:
        what tests and benchmarks start from, stating only where they depart."""
        from ..params import notebook_parameters

        unknown = sorted(set(changes) - set(cls.__dataclass_fields__))
        if unknown:
            raise ValueError(f"recipe: no field {unknown}")
        return cls.from_params({**notebook_parameters("02_finetune"), **changes})

    def to_dict(self) -> dict:
        d = asdict(self)
        d["lrs"] = list(self.lrs)
        return d

    def key(self) -> dict:
        """The fields that determine a result: execution settings left out, and the LoRA fields when
        every parameter trains (a changed ``lora_r`` under ``method: full`` retrains nothing)."""
        unused = EXECUTION_FIELDS + (LORA_FIELDS if self.method == "full" else ())
        return {k: v for k, v in self.to_dict().items() if k not in unused}

    @property
    def criterion(self) -> str:
        """The curve key the best epoch is chosen on: ``val_loss`` or ``val_score``."""
        return "val_loss" if self.select_on == "loss" else "val_score"


def lora_targets(model, modules: str = "default") -> list[str] | str | None:
    """The modules LoRA adapts: ``default``, peft's default for the model's architecture (what the
    paper used; for llama, qwen2 and gemma the query and value projections, gpt2 ``c_attn``, gpt_neox
    ``query_key_value``), or ``all``, every linear layer of the blocks (peft's ``all-linear``: tiny
    models learn a benchmark's answer format poorly through the attention projections alone)."""
    from peft.utils.constants import TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING as DEFAULTS

    if modules == "all":
        return "all-linear"
    return DEFAULTS.get(getattr(model.config, "model_type", ""))


# ---------------------------------------------------------------------------------------------
# training examples


def training_examples(task, info: TaskInfo, lm, recipe: Recipe, chat_template: bool = False,
                      role: str = "train") -> list[tuple[list[int], list[int]]]:
    """(input_ids, labels) per example of ``role`` (labels -100 where no loss is taken), as the
    recipe's ``loss_on``, ``end_of_text`` (EOS after generative answers only: a model learns to
    stop) and ``truncate`` say. Perplexity corpora are cut into disjoint windows of ``max_length``
    tokens with the loss on every token."""
    eos = lm.tokenizer.eos_token_id
    max_length = recipe.max_length
    out = []
    for doc in docs(task, role):
        context, continuation = render(task, info, doc, lm, chat_template, recipe.list_targets,
                                       recipe.task_description)
        if info.kind == "loglikelihood_rolling":
            tokens = lm.tok_encode(continuation, add_special_tokens=False)
            step = max_length - 1
            for i in range(0, len(tokens), step):            # disjoint windows, each after a prefix
                piece = tokens[i:i + step]
                out.append(([lm.prefix_token_id] + piece, [-100] + piece))
            continue
        if context == "":
            ctx_enc, cont_enc = [lm.prefix_token_id], lm.tok_encode(continuation, add_special_tokens=False)
        else:
            ctx_enc, cont_enc = lm._encode_pair(context, continuation)
        if eos is not None and (recipe.end_of_text == "every" or info.kind == "generate_until"):
            cont_enc = list(cont_enc) + [eos]
        ids = list(ctx_enc) + list(cont_enc)
        labels = list(ids) if recipe.loss_on == "all" else [-100] * len(ctx_enc) + list(cont_enc)
        if len(ids) > max_length:
            cut = slice(None, max_length) if recipe.truncate == "end" else slice(-max_length, None)
            ids, labels = ids[cut], labels[cut]
        out.append((ids, labels))
    if not out:
        raise ValueError(f"task {info.name!r}: no {role} examples")
    return out


# ---------------------------------------------------------------------------------------------
# one learning-rate unit


@dataclass
class UnitResult:
    lr: float
    curve: list[dict] = field(default_factory=list)   # per epoch: epoch, val_loss or val_score, train_loss, ...
    criterion: str = "val_score"                      # the curve key the best epoch was chosen on
    best_epoch: int | None = None
    best_score: float | None = None                   # the criterion's value at the best epoch
    adapter: str | None = None
    n_train_examples: int = 0
    seconds: float = 0.0
    config: dict = field(default_factory=dict)        # what produced it (see spec.JobSpec.config)
    resumed_after: list[int] = field(default_factory=list)   # epochs after which a killed run was resumed


def _better(a: float, b: float | None, higher_is_better: bool) -> bool:
    return b is None or (a > b if higher_is_better else a < b)


@contextmanager
def lora(base, recipe: Recipe):
    """``base`` with a fresh LoRA adapter of ``recipe`` attached (initialised from ``recipe.seed``;
    gradient checkpointing switched on when the recipe asks for it); the adapter is removed again
    on exit and checkpointing switched off, leaving ``base`` as it was."""
    import torch
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(recipe.seed)
    config = LoraConfig(r=recipe.lora_r, lora_alpha=recipe.lora_alpha, lora_dropout=recipe.lora_dropout,
                        target_modules=lora_targets(base, recipe.lora_modules), task_type="CAUSAL_LM")
    was_checkpointing = getattr(base, "is_activation_checkpointing", False)
    if recipe.gradient_checkpointing and not was_checkpointing:
        base.activation_checkpointing_enable({"use_reentrant": False})
    model = get_peft_model(base, config)
    try:
        yield model
    finally:
        model.unload()
        if getattr(base, "is_activation_checkpointing", False) and not was_checkpointing:
            base.activation_checkpointing_disable()     # also when the out-of-memory back-off switched it on


@contextmanager
def tunable(base, recipe: Recipe):
    """What a learning-rate unit trains: ``base`` with a fresh LoRA adapter (:func:`lora`), or for
    ``method`` "full" a copy of ``base`` with every parameter trainable (``base`` stays as it was)."""
    if recipe.method == "lora":
        with lora(base, recipe) as model:
            yield model
        return
    import copy

    import torch

    torch.manual_seed(recipe.seed)                  # dropout draws, as for a LoRA unit
    model = copy.deepcopy(base)
    for p in model.parameters():
        p.requires_grad_(True)
    if recipe.gradient_checkpointing and getattr(model, "supports_gradient_checkpointing", False):
        model.gradient_checkpointing_enable({"use_reentrant": False})
    yield model


@contextmanager
def adapter(base, adapter_dir: str | Path):
    """``base`` with the saved adapter applied (eval mode), removed again on exit; a folder saved by
    a ``method: full`` unit holds the whole tuned model, which is loaded instead (in ``base``'s
    precision, on its device)."""
    adapter_dir = Path(adapter_dir)
    if not (adapter_dir / "adapter_config.json").exists() and (adapter_dir / "config.json").exists():
        from transformers import AutoModelForCausalLM

        yield AutoModelForCausalLM.from_pretrained(str(adapter_dir), dtype=base.dtype).to(base.device).eval()
        return
    from peft import PeftModel

    model = PeftModel.from_pretrained(base, str(adapter_dir))
    model.eval()
    try:
        yield model
    finally:
        model.unload()


def train_units(base, tokenizer, examples: Callable[[], list], recipe: Recipe, lrs, unit_dir: Callable[[float], Path],
                validate: Callable[[object], float], higher_is_better: bool,
                config: Callable[[float], dict] | None = None, progress: Callable[[str], None] | None = None,
                reuse: bool = True) -> list[UnitResult]:
    """The learning-rate units of one (model, benchmark), one per rate of ``lrs``, in that order: a
    finished unit of the same configuration (``config(lr)``) in ``unit_dir(lr)`` is read back
    (``reuse``), the others train one after another on ``examples()`` (asked for only then).

    A unit trains a fresh LoRA adapter (or, ``method`` "full", a copy of the whole model) for
    ``recipe.epochs`` epochs, stopping early after ``recipe.patience`` epochs without a better
    ``validate(model)`` (the validation loss, or the lm-eval metric as ``higher_is_better`` says).
    It keeps the best epoch in ``unit_dir/epoch=<e>/`` and writes ``unit.json`` last: a unit without
    it is unfinished, so a killed run leaves nothing that is read as a result. After every epoch
    its state is saved in ``unit_dir/resume/`` (:func:`save_state`), so a unit killed before
    ``unit.json`` (time limit, preemption, SIGKILL) resumes after its last finished epoch and ends
    bit for bit as an uninterrupted run; anything else in an unfinished ``unit_dir`` starts again.
    Deterministic for ``recipe.seed``; ``base`` is left as it was."""
    config = config or (lambda lr: {})
    found = {lr: read_unit(unit_dir(lr), config(lr)) if reuse else None for lr in lrs}
    todo = [lr for lr in lrs if found[lr] is None]
    data = examples() if todo else []
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    for lr in todo:
        with tunable(base, recipe) as model:
            unit = _Unit(model, data, recipe, lr, Path(unit_dir(lr)), config(lr), higher_is_better, progress)
            points = () if unit.finished else train_epochs(
                model, data, epochs=recipe.epochs, batch_size=recipe.batch_size, lr=lr,
                weight_decay=recipe.weight_decay, seed=recipe.seed, pad_id=pad,
                micro_batch_size=recipe.micro_batch_size, log=progress, resume=unit.resume,
                on_step=unit.curves.step if unit.curves else None)
            for point in points:
                if unit.epoch(point, validate):
                    break                           # the last epoch, or no better value for `patience` epochs
        found[lr] = unit.finish()
    return [found[lr] for lr in lrs]


class _Unit:
    """One learning rate's unit while it trains: its result so far, its folder, the model it trains
    and the loop state a resume restored."""

    def __init__(self, model, examples, recipe: Recipe, lr: float, unit_dir: Path, config: dict,
                 higher_is_better: bool, progress):
        self.model, self.recipe, self.dir, self.progress = model, recipe, unit_dir, progress
        key = recipe.criterion
        self.higher = higher_is_better if key == "val_score" else False
        self.res = UnitResult(lr=lr, criterion=key, n_train_examples=len(examples), config=dict(config or {}))
        saved = load_state(unit_dir, json.loads(json.dumps(self.res.config)), lr)   # as JSON keeps it
        if saved is None and unit_dir.exists():     # finished with another config, or no usable state
            shutil.rmtree(unit_dir)
        self.resume = None
        if saved is not None:
            self.resume = _restore(model, self.res, saved)
            if progress:
                progress(f"{layout.lr_name(lr)} resumed after epoch={self.resume['epoch']}")
        self.finished = self.resume is not None and (self.resume["epoch"] >= recipe.epochs or _stop(recipe, self.res))
        self.started, self.before = time.time(), self.res.seconds     # the time of killed runs counts too
        self.curves = _Curves(unit_dir, self.resume) if recipe.tensorboard and not self.finished else None

    def epoch(self, point: dict, validate) -> bool:
        """What follows a training epoch: validate (``res.criterion``), extend the curve, keep the
        adapter of a better epoch, save the state, then prune the older best (once the state no
        longer names it) and say how the epoch went. Returns whether the unit is done (its last
        epoch, or ``recipe.patience`` epochs without a better value)."""
        res, t0 = self.res, time.time()
        state = point.pop("state")
        value = float(validate(self.model))
        point[res.criterion] = value
        point["seconds"] = point["train_seconds"] + time.time() - t0
        res.curve.append(point)
        if _better(value, res.best_score, self.higher):
            target = atomic_dir(layout.adapter_dir(self.dir, point["epoch"]), self.model.save_pretrained)
            res.best_epoch, res.best_score, res.adapter = point["epoch"], value, str(target)
        loop_state = state()
        res.seconds = self._elapsed()
        save_state(self.dir, self.model, res, loop_state)
        _prune(self.dir, res.adapter)
        if self.curves:
            self.curves.epoch(point, res)
        if self.progress:
            self.progress(f"{layout.lr_name(res.lr)} epoch={point['epoch']} {res.criterion}={value:.4f}")
        return point["epoch"] >= self.recipe.epochs or _stop(self.recipe, res)

    def _elapsed(self) -> float:
        return self.before + time.time() - self.started

    def finish(self) -> UnitResult:
        """Write ``unit.json`` (last: the unit is finished) and drop its resume state."""
        self.res.seconds = self._elapsed()
        if self.curves:
            self.curves.writer.close()
        layout.write_unit(self.dir, asdict(self.res))
        shutil.rmtree(layout.resume_dir(self.dir), ignore_errors=True)   # finished: the state is not needed
        return self.res


class _Curves:
    """A unit's TensorBoard event files, in its folder (``recipe.tensorboard``): each optimiser step's
    loss and learning rate, each epoch's loss, validation value and best epoch so far. A resumed unit
    drops what the killed run wrote after its state (TensorBoard's ``purge_step``). It only watches."""

    def __init__(self, unit_dir: Path, resume: dict | None):
        from torch.utils.tensorboard import SummaryWriter

        self.last = resume["scheduler"]["last_epoch"] if resume else 0      # optimiser steps already taken
        self.writer = SummaryWriter(str(unit_dir), purge_step=self.last + 1 if resume else None)

    def step(self, step: int, loss: float, lr: float) -> None:
        self.last = step
        self.writer.add_scalar("train/loss", loss, step)
        self.writer.add_scalar("train/learning_rate", lr, step)

    def epoch(self, point: dict, res: UnitResult) -> None:
        for tag, value in (("train/epoch", point["epoch"]), ("train/epoch_loss", point["train_loss"]),
                           (f"validation/{res.criterion}", point[res.criterion]),
                           ("checkpoint/best_epoch", res.best_epoch)):
            self.writer.add_scalar(tag, value, self.last)
        self.writer.flush()                  # a unit killed later keeps its curves up to this epoch


def _stop(recipe: Recipe, res: UnitResult) -> bool:
    """Early stopping: ``recipe.patience`` epochs without a better validation value."""
    return bool(recipe.patience) and res.curve[-1]["epoch"] - res.best_epoch >= recipe.patience


def _prune(unit_dir: Path, keep: str | None) -> None:
    """Remove the adapters of a unit other than ``keep`` (a best epoch superseded, or an epoch
    saved by a run killed before its state was)."""
    for old in unit_dir.glob("epoch=*"):
        if keep is None or old != Path(keep):
            shutil.rmtree(old, ignore_errors=True)


# --------------------------------------------------------------------------- resume inside a unit
STATE_JSON = "state.json"        # the curve so far, the best epoch, the config (written last)
STATE_TENSORS = "state.pt"       # trainable weights, optimiser, schedule, data order, random states


def save_state(unit_dir: str | Path, model, res: UnitResult, loop_state: dict) -> Path:
    """Replace ``unit_dir/resume/`` atomically with the unit's state after ``loop_state["epoch"]``:
    the trainable parameters, the loop's state, the random states as they are now (after validation,
    before the next epoch) and the curve so far."""
    import torch

    trainable = {n: p.detach().cpu().clone() for n, p in model.named_parameters() if p.requires_grad}
    record = {**asdict(res), "epoch": loop_state["epoch"]}

    def write(tmp: Path) -> None:
        torch.save({"params": trainable, "loop": loop_state, "random": random_states()}, tmp / STATE_TENSORS)
        (tmp / STATE_JSON).write_text(json.dumps(record, indent=1) + "\n")

    return atomic_dir(layout.resume_dir(unit_dir), write)


def load_state(unit_dir: str | Path, config: dict, lr: float) -> dict | None:
    """The saved state of an unfinished unit made with ``config`` at ``lr`` whose best adapter is still
    there; None otherwise (no state, a finished unit, another configuration, a state that does not load)."""
    import torch

    unit_dir = Path(unit_dir)
    folder = layout.resume_dir(unit_dir)
    if (unit_dir / layout.UNIT_FILE).exists() or not (folder / STATE_JSON).exists():
        return None
    try:
        record = json.loads((folder / STATE_JSON).read_text())
        if record.get("config") != config or record.get("lr") != lr or not record.get("adapter") \
                or not Path(record["adapter"]).exists():
            return None
        tensors = torch.load(folder / STATE_TENSORS, map_location="cpu", weights_only=True)
    except (OSError, ValueError, RuntimeError, KeyError, pickle.UnpicklingError):
        return None
    return {"record": record, **tensors}


def _restore(model, res: UnitResult, saved: dict) -> dict:
    """Put a saved state back: the trainable parameters into ``model``, the curve into ``res``, the
    random states; returns the loop's state for :func:`lib.pipeline.training.train_epochs`."""
    import torch

    record = saved["record"]
    names = {n for n, p in model.named_parameters() if p.requires_grad}
    if set(saved["params"]) != names:
        raise RuntimeError(f"resume: the saved state's parameters do not match the model's ({len(names)} trainable, "
                           f"{len(saved['params'])} saved)")
    with torch.no_grad():
        missing, unexpected = model.load_state_dict(saved["params"], strict=False)
    if unexpected:
        raise RuntimeError(f"resume: unexpected parameters {unexpected[:3]}")
    res.curve = list(record["curve"])
    res.best_epoch, res.best_score, res.adapter = record["best_epoch"], record["best_score"], record["adapter"]
    res.seconds = record["seconds"]
    res.resumed_after = [*record.get("resumed_after", []), record["epoch"]]
    _prune(Path(record["adapter"]).parent, record["adapter"])       # an epoch saved after the state was
    set_random_states(saved["random"])
    return saved["loop"]


def read_unit(unit_dir: str | Path, config: dict | None = None) -> UnitResult | None:
    """A finished unit's result (:func:`lib.layout.unit_record`, typed); None when it has not finished
    or (given ``config``) was made with another configuration (recipe, splits, model), so that it is redone."""
    data = layout.unit_record(unit_dir, config)
    if data is None:
        return None
    return UnitResult(**{k: v for k, v in data.items() if k in UnitResult.__dataclass_fields__})


def select_best(units: list[UnitResult], higher_is_better: bool, criterion: str = "val_score"
                ) -> tuple[float, int, float]:
    """(lr, epoch, value) with the best validation ``criterion`` over every unit and epoch
    (``val_loss``: lowest; ``val_score``: best as ``higher_is_better`` says); ties go to the
    earlier learning rate (in recipe order) and then the earlier epoch."""
    higher = higher_is_better if criterion == "val_score" else False
    best = None
    for u in units:
        for point in u.curve:
            if best is None or _better(point[criterion], best[2], higher):
                best = (u.lr, point["epoch"], point[criterion])
    if best is None:
        raise ValueError("select_best: no validation values")
    return best
