"""Train-before-test fine-tuning: LoRA on a task's training split, as lm-eval renders it.

Training examples are the task's own prompt and target: the context comes from lm-eval's
``fewshot_context`` (zero-shot, optionally through the model's chat template), the continuation is
the gold request lm-eval itself would score (multiple choice: the gold choice's request from
``construct_requests``; generative: ``target_delimiter + doc_to_target`` followed by EOS;
perplexity corpora: the text in model-length windows), tokenised with lm-eval's own
``_encode_pair`` so training and scoring see identical tokens. The loss covers the target tokens only.

One learning-rate *unit* trains ``epochs`` epochs, validates after each with the benchmark's own
lm-eval metric, keeps the best epoch's adapter in ``lr=<lr>/epoch=<e>/`` and writes ``unit.json``
(its curve) last: a unit without ``unit.json`` is unfinished and is redone from scratch
(deterministic for the seed), so a killed run leaves nothing that is read as a result.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..util import atomic_dir, atomic_write_json, current, read_json
from .tasks import TaskInfo, docs
from .training import lora_epochs

UNIT_FILE = "unit.json"
# LoRA targets of the tiny families (the paper's hub families use peft's defaults for the same names)
LORA_TARGETS = {"llama": ["q_proj", "v_proj"], "gpt2": ["c_attn"], "gpt_neox": ["query_key_value"],
                "qwen2": ["q_proj", "v_proj"], "gemma": ["q_proj", "v_proj"], "gemma2": ["q_proj", "v_proj"]}


@dataclass(frozen=True)
class Recipe:
    """The fixed fine-tuning recipe. Its values come from notebook 02's parameters (whose defaults
    are the paper's: LoRA r 8 / alpha 32 / dropout 0.1, 5 epochs, learning rates {1e-5, 2e-5, 5e-5})."""
    lrs: tuple[float, ...]
    epochs: int
    lora_r: int
    lora_alpha: int
    lora_dropout: float
    batch_size: int
    max_length: int
    weight_decay: float
    seed: int

    def __post_init__(self):
        object.__setattr__(self, "lrs", tuple(self.lrs))
        if not self.lrs or any(lr <= 0 for lr in self.lrs):
            raise ValueError(f"recipe: learning rates must be positive, got {self.lrs}")
        if self.epochs < 1 or self.batch_size < 1 or self.max_length < 2:
            raise ValueError(f"recipe: epochs, batch_size must be >= 1 and max_length >= 2 ({self})")

    def to_dict(self) -> dict:
        d = asdict(self)
        d["lrs"] = list(self.lrs)
        return d


def lr_name(lr: float) -> str:
    """``2e-05`` -> ``lr=2e-05`` (the folder name of a learning-rate unit)."""
    return f"lr={lr:g}"


def lora_targets(model) -> list[str] | None:
    """Attention projections to adapt: ours for the known families, else peft's own default."""
    return LORA_TARGETS.get(getattr(model.config, "model_type", ""))


# ---------------------------------------------------------------------------------------------
# training examples


def _gold_index(task, doc, choices: list[str]) -> int:
    gold = task.doc_to_text(doc) if task.multiple_input else task.doc_to_target(doc)
    if isinstance(gold, list):
        gold = gold[0]
    if isinstance(gold, str):
        gold = choices.index(gold) if gold in choices else int(gold)
    return int(gold)


def render(task, info: TaskInfo, doc, lm, chat_template: bool = False) -> tuple[str, str]:
    """(context, continuation) of one training document, exactly as lm-eval renders it."""
    if info.kind == "loglikelihood_rolling":
        return "", str(task.doc_to_target(doc))
    chat = lm.apply_chat_template if chat_template else None
    ctx = task.fewshot_context(doc, num_fewshot=0, apply_chat_template=chat_template,
                               fewshot_as_multiturn=chat_template, chat_template=chat,
                               gen_prefix=task.doc_to_prefix(doc))
    if info.kind == "multiple_choice":
        requests = task.construct_requests(doc=doc, ctx=ctx, metadata=(info.name, 0, 1),
                                           apply_chat_template=chat_template, chat_template=chat)
        choices = task.doc_to_choice(doc)
        context, continuation = requests[_gold_index(task, doc, choices)].args[:2]
        return context, continuation
    if info.kind == "loglikelihood":
        return ctx, str(task.doc_to_target(doc))
    target = task.doc_to_target(doc)
    if isinstance(target, list):
        target = target[0]
    if isinstance(target, int) and task.config.doc_to_choice is not None:
        target = task.doc_to_choice(doc)[target]
    return ctx, f"{task.config.target_delimiter}{target}"


def training_examples(task, info: TaskInfo, lm, max_length: int, chat_template: bool = False,
                      role: str = "train") -> list[tuple[list[int], list[int]]]:
    """(input_ids, labels) per training example; labels are -100 outside the target tokens."""
    eos = lm.tokenizer.eos_token_id
    out = []
    for doc in docs(task, role):
        context, continuation = render(task, info, doc, lm, chat_template)
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
        if info.kind == "generate_until" and eos is not None:
            cont_enc = list(cont_enc) + [eos]                 # learn to stop
        ids = list(ctx_enc) + list(cont_enc)
        labels = [-100] * len(ctx_enc) + list(cont_enc)
        if len(ids) > max_length:                             # keep the target, cut the context's start
            ids, labels = ids[-max_length:], labels[-max_length:]
        out.append((ids, labels))
    if not out:
        raise ValueError(f"task {info.name!r}: no training examples")
    return out


