"""The two training loops of the project, sharing one optimiser step: :func:`pretrain` (a tiny
model from scratch, the mini world's zoo) and :func:`train_epochs` (fine-tuning, one epoch per
iteration, so the caller validates and keeps the best epoch). Both are deterministic for a seed.
"""

from __future__ import annotations

import json
import math
import os
import random
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

from ..util import atomic_dir
from .device import free_memory

STATS_FILE = "pretrain.json"     # written last into a finished model folder


class TrainingError(ValueError):
    """Invalid training request (empty corpus, bad sizes); the message names the model folder."""


def optimizer_step(loss, params, opt, sched, max_norm: float = 1.0) -> float:
    """One training step as both loops take it: backward (``loss`` a tensor; a float means the
    gradients are already accumulated, micro-batch by micro-batch), clip the gradient norm of
    ``params`` to ``max_norm``, step optimiser and schedule, clear gradients. Returns the loss."""
    import torch

    if isinstance(loss, torch.Tensor):
        loss.backward()
        loss = float(loss.detach())
    torch.nn.utils.clip_grad_norm_(params, max_norm)
    opt.step()
    sched.step()
    opt.zero_grad(set_to_none=True)
    return float(loss)


# --------------------------------------------------------------------------- pre-training
def _token_stream(tokenizer, texts: Sequence[str], prompt_chars: Sequence[int] | None = None
                  ) -> tuple[list[int], list[bool]]:
    """All documents concatenated, each followed by EOS (so models learn to end an answer), and
    whether each token carries loss (:func:`document_examples`)."""
    examples = document_examples(tokenizer, texts, prompt_chars, max_len=None)
    return [t for ids, _ in examples for t in ids], [y != -100 for _, labels in examples for y in labels]


def document_starts(ids: Sequence[int], eos: int, seq_len: int):
    """Positions in the token stream where a document starts (after an EOS) and a full window of
    ``seq_len`` tokens still fits."""
    import torch

    last = len(ids) - seq_len - 1
    return torch.tensor([0] + [i + 1 for i, t in enumerate(ids) if t == eos and i + 1 <= last], dtype=torch.long)


