"""Tiny causal language models built offline: tokenizer, architecture, pre-training, smoke world.

Primitives (used by the smoke profile below and by ``lib.miniworld``):

- :func:`train_tokenizer`: a byte-level BPE tokenizer trained with the ``tokenizers`` library,
  wrapped as a ``transformers.PreTrainedTokenizerFast`` with bos/eos/pad/unk special tokens.
- :func:`make_model`: a randomly initialised ``llama``, ``gpt2`` or ``gpt_neox`` model (three
  architectures, so LoRA target modules differ as they do for hub models).
- :func:`pretrain`: next-token pre-training on documents separated by EOS, deterministic for a
  seed, saved with ``save_pretrained`` into a temporary folder that is renamed into place only
  when complete (a half-written model folder is never loaded).

:func:`build` is the ``smoke`` profile's prepare hook: it builds (cached) three tiny models and
three local lm-eval tasks (multiple choice, generative, perplexity corpus) and records their
metadata in the results store.
"""

from __future__ import annotations

import json
import math
import os
import random
import shutil
import tempfile
import time
from pathlib import Path
from typing import Iterable, Sequence

FAMILIES = ("llama", "gpt2", "gpt_neox")
SPECIAL_TOKENS = {"bos_token": "<s>", "eos_token": "</s>", "pad_token": "<pad>", "unk_token": "<unk>"}
STATS_FILE = "pretrain.json"     # written last into a finished model folder


class TinyError(ValueError):
    """Invalid request for a tiny model (unknown family, bad sizes, empty corpus)."""


# ---------------------------------------------------------------------------------------------
# tokenizer


