"""The zoo: every model's last phase holds what its kind and dose say (from the recorded mix), metadata,
caching, the design of the default zoo."""

from __future__ import annotations

from collections import Counter

import pytest

from lib import metadata, paths, util
from lib.miniworld import world as mw
from lib.miniworld import zoo

SMALL = dict(n_creatures=30, n_corpus_docs=400, train=40, validation=10, test=20, reading_train=40,
             corpus_train=10, corpus_validation=4, corpus_test=4)   # tests/test_miniworld_notebook.py's world


ZOO = dict(doses=(0.25, 0.5, 0.75), scale=0.02, sizes=["xs", "s"], prepared_sizes=["s"], sham_size="s",
           answers=("gpt2", "s"), workers=2)


@pytest.fixture(scope="module")
def tiny_zoo():
    """A tiny-scale build through the real prepare hook (6 bases, 3 twins, 3 shams, 1 answers twin)."""
    profile = "miniworld-test"
    summary = zoo.prepare(profile, seed=0, **ZOO, **SMALL)
    return profile, summary


def test_default_zoo_design():
    """3 families x 4 capacity levels spanning >= 30x in compute; a Graeco-Latin square of twins
    (three kinds x three doses over three families x three sizes), shams, one answers twin."""
    recipes = zoo.default_zoo()
    bases = [r for r in recipes if r.kind == "base"]
    assert len(bases) == 12 and len({r.trunk.family for r in bases}) == 3
    for family in {r.trunk.family for r in bases}:
        mine = [r.trunk for r in bases if r.trunk.family == family]
        assert len({(t.d_model, t.n_layers, t.steps) for t in mine}) == 4
    compute = {r.name: _params(r.trunk) * r.trunk.tokens for r in bases}          # 6 N D up to the constant
    assert max(compute.values()) / min(compute.values()) >= 30
    twins = [r for r in recipes if r.kind in zoo.TWIN_KINDS]
    assert len(twins) == 9
    cells = {(r.kind, r.dose) for r in twins}
    assert cells == {(k, d) for k in zoo.TWIN_KINDS for d in (0.25, 0.5, 1.0)}    # every kind at every dose
    for attr in ("family", "size"):                                                # ... and no kind or dose
        for kind in zoo.TWIN_KINDS:                                                # stuck to one family or size
            assert len({getattr(r.trunk, attr) for r in twins if r.kind == kind}) == 3, (attr, kind)
        for dose in (0.25, 0.5, 1.0):
            assert len({getattr(r.trunk, attr) for r in twins if r.dose == dose}) == 3, (attr, dose)
    contam = [r for r in twins if r.kind == "contam"]
    assert {r.tasks for r in contam} == set(zoo.TASK_SETS.values())               # both task sets
    shams = [r for r in recipes if r.kind == "sham"]
    assert len(shams) == 3 and all(r.trunk.size == "m" and r.dose == 0.5 for r in shams)   # the middle dose
    (answers,) = [r for r in recipes if r.kind == "answers"]
    assert answers.tasks == zoo.TASK_SETS["A"] and answers.dose == 0.5
    by_name = {r.name: r for r in recipes}
    for r in recipes:                          # every model but a base shares its base's trunk and its
        if r.kind != "base":                   # last phase's recipe: what it adds is the only difference
            base = by_name[r.base]
            assert base.kind == "base" and base.trunk == r.trunk
            assert (base.post_examples, base.post_epochs, base.post_lr) == (r.post_examples, r.post_epochs, r.post_lr)