def pretrain(model, tokenizer, texts: Sequence[str], *, steps: int, batch_size: int, seq_len: int,
             lr: float, seed: int, out_dir: str | os.PathLike, warmup: float = 0.05,
             prompt_chars: Sequence[int] | None = None) -> dict:
    """Pre-train ``model`` on ``texts`` (EOS between documents; ``prompt_chars``: as in
    :func:`document_examples`) and save it to ``out_dir`` with its stats (returned).

    Each step draws ``batch_size`` windows of ``seq_len`` tokens from the concatenated stream, each
    starting where a document starts (a seeded generator), so a document is learnt whole rather
    than cut at a random point; AdamW with linear warm-up and cosine decay."""
    import torch

    from .device import setup_torch

    setup_torch()
    keep = [i for i, t in enumerate(texts) if t]
    texts = [texts[i] for i in keep]
    prompt_chars = None if prompt_chars is None else [prompt_chars[i] for i in keep]
    if not texts:
        raise TrainingError(f"pretrain {out_dir}: no (non-empty) texts")
    if min(steps, batch_size, seq_len) <= 0:
        raise TrainingError(f"pretrain {out_dir}: steps, batch_size and seq_len must be positive")
    max_len = getattr(model.config, "max_position_embeddings", None) or model.config.n_positions
    if seq_len > max_len:
        raise TrainingError(f"pretrain {out_dir}: seq_len {seq_len} exceeds the model's {max_len} positions")
    ids, scored = _token_stream(tokenizer, texts, prompt_chars)
    stream = torch.tensor(ids, dtype=torch.long)
    masked = None if all(scored) else ~torch.tensor(scored, dtype=torch.bool)
    if len(stream) <= seq_len + 1:
        raise TrainingError(f"pretrain {out_dir}: corpus of {len(stream)} tokens is shorter than seq_len {seq_len}")
    random.seed(seed)
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01, betas=(0.9, 0.95))
    n_warm = max(1, int(warmup * steps))

    def schedule(step: int) -> float:
        if step < n_warm:
            return (step + 1) / n_warm
        return 0.5 * (1 + math.cos(math.pi * (step - n_warm) / max(1, steps - n_warm)))

    sched = torch.optim.lr_scheduler.LambdaLR(opt, schedule)
    offsets = torch.arange(seq_len)
    starts = document_starts(ids, tokenizer.eos_token_id, seq_len)
    model.train()
    losses: list[float] = []
    t0 = time.time()
    for _ in range(steps):
        window = starts[torch.randint(0, len(starts), (batch_size,), generator=gen)][:, None] + offsets
        batch = stream[window]
        labels = batch if masked is None else batch.masked_fill(masked[window], -100)
        loss = model(input_ids=batch, labels=labels).loss     # the model shifts labels itself
        losses.append(optimizer_step(loss, model.parameters(), opt, sched))
    model.eval()
    run = {"steps": steps, "batch_size": batch_size, "seq_len": seq_len, "lr": lr, "seed": seed,
           "corpus_docs": len(texts), "corpus_tokens": int(len(stream))}
    curve = [[i, losses[i]] for i in range(0, steps, max(1, steps // 50))]
    return _save_trained(out_dir, model, tokenizer, t0, steps * batch_size * seq_len, run,
                         float(sum(losses[-10:]) / len(losses[-10:])), curve)


def _save_trained(out_dir, model, tokenizer, t0: float, tokens: int, run: dict, final_loss: float,
                  curve: list) -> dict:
    """Save a trained tiny model with its stats (``flops``: 6 x parameters x tokens) in ``pretrain.json``."""
    seconds = time.time() - t0
    n_params = sum(p.numel() for p in model.parameters())
    stats = {"family": model.config.model_type, "n_params": n_params, "tokens": tokens,
             "flops": 6.0 * n_params * tokens, **run, "vocab_size": len(tokenizer), "final_loss": final_loss,
             "loss_curve": curve, "seconds": seconds, "tokens_per_second": tokens / max(seconds, 1e-9)}
    return save_model(out_dir, model, tokenizer, STATS_FILE, stats)


def save_model(out_dir: str | os.PathLike, model, tokenizer, record_file: str, record: dict) -> dict:
    """Save ``model`` and ``tokenizer`` into ``out_dir`` in one atomic step, with ``record`` as JSON in
    ``record_file`` (written last: a folder that has it is whole). Returns ``record``."""
    def write(tmp: Path) -> None:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        (tmp / record_file).write_text(json.dumps(record, indent=1) + "\n")

    atomic_dir(out_dir, write)
    return record


def document_examples(tokenizer, texts: Sequence[str], prompt_chars: Sequence[int] | None = None,
                      max_len: int | None = 64) -> list[tuple[list[int], list[int]]]:
    """(ids, labels) of whole documents, each followed by EOS and cut to ``max_len`` tokens; the
    labels leave out a document's first ``prompt_chars[i]`` characters (a formatted example's
    prompt: loss on its answer only)."""
    prompt_chars = [0] * len(texts) if prompt_chars is None else list(prompt_chars)
    if len(prompt_chars) != len(texts):
        raise TrainingError(f"prompt_chars has {len(prompt_chars)} entries for {len(texts)} texts")
    enc = tokenizer(list(texts), add_special_tokens=False, return_offsets_mapping=True)
    out = []
    for i, ids in enumerate(enc["input_ids"]):
        labels = [t if end > prompt_chars[i] else -100 for t, (_, end) in zip(ids, enc["offset_mapping"][i])]
        out.append(((list(ids) + [tokenizer.eos_token_id])[:max_len], (labels + [tokenizer.eos_token_id])[:max_len]))
    return out


def posttrain(model, tokenizer, texts: Sequence[str], *, epochs: int, batch_size: int, lr: float, seed: int,
              out_dir: str | os.PathLike, prompt_chars: Sequence[int] | None = None, max_len: int = 64) -> dict:
    """Continue training every parameter of a pre-trained ``model`` on whole documents
    (:func:`document_examples`; the zoo's last phase of pre-training, where preparation happens)
    through :func:`train_epochs` (weight decay 0.01), and save it as :func:`pretrain` does."""
    from .device import setup_torch

    setup_torch()
    if not texts:
        raise TrainingError(f"posttrain {out_dir}: no texts")
    examples = document_examples(tokenizer, texts, prompt_chars, max_len)
    for p in model.parameters():
        p.requires_grad_(True)
    t0 = time.time()
    curve = [point["train_loss"] for point in train_epochs(model, examples, epochs=epochs, batch_size=batch_size,
                                                          lr=lr, weight_decay=0.01, seed=seed,
                                                          pad_id=tokenizer.pad_token_id)]
    run = {"epochs": epochs, "batch_size": batch_size, "lr": lr, "seed": seed, "documents": len(examples)}
    return _save_trained(out_dir, model, tokenizer, t0, epochs * sum(len(ids) for ids, _ in examples), run,
                         float(curve[-1]), [[i + 1, v] for i, v in enumerate(curve)])


# --------------------------------------------------------------------------- fine-tuning
def _pad(chunk, pad_id: int):
    import torch

    width = max(len(ids) for ids, _ in chunk)
    ids = torch.full((len(chunk), width), pad_id, dtype=torch.long)
    labels = torch.full((len(chunk), width), -100, dtype=torch.long)
    mask = torch.zeros((len(chunk), width), dtype=torch.long)
    for r, (x, y) in enumerate(chunk):
        ids[r, :len(x)] = torch.tensor(x)
        labels[r, :len(y)] = torch.tensor(y)
        mask[r, :len(x)] = 1
    return ids, labels, mask


def n_predicted(chunk) -> int:
    """Tokens that carry loss in ``chunk`` of (ids, labels): labels after the first position
    (a causal LM predicts position t from the positions before it)."""
    return sum(sum(1 for y in labels[1:] if y != -100) for _, labels in chunk)


def is_oom(exc: BaseException) -> bool:
    """An accelerator out-of-memory error (torch raises ``OutOfMemoryError``; some CUDA
    libraries raise a RuntimeError that says so)."""
    import torch

    if isinstance(exc, torch.OutOfMemoryError):
        return True
    text = str(exc)
    return isinstance(exc, RuntimeError) and ("out of memory" in text or "CUBLAS_STATUS_ALLOC_FAILED" in text)


def _checkpointing_on(model) -> bool:
    """Switch gradient checkpointing on (non-reentrant, so frozen inputs need no gradient) for the
    transformers model inside ``model`` (a PeftModel or the model itself). False when it is
    already on or the architecture cannot."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    if getattr(base, "is_activation_checkpointing", False) or \
            not getattr(base, "supports_gradient_checkpointing", False):
        return False
    base.activation_checkpointing_enable({"use_reentrant": False})
    return True


def random_states() -> dict:
    """Every random state training and validation may draw from: torch's (CPU and accelerators),
    Python's and numpy's global generators (in forms ``torch.load(weights_only=True)`` accepts)."""
    import numpy as np
    import torch

    kind, keys, pos, has_gauss, gauss = np.random.get_state()
    return {"torch": torch.get_rng_state(),
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
            "python": [random.getstate()[0], list(random.getstate()[1]), random.getstate()[2]],
            "numpy": [kind, torch.from_numpy(keys.astype("int64")), int(pos), int(has_gauss), float(gauss)]}


def set_random_states(states: dict) -> None:
    import numpy as np
    import torch

    torch.set_rng_state(states["torch"])
    if states["cuda"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["cuda"])
    version, internal, gauss = states["python"]
    random.setstate((version, tuple(internal), gauss))
    kind, keys, pos, has_gauss, cached = states["numpy"]
    np.random.set_state((kind, keys.numpy().astype(np.uint32), pos, has_gauss, cached))


def batch_loss(model, batch, pad_id: int, micro_batch_size: int, device, backward: bool = True) -> float:
    """Loss of one batch of (ids, labels) examples, the mean over its predicted tokens, computed in
    micro-batches of ``micro_batch_size`` rows (0: all rows at once); with ``backward`` the
    gradients accumulate in the parameters.

    With one micro-batch this is the model's own mean loss. With several, each micro-batch's loss
    is its summed token loss divided by the token count of the whole batch
    (``num_items_in_batch``), so the accumulated gradient equals the full batch's gradient.
    """
    micro = micro_batch_size or len(batch)
    chunks = [batch[i:i + micro] for i in range(0, len(batch), micro)]
    extra = {} if len(chunks) == 1 else {"num_items_in_batch": max(1, n_predicted(batch))}
    total = 0.0
    for chunk in chunks:
        ids, labels, mask = _pad(chunk, pad_id)
        loss = model(input_ids=ids.to(device), attention_mask=mask.to(device), labels=labels.to(device),
                     use_cache=False, **extra).loss
        if backward:
            loss.backward()
        total += float(loss.detach())
    return total


def train_epochs(model, examples: list[tuple[list[int], list[int]]], *, epochs: int, batch_size: int,
                lr: float, weight_decay: float, seed: int, pad_id: int, micro_batch_size: int = 0,
                oom_backoff: bool = True, log=None, resume: dict | None = None, on_step=None) -> Iterator[dict]:
    """Train the parameters of ``model`` that require a gradient; yields after each epoch, with the
    model in eval mode (the caller validates), ``epoch``, ``train_loss`` (mean batch loss),
    ``train_seconds``, ``micro_batch_size`` (in use at the epoch's end) and ``state``, a function
    returning the loop's state (optimiser, schedule, data-order generator, micro-batch): given back
    as ``resume`` (the trainable parameters restored by the caller) the loop goes on exactly as
    without the interruption.

    AdamW with a linear decay to zero, no warm-up, gradient norm clipped to 1 (transformers'
    Trainer defaults); each epoch's data order from a generator seeded with ``seed``. A batch runs
    in micro-batches of ``micro_batch_size`` rows (0: whole) with gradient accumulation. With
    ``oom_backoff`` an out-of-memory error halves the micro-batch and redoes the step from the same
    random state, and when one row does not fit switches gradient checkpointing on: the effective
    batch stays the recipe's (transformers' ``auto_find_batch_size`` halves the batch instead).
    ``log`` hears about each back-off; ``on_step(step, loss, lr)`` about each optimiser step (it
    only watches)."""
    import torch

    device = next(model.parameters()).device
    steps = math.ceil(len(examples) / batch_size) * epochs
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: max(0.0, 1 - s / steps))
    gen = torch.Generator().manual_seed(seed)
    micro = micro_batch_size if 0 < micro_batch_size < batch_size else 0
    start = 0
    if resume is not None:
        opt.load_state_dict(resume["optimizer"])
        sched.load_state_dict(resume["scheduler"])
        gen.set_state(resume["generator"])
        start, micro = int(resume["epoch"]), int(resume["micro"])

    def loop_state(epoch: int) -> dict:
        return {"epoch": epoch, "optimizer": opt.state_dict(), "scheduler": sched.state_dict(),
                "generator": gen.get_state(), "micro": micro}

    for epoch in range(start + 1, epochs + 1):
        t0 = time.time()
        model.train()
        order = torch.randperm(len(examples), generator=gen).tolist()
        losses = []
        for i in range(0, len(order), batch_size):
            batch = [examples[j] for j in order[i:i + batch_size]]
            state = random_states() if oom_backoff else None
            while True:
                try:
                    loss = batch_loss(model, batch, pad_id, micro, device)
                    break
                except Exception as exc:
                    if not (oom_backoff and is_oom(exc)):
                        raise
                    opt.zero_grad(set_to_none=True)
                    del exc
                    free_memory()
                    set_random_states(state)
                    if (micro or len(batch)) > 1:
                        micro = max(1, (micro or len(batch)) // 2)
                        note = f"micro-batch halved to {micro} (effective batch stays {batch_size})"
                    elif _checkpointing_on(model):
                        note = "one row does not fit: gradient checkpointing switched on"
                    else:
                        raise
                    if log:
                        log(f"out of memory: {note}")
            rate = sched.get_last_lr()[0]
            losses.append(optimizer_step(loss, params, opt, sched))
            if on_step:
                on_step(sched.last_epoch, losses[-1], rate)
        model.eval()
        yield {"epoch": epoch, "train_loss": sum(losses) / len(losses), "train_seconds": time.time() - t0,
               "micro_batch_size": micro or batch_size, "state": lambda epoch=epoch: loop_state(epoch)}


def mean_loss(model, examples: list[tuple[list[int], list[int]]], *, batch_size: int, pad_id: int) -> float:
    """Mean loss per predicted token over ``examples`` (eval mode, no gradients): the validation
    loss by which the paper's trainer chose its best epoch. Batches of ``batch_size`` examples in
    their given order; an out-of-memory error halves the batch."""
    import torch

    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    size, i, total, count = batch_size, 0, 0.0, 0
    with torch.no_grad():
        while i < len(examples):
            chunk = examples[i:i + size]
            try:
                n = n_predicted(chunk)
                if n:
                    total += batch_loss(model, chunk, pad_id, 0, device, backward=False) * n
                    count += n
                i += len(chunk)
            except Exception as exc:
                if not is_oom(exc) or size <= 1:
                    raise
                del exc
                free_memory()
                size = max(1, size // 2)
    model.train(was_training)
    if not count:
        raise TrainingError("mean_loss: no predicted tokens in the examples")
    return total / count
