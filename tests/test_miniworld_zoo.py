"""The zoo: prepared models really saw their doses (from the recorded mix), metadata, caching."""

from __future__ import annotations

import pytest

from lib import metadata, paths, util
from lib.miniworld import world as mw
from lib.miniworld import zoo

SMALL = dict(n_creatures=30, n_corpus_docs=400, train=40, validation=10, test=20, reading_train=40,
             corpus_train=10, corpus_validation=4, corpus_test=4)   # tests/test_miniworld_notebook.py's world


ZOO = dict(doses=(10, 25), scale=0.01, sizes=["xs", "s"], prepared_sizes=["s"], workers=2)


@pytest.fixture(scope="module")
def tiny_zoo():
    """A tiny-scale build through the real prepare hook (9 models, a few steps each, 2 processes)."""
    profile = "miniworld-test"
    summary = zoo.prepare(profile, seed=0, **ZOO, **SMALL)
    return profile, summary


def test_default_zoo_design():
    """3 families x 4 capacity levels spanning >= 30x in compute; twins at two doses."""
    recipes = zoo.default_zoo(post_steps=400)
    bases = [r for r in recipes if not r.prepared]
    assert len(bases) == 12 and len({r.family for r in bases}) == 3
    for family in {r.family for r in bases}:
        mine = [r for r in bases if r.family == family]
        assert len({(r.d_model, r.n_layers, r.steps) for r in mine}) == 4
    compute = {r.name: _params(r) * r.tokens for r in bases}          # 6 N D up to the constant
    assert max(compute.values()) / min(compute.values()) >= 30
    prepared = [r for r in recipes if r.prepared]
    assert len(prepared) == 6
    doses = {d for r in prepared for d in r.prepared.values()}
    assert doses == {150, 600}                                        # two non-zero levels (and 0)
    for task in {t for group in zoo.PREP_SETS for t in group}:        # every task: prepared at both
        seen = {r.prepared.get(task, 0) for r in prepared}            # doses and unprepared (control)
        assert seen == {0, 150, 600}, task
    for r in prepared:                                                # steps grow with the dose
        assert r.steps == 400 * max(r.prepared.values()) // 600
    # a prepared twin continues its base model: same family and shape, preparation on top
    by_name = {r.name: r for r in recipes}
    for r in prepared:
        base = by_name[r.base]
        assert not base.prepared and r.name == f"{base.name}-prep"
        assert (base.family, base.d_model, base.n_layers, base.n_heads) == (r.family, r.d_model, r.n_layers, r.n_heads)


@pytest.mark.slow
def test_prepared_models_saw_their_doses(tiny_zoo):
    profile, summary = tiny_zoo
    wdir, mdir = zoo.world_dir(profile), zoo.models_dir(profile)
    key = util.read_json(wdir / "manifest.json")["content"]
    assert len(summary["models"]) == 9
    assert not any(zoo.count_prepared(mw.load_corpus(wdir), wdir).values())   # the corpus has none
    builds = {}
    for recipe in zoo._ordered(zoo.default_zoo(**{k: v for k, v in ZOO.items() if k != "workers"})):
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


@pytest.mark.slow
def test_metadata_records_recipes(tiny_zoo):
    profile, summary = tiny_zoo
    root = paths.store_dir(profile)
    frame = metadata.models_frame(summary["models"], store=root)
    assert set(frame["family"]) == {"mw-llama", "mw-gpt2", "mw-gpt_neox"}
    assert (frame["flops_1e21"] > 0).all() and (frame["params_b"] < 1e-3).all()
    prep = metadata.model_info("mw-gpt2-s-prep", store=root)
    assert prep.instruct and prep.extra["prepared"] == zoo.dose_plan(3, (10, 25))[1]
    assert prep.extra["base_model"] == "mw-gpt2-s"
    base = metadata.model_info("mw-gpt2-s", store=root)
    assert not base.instruct and base.extra["prepared"] == {}
    assert base.flops_1e21 == pytest.approx(6 * base.extra["n_params"] * base.extra["tokens"] / 1e21)
    assert prep.flops_1e21 > base.flops_1e21 and prep.extra["preparation_tokens"] > 0
    info = metadata.benchmark_info("mw_recall", store=root)
    assert (info.metric, info.category, info.kind, info.chance) == ("exact_match", "Question Answering",
                                                                    "generate_until", 0.0)
    assert metadata.benchmark_info("mw_wiki", store=root).is_perplexity


@pytest.mark.slow
def test_second_prepare_rebuilds_nothing(tiny_zoo):
    profile, _ = tiny_zoo
    weights = sorted(zoo.models_dir(profile).glob("*/model.safetensors"))
    assert len(weights) == 9
    before = [p.stat().st_mtime_ns for p in weights]
    zoo.prepare(profile, seed=0, **ZOO, **SMALL)
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
    with pytest.raises(zoo.ZooError, match="unknown or unbuilt size"):
        zoo.default_zoo(sizes=["s"], prepared_sizes=["l"])


class _Vocab:
    """What make_model reads of a tokenizer: its size and the special token ids."""
    bos_token_id, eos_token_id, pad_token_id = 0, 1, 2

    def __init__(self, size: int):
        self.size = size

    def __len__(self) -> int:
        return self.size


def _params(recipe) -> int:
    """Parameters of a zoo recipe's model with its family's full vocabulary, counted on the model."""
    from lib.pipeline import tiny

    model = tiny.make_model(recipe.family, _Vocab(zoo.VOCAB[recipe.family]), d_model=recipe.d_model,
                            n_layers=recipe.n_layers, n_heads=recipe.n_heads, max_len=256)
    return sum(p.numel() for p in model.parameters())


def _zoo_of(profile: str) -> list:
    import yaml

    hook = yaml.safe_load((paths.PARAMS / f"{profile}.yaml").read_text())["prepare"][0]["lib.miniworld.zoo:prepare"]
    return zoo.default_zoo(**{k: tuple(v) if isinstance(v, list) and k == "doses" else v
                              for k, v in hook.items() if k in zoo.ZOO_OPTIONS and k != "workers"})


def test_smoke_profile_stays_a_small_fraction_of_mini():
    """The smoke profile is what `make test` runs end to end: its zoo stays under 10 % of the mini
    world's pre-training compute (6 N D) and under a third of its models (README: ~2 minutes)."""
    cost = {p: sum(_params(r) * r.tokens for r in _zoo_of(p)) for p in ("smoke", "mini")}
    assert cost["smoke"] < 0.10 * cost["mini"], cost          # 5.3 % today
    assert 3 * len(_zoo_of("smoke")) <= len(_zoo_of("mini"))
