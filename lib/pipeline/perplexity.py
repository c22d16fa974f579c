"""Perplexity corpora: bits-per-byte before (direct) and after fine-tuning on the corpus' train part.

A corpus is an lm-eval ``loglikelihood_rolling`` task (a hub task such as ``wikitext``, or a local
one written here from text files). It runs through the same grid as the benchmarks (notebook 01
lists it under ``corpora``; 02 fine-tunes on its train split with the loss on every token and
picks the epoch with the lowest validation bits-per-byte; 03 scores the base model), and its
results are ordinary store results: benchmark = corpus name, metric ``bits_per_byte``,
``higher_is_better`` False. Corpora have no per-item correctness (nothing for BenchAlign).
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from pathlib import Path

import pandas as pd

from .. import store
from .localtasks import write_task


def split_documents(texts: Iterable[str], fractions: tuple[float, float, float] = (0.8, 0.1, 0.1),
                    seed: int = 0) -> dict[str, list[dict]]:
    """Shuffle documents (seeded) and split them into train / validation / test records."""
    docs = [t.strip() for t in texts if t and t.strip()]
    if len(docs) < 3:
        raise ValueError(f"a corpus needs at least 3 non-empty documents, got {len(docs)}")
    if len(fractions) != 3 or any(f <= 0 for f in fractions):
        raise ValueError(f"fractions must be three positive numbers, got {fractions}")
    random.Random(seed).shuffle(docs)
    total = sum(fractions)
    n_val = max(1, round(len(docs) * fractions[1] / total))
    n_test = max(1, round(len(docs) * fractions[2] / total))
    n_train = len(docs) - n_val - n_test
    if n_train < 1:
        raise ValueError(f"a corpus of {len(docs)} documents is too small to split {fractions}")
    pick = lambda part: [{"text": t} for t in part]  # noqa: E731
    return {"train": pick(docs[:n_train]), "validation": pick(docs[n_train:n_train + n_val]),
            "test": pick(docs[n_train + n_val:])}


def write_corpus_task(task_dir: str | Path, name: str, files: Iterable[str | Path] = (),
                      texts: Iterable[str] = (), separator: str = "\n\n",
                      fractions: tuple[float, float, float] = (0.8, 0.1, 0.1), seed: int = 0) -> Path:
    """A local perplexity corpus from text files (documents separated by ``separator``) and/or
    strings; returns the task YAML (put ``task_dir`` on notebook 01's ``include_paths``)."""
    docs = list(texts)
    for f in files:
        path = Path(f)
        if not path.is_file():
            raise FileNotFoundError(f"corpus {name!r}: text file {path} does not exist")
        docs += path.read_text(encoding="utf-8").split(separator)
    return write_task(task_dir, name, "loglikelihood_rolling", split_documents(docs, fractions, seed),
                      tags=["corpus"])


def table(store_root: str | Path, corpora: list[str]) -> pd.DataFrame:
    """Bits-per-byte per (corpus, model): direct, after fine-tuning, and the change."""
    df = store.load(store_root)
    df = df[df["benchmark"].isin(corpora)]
    if df.empty:
        return pd.DataFrame(columns=["corpus", "model", "direct_eval", "train_before_test", "change"])
    wide = df.pivot_table(index=["benchmark", "model"], columns="protocol", values="score").reset_index()
    wide = wide.rename(columns={"benchmark": "corpus"})
    for col in ("direct_eval", "train_before_test"):
        if col not in wide:
            wide[col] = float("nan")
    wide["change"] = wide["train_before_test"] - wide["direct_eval"]
    wide.columns.name = None
    return wide[["corpus", "model", "direct_eval", "train_before_test", "change"]]
