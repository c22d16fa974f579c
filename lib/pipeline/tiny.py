"""Tiny causal language models built offline: a byte-level BPE tokenizer, randomly initialised
models of three architectures (so LoRA target modules differ as they do for hub models), and the
finished model folders :func:`lib.pipeline.training.pretrain` writes. The mini world's zoo
(``lib.miniworld.zoo``) builds every self-built model of the project from these.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path

from ..util import did_you_mean
from .training import STATS_FILE

FAMILIES = ("llama", "gpt2", "gpt_neox")
SPECIAL_TOKENS = {"bos_token": "<s>", "eos_token": "</s>", "pad_token": "<pad>", "unk_token": "<unk>"}


class TinyError(ValueError):
    """Invalid request for a tiny model (unknown family, bad sizes, empty corpus)."""


# ---------------------------------------------------------------------------------------------
# tokenizer


def train_tokenizer(texts: Iterable[str], vocab_size: int):
    """Train a byte-level BPE tokenizer on ``texts``; returns a ``PreTrainedTokenizerFast``.

    Byte-level BPE never produces unknown tokens and decodes spaces exactly, which generative
    exact-match scoring needs. BPE training is deterministic for the same texts and vocabulary
    size. ``vocab_size`` must exceed the 256 byte symbols plus the four special tokens.
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
    return PreTrainedTokenizerFast(tokenizer_object=tok, **SPECIAL_TOKENS)


# ---------------------------------------------------------------------------------------------
# model


def make_model(family: str, tokenizer, *, d_model: int, n_layers: int, n_heads: int,
               d_ff: int | None = None, max_len: int = 256, seed: int = 0):
    """A randomly initialised causal LM of ``family`` (``d_ff`` default 4 x ``d_model``), deterministic
    for ``seed``. Dropout is off (tiny models, short training)."""
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
# finished model folders (written by lib.pipeline.training.pretrain)


def built(out_dir: str | os.PathLike) -> dict | None:
    """The stats of a finished model folder (``pretrain.json``), or None if it is not finished."""
    path = Path(out_dir) / STATS_FILE
    return json.loads(path.read_text()) if path.exists() else None


def load(out_dir: str | os.PathLike):
    """(model, tokenizer) of a finished model folder (float32, eval mode)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if built(out_dir) is None:
        raise TinyError(f"{out_dir} is not a finished tiny model folder (no {STATS_FILE})")
    model = AutoModelForCausalLM.from_pretrained(out_dir, dtype=torch.float32)
    model.eval()
    return model, AutoTokenizer.from_pretrained(out_dir)
