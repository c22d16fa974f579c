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

from ..params import did_you_mean

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
        raise TinyError(f"make_model: unknown family {family!r}{did_you_mean(family, FAMILIES)}; "
                        f"known: {list(FAMILIES)}")
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

    from .device import optimizer_step, setup_torch

    setup_torch()
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
        losses.append(optimizer_step(loss, model.parameters(), opt, sched))
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


# ---------------------------------------------------------------------------------------------
# the smoke world: a synthetic language, three tiny models, four local tasks

ANIMAL_SOUNDS = {"cow": "moo", "dog": "woof", "cat": "meow", "duck": "quack", "sheep": "baa",
                 "pig": "oink", "horse": "neigh", "lion": "roar", "owl": "hoot", "snake": "hiss",
                 "bee": "buzz", "mouse": "squeak", "frog": "croak", "crow": "caw", "wolf": "howl",
                 "goat": "bleat"}
OBJECT_COLOURS = {"grass": "green", "sky": "blue", "snow": "white", "coal": "black", "blood": "red",
                  "sun": "yellow", "leaf": "green", "sea": "blue", "milk": "white", "ink": "black",
                  "cherry": "red", "lemon": "yellow", "plum": "purple", "grape": "purple",
                  "rose": "pink", "mud": "brown", "bark": "brown", "lime": "green"}
NUMBERS = ["one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven",
           "twelve"]
_PLACES = ["farm", "river", "hill", "town", "forest", "field", "road", "house"]
_VERBS = ["walks to", "runs to", "looks at", "sleeps near", "waits by", "sings at"]
_TIMES = ["in the morning", "at night", "after lunch", "before dawn", "in the rain"]

# name: (family, d_model, n_layers, n_heads, pre-training steps): different sizes and budgets, so
# the models genuinely differ in what they know before fine-tuning.
SMOKE_MODELS = {
    "tiny-llama-s": ("llama", 48, 2, 4, 150),
    "tiny-llama-m": ("llama", 64, 3, 4, 300),
    "tiny-gpt2-s": ("gpt2", 48, 2, 4, 200),
    "tiny-neox-m": ("gpt_neox", 64, 2, 4, 300),
}
SMOKE_TASKS = {   # name: (category, metric, filter, kind)
    "smoke_sounds": ("Commonsense Reasoning", "acc", None, "multiple_choice"),
    "smoke_count": ("Math", "acc_norm", None, "multiple_choice"),
    "smoke_colours": ("Question Answering", "exact_match", "remove_whitespace", "generate_until"),
    "smoke_corpus": ("Perplexity", "bits_per_byte", None, "loglikelihood_rolling"),
}
SMOKE_VERSION = 3      # bump when the world below changes (invalidates the cache)


def _filler(rng: random.Random) -> str:
    who = rng.choice(list(ANIMAL_SOUNDS))
    return f"the {who} {rng.choice(_VERBS)} the {rng.choice(_PLACES)} ."


