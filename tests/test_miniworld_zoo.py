"""The zoo: prepared models really saw their doses (from the recorded mix), metadata, caching."""

from __future__ import annotations

import pytest

from lib import metadata, paths, util
from lib.miniworld import world as mw
from lib.miniworld import zoo

SMALL = dict(n_creatures=30, n_corpus_docs=400, train=40, validation=10, test=20,
             corpus_train=10, corpus_validation=4, corpus_test=4)


@pytest.fixture(scope="module")
def tiny_zoo():
    """A tiny-scale build through the real prepare hook (6 models, a few steps each)."""
    profile = "miniworld-test"
    summary = zoo.prepare(profile, seed=0, dose=25, scale=0.01, sizes=["s"], **SMALL)
    return profile, summary


def test_default_zoo_design():
    recipes = zoo.default_zoo()
    assert len(recipes) >= 12
    assert len({r.family for r in recipes}) >= 3
    assert len({(r.d_model, r.n_layers, r.steps) for r in recipes}) >= 2
    prepared = [r for r in recipes if r.prepared]
    assert len(prepared) == len(recipes) // 2
    # every task is prepared in some models and not in others
    for task in mw.BENCHMARKS:
        n = sum(task in r.prepared for r in recipes)
        assert 0 < n < len(recipes), task
    # a prepared twin continues its base model: same family and shape, preparation on top
    by_name = {r.name: r for r in recipes}
    for r in prepared:
        base = by_name[r.base]
        assert not base.prepared and r.name == f"{base.name}-prep"
        assert (base.family, base.d_model, base.n_layers, base.n_heads) == (r.family, r.d_model, r.n_layers, r.n_heads)


def test_prepared_models_saw_their_doses(tiny_zoo):
    profile, summary = tiny_zoo
    wdir, mdir = zoo.world_dir(profile), zoo.models_dir(profile)
    key = util.read_json(wdir / "manifest.json")["key"]
    assert len(summary["models"]) == 6
    assert not any(zoo.count_prepared(mw.load_corpus(wdir), wdir).values())   # the corpus has none
    builds = {}
    for recipe in zoo._ordered(zoo.default_zoo(dose=25, scale=0.01, sizes=["s"])):
        rec = zoo.built_recipe(mdir, recipe, key, builds[recipe.base]["key"] if recipe.base else "")
        assert rec is not None, recipe.name
        builds[recipe.name] = rec
        docs, mix = zoo.pretraining_mix(wdir, recipe)
        assert mix["sha256"] == rec["mix"]["sha256"]            # the recorded mix is what was built
        counted = zoo.count_prepared(docs, wdir)
        want = {t: recipe.prepared.get(t, 0) for t in mw.BENCHMARKS}
        assert counted == want, recipe.name                      # doses counted in the very documents
        assert rec["mix"]["prepared"] == recipe.prepared
        assert rec["stats"]["own_tokens"] == recipe.tokens
        if recipe.base:                                          # half examples, half corpus documents
            assert len(docs) == 2 * sum(recipe.prepared.values()) and 0 < rec["mix"]["prepared_char_share"] < 1
            assert rec["stats"]["tokens"] == builds[recipe.base]["stats"]["tokens"] + recipe.tokens
        else:
            assert len(docs) == SMALL["n_corpus_docs"] and rec["mix"]["prepared_char_share"] == 0


def test_metadata_records_recipes(tiny_zoo):
    profile, summary = tiny_zoo
    root = paths.store_dir(profile)
    frame = metadata.models_frame(summary["models"], store=root)
    assert set(frame["family"]) == {"mw-llama", "mw-gpt2", "mw-gpt_neox"}
    assert (frame["flops_1e21"] > 0).all() and (frame["params_b"] < 1e-3).all()
    prep = metadata.model_info("mw-gpt2-s-prep", store=root)
    assert prep.instruct and prep.extra["prepared"] == {t: 25 for t in zoo.PREP_B}
    assert prep.extra["base_model"] == "mw-gpt2-s"
    base = metadata.model_info("mw-gpt2-s", store=root)
    assert not base.instruct and base.extra["prepared"] == {}
    assert base.flops_1e21 == pytest.approx(6 * base.extra["n_params"] * base.extra["tokens"] / 1e21)
    assert prep.flops_1e21 > base.flops_1e21 and prep.extra["preparation_tokens"] > 0
    info = metadata.benchmark_info("mw_arith", store=root)
    assert (info.metric, info.category, info.kind) == ("exact_match", "Math", "generate_until")
    assert metadata.benchmark_info("mw_wiki", store=root).is_perplexity


def test_second_prepare_rebuilds_nothing(tiny_zoo):
    profile, _ = tiny_zoo
    weights = sorted(zoo.models_dir(profile).glob("*/model.safetensors"))
    assert len(weights) == 6
    before = [p.stat().st_mtime_ns for p in weights]
    zoo.prepare(profile, seed=0, dose=25, scale=0.01, sizes=["s"], **SMALL)
    assert [p.stat().st_mtime_ns for p in weights] == before


def test_bad_recipes_are_named():
    with pytest.raises(zoo.ZooError, match="mw_fact.*did you mean 'mw_facts'"):
        zoo.Recipe("x", "llama", 32, 2, 4, 10, prepared={"mw_fact": 5}, base="y").validate()
    with pytest.raises(zoo.ZooError, match="needs a base model"):
        zoo.Recipe("x", "llama", 32, 2, 4, 10, prepared={"mw_facts": 5}).validate()
    with pytest.raises(zoo.ZooError, match="unknown family 'bert'"):
        zoo.Recipe("x", "bert", 32, 2, 4, 10).validate()
    with pytest.raises(zoo.ZooError, match="unknown option"):
        zoo.prepare("miniworld-test", n_creaturez=5)
