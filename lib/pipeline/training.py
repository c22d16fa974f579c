"""The two training loops of the project, side by side, sharing one optimiser step.

- :func:`pretrain`: next-token pre-training of a tiny model from scratch (``lib.pipeline.tiny``,
  the mini world's zoo) on documents separated by EOS.
- :func:`lora_epochs`: LoRA fine-tuning on (input ids, labels) examples, one epoch per iteration,
  so the caller validates and keeps the best epoch (``lib.pipeline.finetune``).

Both are deterministic for a seed: data order and initialisation come from seeded generators.
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

STATS_FILE = "pretrain.json"     # written last into a finished model folder


class TrainingError(ValueError):
    """Invalid training request (empty corpus, bad sizes); the message names the model folder."""


def optimizer_step(loss, params, opt, sched, max_norm: float = 1.0) -> float:
    """One training step as both loops take it: backward, clip the gradient norm of ``params`` to
    ``max_norm``, step optimiser and schedule, clear gradients. Returns the loss as a float."""
    import torch

    loss.backward()
    torch.nn.utils.clip_grad_norm_(params, max_norm)
    opt.step()
    sched.step()
    opt.zero_grad(set_to_none=True)
    return float(loss.detach())


# --------------------------------------------------------------------------- pre-training
def _token_stream(tokenizer, texts: Sequence[str]) -> list[int]:
    """All documents concatenated, each followed by EOS (so models learn to end an answer)."""
    eos = tokenizer.eos_token_id
    stream: list[int] = []
    for ids in tokenizer(list(texts), add_special_tokens=False)["input_ids"]:
        stream.extend(ids)
        stream.append(eos)
    return stream


def pretrain(model, tokenizer, texts: Sequence[str], *, steps: int, batch_size: int, seq_len: int,
             lr: float, seed: int, out_dir: str | os.PathLike, warmup: float = 0.05) -> dict:
    """Pre-train ``model`` on ``texts`` (EOS between documents) and save it to ``out_dir``.

    Each step draws ``batch_size`` random windows of ``seq_len`` tokens from the concatenated
    stream (a seeded generator); AdamW with linear warm-up and cosine decay. Model, tokenizer and
    ``pretrain.json`` (the returned stats: tokens seen, parameter count, training FLOPs 6 x N x
    tokens, final loss, loss curve, seconds) are saved into a folder that appears at ``out_dir``
    only when complete.
    """
    import torch

    from .device import setup_torch

    setup_torch()
    texts = [t for t in texts if t]
    if not texts:
        raise TrainingError(f"pretrain {out_dir}: no (non-empty) texts")
    if min(steps, batch_size, seq_len) <= 0:
        raise TrainingError(f"pretrain {out_dir}: steps, batch_size and seq_len must be positive")
    max_len = getattr(model.config, "max_position_embeddings", None) or model.config.n_positions
    if seq_len > max_len:
        raise TrainingError(f"pretrain {out_dir}: seq_len {seq_len} exceeds the model's {max_len} positions")
    stream = torch.tensor(_token_stream(tokenizer, texts), dtype=torch.long)
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
    model.train()
    losses: list[float] = []
    t0 = time.time()
    for _ in range(steps):
        starts = torch.randint(0, len(stream) - seq_len, (batch_size,), generator=gen)
        batch = stream[starts[:, None] + offsets]
        loss = model(input_ids=batch, labels=batch).loss      # the model shifts labels itself
        losses.append(optimizer_step(loss, model.parameters(), opt, sched))
    model.eval()
    seconds = time.time() - t0
    n_params = sum(p.numel() for p in model.parameters())
    tokens = steps * batch_size * seq_len
    every = max(1, steps // 50)
    stats = {"family": model.config.model_type, "n_params": n_params, "tokens": tokens,
             "flops": 6.0 * n_params * tokens, "steps": steps, "batch_size": batch_size,
             "seq_len": seq_len, "lr": lr, "seed": seed, "corpus_docs": len(texts),
             "corpus_tokens": int(len(stream)), "vocab_size": len(tokenizer),
             "final_loss": float(sum(losses[-10:]) / len(losses[-10:])),
             "loss_curve": [[i, losses[i]] for i in range(0, steps, every)],
             "seconds": seconds, "tokens_per_second": tokens / max(seconds, 1e-9)}

    def save(tmp: Path) -> None:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        (tmp / STATS_FILE).write_text(json.dumps(stats, indent=1) + "\n")

    atomic_dir(out_dir, save)
    return stats


# --------------------------------------------------------------------------- LoRA fine-tuning
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


def lora_epochs(model, examples: list[tuple[list[int], list[int]]], *, epochs: int, batch_size: int,
                lr: float, weight_decay: float, seed: int, pad_id: int) -> Iterator[tuple[int, float, float]]:
    """Train the trainable (LoRA) parameters of ``model``; yields ``(epoch, mean train loss,
    seconds)`` after each epoch with the model in eval mode (the caller validates, then the next
    epoch resumes training). AdamW with a linear decay to zero over all epochs; the data order of
    every epoch comes from a generator seeded with ``seed``."""
    import torch

    device = next(model.parameters()).device
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay)
    total = math.ceil(len(examples) / batch_size) * epochs
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: max(0.0, 1 - s / total))
    gen = torch.Generator().manual_seed(seed)
    for epoch in range(1, epochs + 1):
        t0 = time.time()
        model.train()
        order = torch.randperm(len(examples), generator=gen).tolist()
        losses = []
        for ids, labels, mask in _batches(examples, order, batch_size, pad_id):
            loss = model(input_ids=ids.to(device), attention_mask=mask.to(device), labels=labels.to(device)).loss
            losses.append(optimizer_step(loss, params, opt, sched))
        model.eval()
        yield epoch, sum(losses) / len(losses), time.time() - t0