# ---------------------------------------------------------------------------------------------
# one learning-rate unit


@dataclass
class UnitResult:
    lr: float
    curve: list[dict] = field(default_factory=list)   # per epoch: epoch, val_score, train_loss, seconds
    best_epoch: int | None = None
    best_score: float | None = None
    adapter: str | None = None
    n_train_examples: int = 0
    seconds: float = 0.0
    config: dict = field(default_factory=dict)        # what produced it (see jobs.JobSpec.config)


def _better(a: float, b: float | None, higher_is_better: bool) -> bool:
    return b is None or (a > b if higher_is_better else a < b)


@contextmanager
def lora(base, recipe: Recipe):
    """``base`` with a fresh LoRA adapter of ``recipe`` attached (initialised from ``recipe.seed``);
    the adapter is removed again on exit, leaving ``base`` as it was."""
    import torch
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(recipe.seed)
    config = LoraConfig(r=recipe.lora_r, lora_alpha=recipe.lora_alpha, lora_dropout=recipe.lora_dropout,
                        target_modules=lora_targets(base), task_type="CAUSAL_LM")
    model = get_peft_model(base, config)
    try:
        yield model
    finally:
        model.unload()


@contextmanager
def adapter(base, adapter_dir: str | Path):
    """``base`` with the saved adapter applied (eval mode); removed again on exit."""
    from peft import PeftModel

    model = PeftModel.from_pretrained(base, str(adapter_dir))
    model.eval()
    try:
        yield model
    finally:
        model.unload()


def train_unit(base, tokenizer, examples, recipe: Recipe, lr: float, unit_dir: str | Path,
               validate: Callable[[object], float], higher_is_better: bool, config: dict | None = None,
               progress: Callable[[str], None] | None = None) -> UnitResult:
    """Train one LoRA adapter at ``lr`` for ``recipe.epochs`` epochs, validating after each.

    ``validate(peft_model) -> score`` runs the benchmark's lm-eval metric on the validation split.
    The best epoch's adapter is kept in ``unit_dir/epoch=<e>/`` and ``unit.json`` (the curve and
    ``config``) is written last. ``base`` is left without an adapter. Deterministic for
    ``recipe.seed`` (LoRA initialisation, dropout and data order).
    """
    unit_dir = Path(unit_dir)
    if unit_dir.exists():                           # an unfinished unit: start it again from scratch
        shutil.rmtree(unit_dir)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    res = UnitResult(lr=lr, n_train_examples=len(examples), config=dict(config or {}))
    t_unit = time.time()
    with lora(base, recipe) as model:
        for epoch, train_loss, train_seconds in lora_epochs(
                model, examples, epochs=recipe.epochs, batch_size=recipe.batch_size, lr=lr,
                weight_decay=recipe.weight_decay, seed=recipe.seed, pad_id=pad):
            t0 = time.time()
            score = float(validate(model))
            res.curve.append({"epoch": epoch, "val_score": score, "train_loss": train_loss,
                              "train_seconds": train_seconds, "seconds": train_seconds + time.time() - t0})
            if _better(score, res.best_score, higher_is_better):
                old = Path(res.adapter) if res.adapter else None
                target = atomic_dir(unit_dir / f"epoch={epoch}", model.save_pretrained)
                if old is not None and old != target:
                    shutil.rmtree(old, ignore_errors=True)
                res.best_epoch, res.best_score, res.adapter = epoch, score, str(target)
            if progress:
                progress(f"{lr_name(lr)} epoch={epoch} val={score:.4f}")
    res.seconds = time.time() - t_unit
    atomic_write_json(unit_dir / UNIT_FILE, asdict(res))
    return res


def read_unit(unit_dir: str | Path, config: dict | None = None) -> UnitResult | None:
    """A finished unit's record; None when it has not finished or (given ``config``) was made
    with another configuration (recipe, splits, model), so that it is redone."""
    path = Path(unit_dir) / UNIT_FILE
    if config is not None:
        data = current(path, config, field="config")
    else:
        data = read_json(path) if path.exists() else None
    if data is None:
        return None
    return UnitResult(**{k: v for k, v in data.items() if k in UnitResult.__dataclass_fields__})


def select_best(units: list[UnitResult], higher_is_better: bool) -> tuple[float, int, float]:
    """(lr, epoch, validation score) with the best validation score over every unit and epoch;
    ties go to the earlier learning rate (in recipe order) and then the earlier epoch."""
    best = None
    for u in units:
        for point in u.curve:
            if best is None or _better(point["val_score"], best[2], higher_is_better):
                best = (u.lr, point["epoch"], point["val_score"])
    if best is None:
        raise ValueError("select_best: no validation scores")
    return best