def smoke_pretraining_texts(seed: int = 0, n_docs: int = 600) -> list[str]:
    """Documents of the synthetic language: filler sentences, counting, and *some* of the facts
    (animal sounds, object colours); models that train longer or are larger memorise more of them."""
    rng = random.Random(seed)
    known_sounds = list(ANIMAL_SOUNDS)[: len(ANIMAL_SOUNDS) * 3 // 4]
    known_colours = list(OBJECT_COLOURS)[: len(OBJECT_COLOURS) * 3 // 4]
    docs = []
    for _ in range(n_docs):
        parts = []
        for _ in range(rng.randint(3, 6)):
            r = rng.random()
            if r < 0.35:
                parts.append(_filler(rng))
            elif r < 0.55:
                a = rng.choice(known_sounds)
                parts.append(f"the {a} says {ANIMAL_SOUNDS[a]} .")
            elif r < 0.7:
                o = rng.choice(known_colours)
                parts.append(f"the {o} is {OBJECT_COLOURS[o]} .")
            elif r < 0.75:      # a few question-answer lines, so the task format is not unheard of
                if rng.random() < 0.5:
                    a = rng.choice(known_sounds)
                    parts.append(f"Question: what does the {a} say?\nAnswer: {ANIMAL_SOUNDS[a]}\n")
                else:
                    o = rng.choice(known_colours)
                    parts.append(f"the {o} is {OBJECT_COLOURS[o]} .\nQuestion: what colour is the {o}?\n"
                                 f"Answer: {OBJECT_COLOURS[o]}\n")
            else:
                i = rng.randrange(len(NUMBERS) - 3)
                parts.append(" ".join(NUMBERS[i:i + rng.randint(3, 5)]) + " .")
        docs.append(" ".join(parts))
    return docs


def _mc_records(rng: random.Random, n: int, facts: list[tuple[str, str, list[str]]]) -> list[dict]:
    """``facts``: (question, answer, answer pool); 4 choices = answer + 3 distinct distractors."""
    out = []
    for i in range(n):
        q, a, pool = facts[i % len(facts)]
        distractors = rng.sample([p for p in pool if p != a], 3)
        choices = distractors + [a]
        rng.shuffle(choices)
        out.append({"query": q, "choices": choices, "label": choices.index(a)})
    rng.shuffle(out)
    return out


def smoke_task_splits(seed: int = 0) -> dict[str, dict[str, list[dict]]]:
    """Records of the four smoke tasks (train / validation / test): deterministic patterns that
    LoRA fine-tuning of a tiny model can learn (the test items re-ask the same facts with other
    distractors and orders)."""
    rng = random.Random(seed + 1)
    sounds = sorted(set(ANIMAL_SOUNDS.values()))
    sound_facts = [(f"Question: what does the {a} say?\nAnswer:", s, sounds) for a, s in ANIMAL_SOUNDS.items()]
    count_facts = [(f"Question: what number comes after {NUMBERS[i]}?\nAnswer:", NUMBERS[i + 1], NUMBERS)
                   for i in range(len(NUMBERS) - 1)]
    objects = list(OBJECT_COLOURS)

    def gen(n: int) -> list[dict]:
        """Read a colour off the context: two facts, then a question about one of them."""
        recs = []
        for _ in range(n):
            a, b = rng.sample(objects, 2)
            ask = rng.choice([a, b])
            recs.append({"question": f"the {a} is {OBJECT_COLOURS[a]} . the {b} is {OBJECT_COLOURS[b]} .\n"
                                     f"Question: what colour is the {ask}?\nAnswer:",
                         "answer": OBJECT_COLOURS[ask]})
        return recs

    def corpus(n: int) -> list[dict]:
        docs = []
        for _ in range(n):
            sent = [f"{rng.choice(_TIMES)} the {rng.choice(list(OBJECT_COLOURS))} near the "
                    f"{rng.choice(_PLACES)} is {rng.choice(sorted(set(OBJECT_COLOURS.values())))} ."
                    for _ in range(rng.randint(3, 5))]
            docs.append({"text": " ".join(sent)})
        return docs

    return {
        "smoke_sounds": {"train": _mc_records(rng, 192, sound_facts), "validation": _mc_records(rng, 48, sound_facts),
                         "test": _mc_records(rng, 96, sound_facts)},
        "smoke_count": {"train": _mc_records(rng, 176, count_facts), "validation": _mc_records(rng, 44, count_facts),
                        "test": _mc_records(rng, 88, count_facts)},
        "smoke_colours": {"train": gen(180), "validation": gen(36), "test": gen(72)},
        "smoke_corpus": {"train": corpus(160), "validation": corpus(24), "test": corpus(48)},
    }


def write_smoke_tasks(task_dir: str | os.PathLike, seed: int = 0) -> dict[str, Path]:
    """Write the four smoke tasks as local lm-eval tasks under ``task_dir``; returns their YAMLs."""
    from .localtasks import write_task

    out = {}
    for name, splits in smoke_task_splits(seed).items():
        category, metric, _filter, kind = SMOKE_TASKS[name]
        kw: dict = {}
        if kind == "multiple_choice":
            kw["metrics"] = ["acc", "acc_norm"]
        elif kind == "generate_until":
            kw.update(metrics=["exact_match"], until=["\n"], max_gen_toks=6)
        out[name] = write_task(task_dir, name, kind, splits, tags=["smoke"], **kw)
    return out


def _params_b(n: int) -> float:
    return n / 1e9


def build(profile: str, seed: int = 0, vocab_size: int = 512, batch_size: int = 16, seq_len: int = 64,
          lr: float = 3e-3, models: dict | None = None) -> dict:
    """The ``smoke`` profile's prepare hook: tiny models + local tasks, cached under the work dir.

    Writes ``<work>/tiny/tasks/`` (the ``include_path`` for notebook 01) and
    ``<work>/tiny/models/<name>/``, and records model metadata (family, params_b, instruct,
    pretrain_tokens_t, flops_1e21, path) and task metadata (category, metric, filter, kind) in
    the results store. A finished model folder is reused; the tasks are rewritten only when the
    world's definition changed. Returns {"models": {name: path}, "tasks": {name: yaml}}.
    """
    from .. import paths, store

    specs = models or SMOKE_MODELS
    root = paths.work_dir(profile) / "tiny"
    task_dir = root / "tasks"
    stamp = root / "tasks.json"
    want = {"version": SMOKE_VERSION, "seed": seed}
    yamls = {n: task_dir / n / f"{n}.yaml" for n in SMOKE_TASKS}
    if not (stamp.exists() and json.loads(stamp.read_text()) == want and all(p.exists() for p in yamls.values())):
        yamls = write_smoke_tasks(task_dir, seed)
        store.atomic_write_json(stamp, want)
    texts = smoke_pretraining_texts(seed)
    models_stamp = root / "models.json"
    want_models = {"version": SMOKE_VERSION, "seed": seed, "vocab_size": vocab_size, "batch_size": batch_size,
                   "seq_len": seq_len, "lr": lr, "specs": {k: list(v) for k, v in specs.items()}}
    if models_stamp.exists() and json.loads(models_stamp.read_text()) != want_models:
        shutil.rmtree(root / "models", ignore_errors=True)        # the world changed: rebuild
    store.atomic_write_json(models_stamp, want_models)
    tokenizer = None
    model_meta, built_paths = {}, {}
    for name, (family, d_model, n_layers, n_heads, steps) in specs.items():
        out = root / "models" / name
        stats = built(out)
        if stats is None:
            if tokenizer is None:
                task_texts = [json.dumps(r) for s in smoke_task_splits(seed).values()
                              for recs in s.values() for r in recs]
                tokenizer = train_tokenizer(texts + task_texts, vocab_size, seed=seed)
            model = make_model(family, tokenizer, d_model=d_model, n_layers=n_layers, n_heads=n_heads,
                               max_len=256, seed=seed)
            stats = pretrain(model, tokenizer, texts, steps=steps, batch_size=batch_size, seq_len=seq_len,
                             lr=lr, seed=seed, out_dir=out)
        model_meta[name] = {"family": f"tiny-{family}", "params_b": _params_b(stats["n_params"]),
                            "instruct": False, "pretrain_tokens_t": stats["tokens"] / 1e12,
                            "flops_1e21": stats["flops"] / 1e21, "path": str(out),
                            "architecture": family, "pretrain_steps": stats["steps"]}
        built_paths[name] = out
    store.write_meta(paths.store_dir(profile), "models", model_meta)
    store.write_meta(paths.store_dir(profile), "benchmarks", {
        name: {"category": cat, "metric": metric, "filter": filt, "kind": kind}
        for name, (cat, metric, filt, kind) in SMOKE_TASKS.items()})
    return {"models": built_paths, "tasks": yamls, "include_path": task_dir}
