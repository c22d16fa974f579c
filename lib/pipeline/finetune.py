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

import math
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

from .. import store
from .device import optimizer_step
from .tasks import TaskInfo, docs

UNIT_FILE = "unit.json"
# LoRA targets of the tiny families (the paper's hub families use peft's defaults for the same names)
LORA_TARGETS = {"llama": ["q_proj", "v_proj"], "gpt2": ["c_attn"], "gpt_neox": ["query_key_value"],
                "qwen2": ["q_proj", "v_proj"], "gemma": ["q_proj", "v_proj"], "gemma2": ["q_proj", "v_proj"]}


@dataclass(frozen=True)
class Recipe:
    """The fixed fine-tuning recipe (paper: LoRA r 8 / alpha 32 / dropout 0.1, 5 epochs,
    learning rates {1e-5, 2e-5, 5e-5})."""
    lrs: tuple[float, ...] = (1e-5, 2e-5, 5e-5)
    epochs: int = 5
    lora_r: int = 8
    lora_alpha: int = 32
    lora_dropout: float = 0.1
    batch_size: int = 8
    eval_batch_size: int = 32
    max_length: int = 1024
    weight_decay: float = 0.0
    seed: int = 0

    def __post_init__(self):
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


def _batches(examples, order, batch_size: int, pad_id: int):
    import torch

    for i in range(0, len(order), batch_size):
        chunk = [examples[j] for j in order[i:i + batch_size]]
        width = max(len(ids) for ids, _ in chunk)
        ids = torch.full((len(chunk), width), pad_id, dtype=torch.long)
        labels = torch.full((len(chunk), width), -100, dtype=torch.long)
        mask = torch.zeros((len(chunk), width), dtype=torch.long)
        for r, (x, y) in enumerate(chunk):
            ids[r, :len(x)] = torch.tensor(x)
            labels[r, :len(y)] = torch.tensor(y)
            mask[r, :len(x)] = 1
        yield ids, labels, mask


def _save_adapter(peft_model, target: Path) -> None:
    from .tiny import _atomic_save_dir

    _atomic_save_dir(target, peft_model.save_pretrained)


def train_unit(base, tokenizer, examples, recipe: Recipe, lr: float, unit_dir: str | Path,
               validate: Callable[[object], float], higher_is_better: bool,
               progress: Callable[[str], None] | None = None, config: dict | None = None):
    """Train one LoRA adapter at ``lr`` for ``recipe.epochs`` epochs, validating after each.

    ``validate(peft_model) -> score`` runs the benchmark's lm-eval metric on the validation split.
    Returns (UnitResult, base model with the adapter removed). Deterministic for ``recipe.seed``:
    LoRA initialisation, dropout and data order come from generators seeded per unit.
    """
    import torch
    from peft import LoraConfig, get_peft_model

    unit_dir = Path(unit_dir)
    if unit_dir.exists():                           # an unfinished unit: start it again from scratch
        shutil.rmtree(unit_dir)
    device = next(base.parameters()).device
    torch.manual_seed(recipe.seed)
    lora_config = LoraConfig(r=recipe.lora_r, lora_alpha=recipe.lora_alpha, lora_dropout=recipe.lora_dropout,
                             target_modules=lora_targets(base), task_type="CAUSAL_LM")
    model = get_peft_model(base, lora_config)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=recipe.weight_decay)
    steps_per_epoch = math.ceil(len(examples) / recipe.batch_size)
    total = steps_per_epoch * recipe.epochs
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: max(0.0, 1 - s / total))   # linear decay
    gen = torch.Generator().manual_seed(recipe.seed)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    res = UnitResult(lr=lr, n_train_examples=len(examples), config=dict(config or {}))
    t_unit = time.time()
    for epoch in range(1, recipe.epochs + 1):
        t0 = time.time()
        model.train()
        order = torch.randperm(len(examples), generator=gen).tolist()
        losses = []
        for ids, labels, mask in _batches(examples, order, recipe.batch_size, pad):
            loss = model(input_ids=ids.to(device), attention_mask=mask.to(device), labels=labels.to(device)).loss
            losses.append(optimizer_step(loss, params, opt, sched))
        model.eval()
        train_seconds = time.time() - t0
        score = float(validate(model))
        res.curve.append({"epoch": epoch, "val_score": score, "train_loss": sum(losses) / len(losses),
                          "train_seconds": train_seconds, "seconds": time.time() - t0})
        if _better(score, res.best_score, higher_is_better):
            old = Path(res.adapter) if res.adapter else None
            target = unit_dir / f"epoch={epoch}"
            _save_adapter(model, target)
            if old is not None and old != target:
                shutil.rmtree(old, ignore_errors=True)
            res.best_epoch, res.best_score, res.adapter = epoch, score, str(target)
        if progress:
            progress(f"{lr_name(lr)} epoch={epoch} val={score:.4f}")
    res.seconds = time.time() - t_unit
    store.atomic_write_json(unit_dir / UNIT_FILE, asdict(res))
    return res, model.unload()


def read_unit(unit_dir: str | Path, config: dict | None = None) -> UnitResult | None:
    """A finished unit's record; None when it has not finished or (given ``config``) was made
    with another configuration (recipe, splits, model), so that it is redone."""
    path = Path(unit_dir) / UNIT_FILE
    if not path.exists():
        return None
    data = store.read_json(path)
    unit = UnitResult(**{k: v for k, v in data.items() if k in UnitResult.__dataclass_fields__})
    if config is not None and store._jsonable(config) != unit.config:
        return None
    return unit


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


def with_adapter(base, adapter_dir: str | Path):
    """``base`` with the saved adapter applied (eval mode); call ``.unload()`` to get base back."""
    from peft import PeftModel

    model = PeftModel.from_pretrained(base, str(adapter_dir))
    model.eval()
    return model
