"""The zoo: prepared models really saw their doses (from the recorded mix), metadata, caching."""

from __future__ import annotations

import pytest

from lib import metadata, paths, store
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
    # twins differ only in preparation
    by_name = {r.name: r for r in recipes}
    for r in prepared:
        twin = by_name[r.name.removesuffix("-prep")]
        assert (twin.family, twin.d_model, twin.n_layers, twin.steps, twin.seed) == \
               (r.family, r.d_model, r.n_layers, r.steps, r.seed)


def test_prepared_models_saw_their_doses(tiny_zoo):
    profile, summary = tiny_zoo
    wdir, mdir = zoo.world_dir(profile), zoo.models_dir(profile)
    key = store.read_json(wdir / "manifest.json")["key"]
    assert len(summary["models"]) == 6
    # the shared corpus holds no formatted example, except routine texts that coincide with a
    # mw_scripts item (its items continue the corpus' routines, as hellaswag continues web text)
    in_corpus = zoo.count_prepared(mw.load_corpus(wdir), wdir)
    assert all(n == 0 for t, n in in_corpus.items() if t != "mw_scripts")
    for recipe in zoo.default_zoo(dose=25, scale=0.01, sizes=["s"]):
        rec = zoo.built_recipe(mdir, recipe, key)
        assert rec is not None, recipe.name
        docs, mix = zoo.pretraining_mix(wdir, recipe)
        assert mix["sha256"] == rec["mix"]["sha256"]            # the recorded mix is what was built
        counted = zoo.count_prepared(docs, wdir)
        extra = {t: counted[t] - in_corpus[t] for t in mw.BENCHMARKS}
        want = {t: recipe.prepared.get(t, 0) for t in mw.BENCHMARKS}
        assert extra == want, recipe.name                        # doses counted in the very documents
        assert rec["mix"]["prepared"] == recipe.prepared
        assert rec["stats"]["tokens"] == recipe.tokens
        assert len(docs) == SMALL["n_corpus_docs"] + sum(recipe.prepared.values())


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
        zoo.Recipe("x", "llama", 32, 2, 4, 10, prepared={"mw_fact": 5}).validate()
    with pytest.raises(zoo.ZooError, match="unknown family 'bert'"):
        zoo.Recipe("x", "bert", 32, 2, 4, 10).validate()
    with pytest.raises(zoo.ZooError, match="unknown option"):
        zoo.prepare("miniworld-test", n_creaturez=5)