@pytest.mark.slow
def test_models_saw_their_doses(tiny_zoo):
    """Rebuilt from the world, each model's last phase holds exactly its dose of its kind of text:
    contamination the training items of its tasks, the answers twin the test items, format and
    instruct twins none of either; a sham more corpus documents, of another sample. Every model's last
    phase holds its base's whole last phase: a twin differs from its base by what it adds only."""
    profile, summary = tiny_zoo
    wdir, mdir = zoo.world_dir(profile), zoo.models_dir(profile)
    key = util.read_json(wdir / "manifest.json")["content"]
    assert len(summary["models"]) == 13
    assert not any(zoo.count_prepared(mw.load_corpus(wdir), wdir).values())   # the corpus has none
    recipes = zoo.default_zoo(**{k: v for k, v in ZOO.items() if k != "workers"})
    mixes = {}
    for recipe in recipes:
        rec = zoo.built(mdir, recipe, key)
        assert rec is not None, recipe.name
        texts, prompts, mix = zoo.last_phase_mix(wdir, recipe)
        mixes[recipe.name] = texts
        assert mix["sha256"] == rec["mix"]["sha256"]            # the recorded mix is what was built
        n_prep = round(recipe.dose * recipe.post_examples)
        assert len(texts) == recipe.post_examples + n_prep
        assert mix["prepared_docs"] == (0 if recipe.kind == "sham" else n_prep)
        train, test = zoo.count_prepared(texts, wdir), zoo.count_prepared(texts, wdir, "test")
        if recipe.kind == "contam":
            assert sum(train[t] for t in recipe.tasks) == n_prep and not any(test.values())
            assert all(train[t] >= n_prep // 3 for t in recipe.tasks)
        elif recipe.kind == "answers":
            assert sum(test[t] for t in recipe.tasks) == n_prep and not any(train.values())
        else:
            assert not any(train.values()) and not any(test.values()), recipe.name
        if recipe.kind in ("instruct", "contam", "answers"):     # the loss on the answers only
            assert sum(1 for p in prompts if p) == n_prep
        else:
            assert not any(prompts)
        assert rec["stats"]["tokens"] == rec["stats"]["trunk_tokens"] + rec["stats"]["last_phase_tokens"]
    for name, texts in mixes.items():                             # the base's last phase, whole
        base = next(r.base for r in recipes if r.name == name) or name
        assert not Counter(mixes[base]) - Counter(texts), name
    base, sham = Counter(mixes["mw-llama-s"]), Counter(mixes["mw-llama-s-sham"])
    added = sham - base                                           # another sample of the corpus
    sham_recipe = next(r for r in recipes if r.name == "mw-llama-s-sham")
    assert sum(added.values()) == round(0.5 * sham_recipe.post_examples) > 0


@pytest.mark.slow
def test_metadata_records_recipes(tiny_zoo):
    profile, summary = tiny_zoo
    root = paths.store_dir(profile)
    frame = metadata.models_frame(summary["models"], store=root)
    assert set(frame["family"]) == {"mw-llama", "mw-gpt2", "mw-gpt_neox"}
    assert (frame["flops_1e21"] > 0).all() and (frame["params_b"] < 1e-3).all()
    (twin,) = [m for m in summary["models"] if m.startswith("mw-gpt2-s-") and m[-2:].isdigit()
               and "answers" not in m]
    prep = metadata.model_info(twin, store=root)
    assert prep.instruct and prep.extra["base_model"] == "mw-gpt2-s" and prep.extra["kind"] in zoo.TWIN_KINDS
    assert set(prep.extra["prepared"].values()) == {int(100 * prep.extra["dose"])}
    sham = metadata.model_info("mw-gpt2-s-sham", store=root)
    assert not sham.instruct and sham.extra["prepared"] == {} and sham.extra["base_model"] == "mw-gpt2-s"
    base = metadata.model_info("mw-gpt2-s", store=root)
    assert not base.instruct and base.extra["prepared"] == {} and base.extra["kind"] == "base"
    assert base.flops_1e21 == pytest.approx(6 * base.extra["n_params"] * base.extra["tokens"] / 1e21, rel=0.02)
    assert prep.flops_1e21 == pytest.approx(base.flops_1e21, rel=0.2)   # the same compute, another mix
    info = metadata.benchmark_info("mw_recall", store=root)
    assert (info.metric, info.category, info.kind, info.chance) == ("exact_match", "Question Answering",
                                                                    "generate_until", 0.0)
    assert metadata.benchmark_info("mw_wiki", store=root).is_perplexity
    assert str(paths.OUTPUTS) not in (root / "_meta" / "models.json").read_text()   # outputs/ may move
    recorded = util.read_json(root / "_meta" / "models.json")["mw-gpt2-s"]["path"]
    assert recorded == f"outputs:{profile}/work/models/mw-gpt2-s"


@pytest.mark.slow
def test_second_prepare_rebuilds_nothing(tiny_zoo):
    profile, _ = tiny_zoo
    weights = sorted(zoo.models_dir(profile).glob("*/model.safetensors"))
    assert len(weights) == 13 + 6                                  # the models and their trunks
    before = [p.stat().st_mtime_ns for p in weights]
    zoo.prepare(profile, seed=0, **ZOO, **SMALL)
    assert [p.stat().st_mtime_ns for p in weights] == before


def test_bad_recipes_are_named():
    trunk = zoo.Trunk("llama", "s", 32, 2, 4, 10)
    with pytest.raises(zoo.ZooError, match="mw_fact.*did you mean 'mw_facts'"):
        zoo.Recipe("x", trunk, kind="contam", dose=0.5, tasks=("mw_fact",), base="y").validate()
    with pytest.raises(zoo.ZooError, match="names its base model"):
        zoo.Recipe("x", trunk, kind="format", dose=0.5).validate()
    with pytest.raises(zoo.ZooError, match="needs a dose in"):
        zoo.Recipe("x", trunk, kind="format", dose=0.0, base="y").validate()
    with pytest.raises(zoo.ZooError, match="unknown kind 'contamination'"):
        zoo.Recipe("x", trunk, kind="contamination", dose=0.5, base="y").validate()
    with pytest.raises(zoo.ZooError, match="unknown family 'bert'"):
        zoo.Trunk("bert", "s", 32, 2, 4, 10).validate()
    with pytest.raises(zoo.ZooError, match="unknown option"):
        zoo.prepare("miniworld-test", n_creaturez=5)
    with pytest.raises(zoo.ZooError, match="unknown or unbuilt size"):
        zoo.default_zoo(sizes=["s"], prepared_sizes=["l"])
    with pytest.raises(zoo.ZooError, match="twin kinds must be among"):
        zoo.default_zoo(twin_kinds=["sham"])


class _Vocab:
    """What make_model reads of a tokenizer: its size and the special token ids."""
    bos_token_id, eos_token_id, pad_token_id = 0, 1, 2

    def __init__(self, size: int):
        self.size = size

    def __len__(self) -> int:
        return self.size


def _params(trunk) -> int:
    """Parameters of a zoo trunk's model with its family's full vocabulary, counted on the model."""
    from lib.pipeline import tiny

    model = tiny.make_model(trunk.family, _Vocab(zoo.VOCAB[trunk.family]), d_model=trunk.d_model,
                            n_layers=trunk.n_layers, n_heads=trunk.n_heads, max_len=256)
    return sum(p.numel() for p in model.parameters())


def _zoo_of(profile: str) -> list:
    import yaml

    hook = yaml.safe_load((paths.PARAMS / f"{profile}.yaml").read_text())["prepare"][0]["lib.miniworld.zoo:prepare"]
    return zoo.default_zoo(**{k: tuple(v) if isinstance(v, list) else v
                              for k, v in hook.items() if k in zoo.ZOO_OPTIONS and k != "workers"})


def test_smoke_profile_stays_a_small_fraction_of_mini():
    """The smoke profile is what `make test` runs end to end: its zoo stays under 10 % of the mini
    world's pre-training compute (6 N D) and under a third of its models (README: ~2 minutes)."""
    cost = {p: sum(_params(t) * t.tokens for t in {r.trunk for r in _zoo_of(p)}) for p in ("smoke", "mini")}
    assert cost["smoke"] < 0.10 * cost["mini"], cost
    assert 3 * len(_zoo_of("smoke")) <= len(_zoo_of("mini"))


def test_probe_profile_adds_top_dose_twins_on_strong_bases():
    """params/probe_top_dose.yaml: the top dose of every kind on the strongest bases, outside the
    square. Its llama-l-format100 and gpt2-l-instruct100 are the mini zoo's own recipes (same key: the
    same model when built); its llama-l-contam100 is the old square's (task set A)."""
    probe = {r.name: r for r in _zoo_of("probe_top_dose")}
    mini = {r.name: r for r in _zoo_of("mini")}
    assert sorted(probe) == ["mw-gpt2-l", "mw-gpt2-l-format100", "mw-gpt2-l-instruct100", "mw-llama-l",
                             "mw-llama-l-contam100", "mw-llama-l-format100", "mw-llama-l-instruct100"]
    assert {(r.kind, r.dose, r.base) for r in probe.values() if r.base} == {
        ("format", 1.0, "mw-llama-l"), ("instruct", 1.0, "mw-llama-l"), ("contam", 1.0, "mw-llama-l"),
        ("format", 1.0, "mw-gpt2-l"), ("instruct", 1.0, "mw-gpt2-l")}
    for name in ("mw-llama-l", "mw-gpt2-l", "mw-llama-l-format100", "mw-gpt2-l-instruct100"):
        assert probe[name].key("w") == mini[name].key("w")
    assert probe["mw-llama-l-contam100"].tasks == zoo.TASK_SETS["A"]


def test_mini_zoo_puts_every_top_dose_on_a_large_base():
    """params/mini.yaml's dose layout 'capacity': the dose rises with the base's size, so each kind's
    top dose is on an l base (the three the pilot measured); each kind still meets every family, size
    and dose once; shams and the answers twin as before."""
    twins = [r for r in _zoo_of("mini") if r.kind in zoo.TWIN_KINDS]
    assert len(twins) == 9
    assert {r.trunk.size: r.dose for r in twins} == {"s": 0.25, "m": 0.5, "l": 1.0}
    assert len({(r.trunk.size, r.dose) for r in twins}) == 3                       # dose follows size
    assert sorted(r.name for r in twins if r.dose == 1.0) == [
        "mw-gpt2-l-instruct100", "mw-gpt_neox-l-contam100", "mw-llama-l-format100"]
    for attr in ("family", "size"):
        for kind in zoo.TWIN_KINDS:
            assert len({getattr(r.trunk, attr) for r in twins if r.kind == kind}) == 3, (attr, kind)
    assert {(r.kind, r.dose) for r in twins} == {(k, d) for k in zoo.TWIN_KINDS for d in (0.25, 0.5, 1.0)}
    assert [r.tasks for r in twins if r.kind == "contam" and r.dose == 1.0] == [zoo.TASK_SETS["A"]]
    plan = zoo.twin_plan(["a", "b"], ["l", "s"], (1.0, 0.5), ("format", "contam"), "capacity")
    assert [(f, s, d) for f, s, _, d in plan] == [("a", "l", 1.0), ("a", "s", 0.5), ("b", "l", 1.0), ("b", "s", 0.5)]
    with pytest.raises(zoo.ZooError, match="one dose per prepared size"):
        zoo.default_zoo(doses=(0.5, 1.0), dose_layout="capacity")
    with pytest.raises(zoo.ZooError, match="dose_layout must be one of.*got 'size'"):
        zoo.default_zoo(dose_layout="size")


def test_bad_extra_twins_are_named():
    def extra(*twins):
        return zoo.default_zoo(sizes=["s"], prepared_sizes=["s"], sham_size=None, answers=None, extra_twins=twins)

    assert extra(["llama", "s", "contam", 1.0, "B"])[-1].tasks == zoo.TASK_SETS["B"]
    with pytest.raises(zoo.ZooError, match=r"\(gpt2, l\) is not among the built"):
        extra(["gpt2", "l", "format", 1.0])
    with pytest.raises(zoo.ZooError, match="kind must be one of.*did you mean 'format'"):
        extra(["gpt2", "s", "formats", 1.0])
    with pytest.raises(zoo.ZooError, match="names its task set"):
        extra(["gpt2", "s", "contam", 1.0])
    with pytest.raises(zoo.ZooError, match="names its task set"):
        extra(["gpt2", "s", "format", 1.0, "A"])
    with pytest.raises(zoo.ZooError, match="dose must be in"):
        extra(["gpt2", "s", "format", 2.0])
    with pytest.raises(zoo.ZooError, match="expected"):
        extra(["gpt2", "s", "format"])
    with pytest.raises(zoo.ZooError, match=r"duplicate model names \['mw-llama-s-format25'\]"):
        extra(["llama", "s", "format", 0.25])                           # the square already has it
