"""lib.analysis.perplexity: perplexity vs downstream rank agreement in three settings and groups."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from lib import store
from lib.analysis import perplexity


@pytest.fixture
def tiny_store(tmp_path):
    """4 base + 3 instruct models; perplexity before fine-tuning ranks base models exactly like
    downstream after fine-tuning, but not the instruct ones."""
    store.write_meta(tmp_path, "models", {f"b{i}": {"family": "t", "instruct": False} for i in range(4)}
                     | {f"i{i}": {"family": "t", "instruct": True} for i in range(3)})
    store.write_meta(tmp_path, "benchmarks", {"qa": {"category": "Question Answering", "metric": "acc"},
                                              "nli": {"category": "Language Understanding", "metric": "acc"},
                                              "corpus": {"category": "Perplexity", "metric": "bits_per_byte"}})
    models = [f"b{i}" for i in range(4)] + [f"i{i}" for i in range(3)]
    ability = dict(zip(models, [1, 2, 3, 4, 2.5, 1.5, 3.5]))
    ppl_pre = dict(zip(models, [4, 3, 2, 1, 0.5, 5, 6]))        # instruct models out of order
    rng = np.random.default_rng(0)
    for m in models:
        for p in store.PROTOCOLS:
            store.write(tmp_path, store.Result(p, "corpus", m, "bits_per_byte",
                                               ppl_pre[m] if p == "direct_eval" else 10 - ability[m],
                                               higher_is_better=False))
            for b in ("qa", "nli"):
                noise = rng.normal(scale=0.01) if p == "direct_eval" else 0.0
                store.write(tmp_path, store.Result(p, b, m, "acc", ability[m] / 10 + noise))
    store.write(tmp_path, store.Result("direct_eval", "qa", "b9", "acc", 0.9))   # no perplexity: left out
    store.write_meta(tmp_path, "models", {"b9": {"family": "t"}})
    return tmp_path


def test_settings_and_groups(tiny_store):
    df = store.load(tiny_store)
    table = perplexity.agreement_table(df, tiny_store)
    summ = perplexity.summarise(table).set_index(["setting", "group"])
    assert summ.loc[("train_before_test", "all"), "tau_average"] == pytest.approx(1.0)
    assert summ.loc[("pre_ft_ppl_vs_tbt", "base"), "tau_average"] == pytest.approx(1.0)
    assert summ.loc[("pre_ft_ppl_vs_tbt", "all"), "n_models"] == 7                 # b9 has no perplexity
    abilities = [2.5, 1.5, 3.5]
    expected = stats.kendalltau([-0.5, -5, -6], abilities).statistic                # negated bits-per-byte
    assert summ.loc[("pre_ft_ppl_vs_tbt", "instruct"), "tau_average"] == pytest.approx(expected)
    square = perplexity.corpus_by_benchmark(table, "train_before_test")
    assert list(square.index) == ["corpus", "average"] and list(square.columns) == ["nli", "qa", "average"]
    frame = perplexity.scatter_frame(df, "direct_eval", "train_before_test", tiny_store)
    assert len(frame) == 7 and (frame["type"] == "instruct").sum() == 3


def test_too_few_models_and_no_corpus(tiny_store):
    df = store.load(tiny_store)
    table = perplexity.agreement_table(df, tiny_store, min_models=4)
    summ = perplexity.summarise(table).set_index(["setting", "group"])
    assert math.isnan(summ.loc[("direct", "instruct"), "tau_average"])
    assert perplexity.agreement_table(df[df.benchmark != "corpus"], tiny_store).empty
    assert perplexity.summarise(perplexity.agreement_table(df[df.benchmark != "corpus"], tiny_store)).empty