def train_tokenizer(texts: Iterable[str], vocab_size: int, seed: int = 0):
    """Train a byte-level BPE tokenizer on ``texts``; returns a ``PreTrainedTokenizerFast``.

    Byte-level BPE never produces unknown tokens and decodes spaces exactly, which generative
    exact-match scoring needs. BPE training is deterministic for the same texts and vocabulary
    size; ``seed`` is accepted for a uniform interface (and recorded) but does not change it.
    ``vocab_size`` must exceed the 256 byte symbols plus the four special tokens.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    texts = [t for t in texts if t]
    if not texts:
        raise TinyError("train_tokenizer: no (non-empty) texts to train on")
    if vocab_size < 256 + len(SPECIAL_TOKENS) + 1:
        raise TinyError(f"train_tokenizer: vocab_size {vocab_size} too small for byte-level BPE "
                        f"(need > {256 + len(SPECIAL_TOKENS)})")
    tok = Tokenizer(models.BPE(unk_token=SPECIAL_TOKENS["unk_token"]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, show_progress=False,
                                  special_tokens=list(SPECIAL_TOKENS.values()),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, **SPECIAL_TOKENS)
    fast.init_kwargs["tiny_seed"] = seed
    return fast


# ---------------------------------------------------------------------------------------------
# model


def make_model(family: str, tokenizer, *, d_model: int, n_layers: int, n_heads: int,
               d_ff: int | None = None, max_len: int = 256, seed: int = 0):
    """A randomly initialised causal LM of ``family`` in {"llama", "gpt2", "gpt_neox"}.

    Sizes: ``d_model`` hidden width, ``n_layers`` blocks, ``n_heads`` attention heads (must divide
    ``d_model``), ``d_ff`` feed-forward width (default 4 x d_model), ``max_len`` positions. Dropout
    is off (tiny models, short training). Initialisation is deterministic for ``seed``.
    """
    import torch
    import transformers as tf

    if family not in FAMILIES:
        import difflib
        close = difflib.get_close_matches(family, FAMILIES, n=1)
        raise TinyError(f"make_model: unknown family {family!r}"
                        f"{f' (did you mean {close[0]!r}?)' if close else ''}; known: {list(FAMILIES)}")
    if min(d_model, n_layers, n_heads, max_len) <= 0 or d_model % n_heads:
        raise TinyError(f"make_model: invalid sizes d_model={d_model}, n_layers={n_layers}, "
                        f"n_heads={n_heads}, max_len={max_len} (n_heads must divide d_model)")
    d_ff = d_ff or 4 * d_model
    ids = dict(vocab_size=len(tokenizer), bos_token_id=tokenizer.bos_token_id,
               eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    if family == "llama":
        config = tf.LlamaConfig(hidden_size=d_model, intermediate_size=d_ff, num_hidden_layers=n_layers,
                                num_attention_heads=n_heads, num_key_value_heads=n_heads,
                                max_position_embeddings=max_len, tie_word_embeddings=True,
                                attention_dropout=0.0, **ids)
        cls = tf.LlamaForCausalLM
    elif family == "gpt2":
        config = tf.GPT2Config(n_embd=d_model, n_inner=d_ff, n_layer=n_layers, n_head=n_heads,
                               n_positions=max_len, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                               **ids)
        cls = tf.GPT2LMHeadModel
    else:
        config = tf.GPTNeoXConfig(hidden_size=d_model, intermediate_size=d_ff, num_hidden_layers=n_layers,
                                  num_attention_heads=n_heads, max_position_embeddings=max_len,
                                  attention_dropout=0.0, hidden_dropout=0.0, tie_word_embeddings=False,
                                  **ids)
        cls = tf.GPTNeoXForCausalLM
    torch.manual_seed(seed)
    model = cls(config)
    model.eval()
    return model


def n_parameters(model) -> int:
    return sum(p.numel() for p in model.parameters())


# ---------------------------------------------------------------------------------------------
# pre-training


def _token_stream(tokenizer, texts: Sequence[str]) -> list[int]:
    """All documents concatenated, each followed by EOS (so models learn to end an answer)."""
    eos = tokenizer.eos_token_id
    stream: list[int] = []
    for ids in tokenizer(list(texts), add_special_tokens=False)["input_ids"]:
        stream.extend(ids)
        stream.append(eos)
    return stream


def _atomic_save_dir(out_dir: Path, save) -> None:
    """Call ``save(tmp)`` on a temporary sibling folder, then rename it to ``out_dir``."""
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", suffix=".tmp", dir=out_dir.parent))
    try:
        save(tmp)
        if out_dir.exists():
            shutil.rmtree(out_dir)
        os.replace(tmp, out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def pretrain(model, tokenizer, texts: Sequence[str], *, steps: int, batch_size: int, seq_len: int,
             lr: float, seed: int, out_dir: str | os.PathLike, warmup: float = 0.05) -> dict:
    """Pre-train ``model`` on ``texts`` (EOS between documents) and save it to ``out_dir``.

    Each step draws ``batch_size`` random windows of ``seq_len`` tokens from the concatenated
    stream (a seeded generator, so the run is deterministic for ``seed``); AdamW with linear
    warm-up and cosine decay. The model and tokenizer are saved into a temporary folder renamed to
    ``out_dir`` at the end, together with ``pretrain.json`` (the returned stats): tokens seen,
    parameter count, approximate training FLOPs (6 x N x tokens), final loss, loss curve, seconds.
    """
    import torch

    texts = [t for t in texts if t]
    if not texts:
        raise TinyError(f"pretrain {out_dir}: no (non-empty) texts")
    if min(steps, batch_size, seq_len) <= 0:
        raise TinyError(f"pretrain {out_dir}: steps, batch_size and seq_len must be positive")
    max_len = getattr(model.config, "max_position_embeddings", None) or model.config.n_positions
    if seq_len > max_len:
        raise TinyError(f"pretrain {out_dir}: seq_len {seq_len} exceeds the model's {max_len} positions")
    out_dir = Path(out_dir)
    stream = torch.tensor(_token_stream(tokenizer, texts), dtype=torch.long)
    if len(stream) <= seq_len + 1:
        raise TinyError(f"pretrain {out_dir}: corpus of {len(stream)} tokens is shorter than seq_len {seq_len}")
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
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        losses.append(float(loss.detach()))
    model.eval()
    seconds = time.time() - t0
    n_params = n_parameters(model)
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

    _atomic_save_dir(out_dir, save)
    return stats


def built(out_dir: str | os.PathLike) -> dict | None:
    """The stats of a finished model folder written by :func:`pretrain`, or None if not built."""
    path = Path(out_dir) / STATS_FILE
    return json.loads(path.read_text()) if path.exists() else None


def load(out_dir: str | os.PathLike):
    """(model, tokenizer) of a folder written by :func:`pretrain` (float32, eval mode)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if built(out_dir) is None:
        raise TinyError(f"{out_dir} is not a finished tiny model folder (no {STATS_FILE})")
    model = AutoModelForCausalLM.from_pretrained(out_dir, dtype=torch.float32)
    model.eval()
    return model, AutoTokenizer.from_pretrained(out_dir)
