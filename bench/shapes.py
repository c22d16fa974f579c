"""The mini zoo's model shapes for the speed benchmarks: a model of each (family, size) built as
``lib.miniworld.zoo`` builds its trunks (widths, depths, vocabularies), untrained, with a tokenizer
fitted on a fixed text. Timing needs the shapes, not the zoo's weights."""

from __future__ import annotations

import functools


@functools.cache
def tokenizer(family: str):
    """A tokenizer of ``family``'s vocabulary size, fitted on a fixed synthetic text (cached)."""
    from lib.miniworld import zoo
    from lib.pipeline import tiny

    texts = [f"the bako{i} lives in the desert and eats fish . it drinks milk ." for i in range(2000)]
    return tiny.train_tokenizer(texts, zoo.VOCAB[family])


def model(family: str, size: str):
    """(tokenizer, a freshly initialised model) of the zoo's ``family`` at ``size``."""
    from lib.miniworld import zoo
    from lib.pipeline import tiny

    tok = tokenizer(family)
    spec = zoo.SIZES[size]
    return tok, tiny.make_model(family, tok, d_model=spec["d_model"], n_layers=spec["n_layers"],
                                n_heads=spec["n_heads"])
