"""The generated world: deterministic for a seed, disjoint splits, lm-eval-loadable tasks."""

from __future__ import annotations

import json
import re
import shutil

import pytest

from lib.miniworld import world as mw

SMALL = dict(n_creatures=40, n_corpus_docs=500, train=60, validation=20, test=30, reading_train=60,
             corpus_train=20, corpus_validation=5, corpus_test=5)


@pytest.fixture(scope="module")
def small_world():
    return mw.generate(mw.WorldConfig(seed=3, **SMALL))


def test_world_is_deterministic_for_a_seed(tmp_path):
    a = mw.build(tmp_path / "a", mw.WorldConfig(seed=3, **SMALL))
    b = mw.build(tmp_path / "b", mw.WorldConfig(seed=3, **SMALL))
    c = mw.build(tmp_path / "c", mw.WorldConfig(seed=4, **SMALL))
    data = lambda m: {f: h for f, h in m["files"].items() if not f.endswith(".yaml")}  # noqa: E731
    assert data(a) == data(b) and len(data(a)) == 6 * 3 + 2 * 3 + 2   # byte-identical (sha256)
    assert a["key"] == b["key"] != c["key"]
    assert a["content"] == b["content"] != c["content"]          # the zoo's key: the data, not the source
    assert a["files"]["corpus.txt"] != c["files"]["corpus.txt"]
    assert a["files"]["tasks/mw_facts/test.jsonl"] != c["files"]["tasks/mw_facts/test.jsonl"]


def test_build_is_cached_and_rebuilt_when_config_changes(tmp_path):
    cfg = mw.WorldConfig(seed=1, **SMALL)
    mw.build(tmp_path, cfg)
    corpus = tmp_path / "corpus.txt"
    mtime = corpus.stat().st_mtime_ns
    mw.build(tmp_path, cfg)
    assert corpus.stat().st_mtime_ns == mtime             # nothing rewritten
    m2 = mw.build(tmp_path, mw.WorldConfig(seed=1, **{**SMALL, "n_corpus_docs": 600}))
    assert len(mw.load_corpus(tmp_path)) == 600 and m2["corpus_docs"] == 600


def test_a_moved_world_points_its_tasks_at_its_new_folder_and_a_linked_one_stays_cached(tmp_path):
    """The task YAMLs name their data files by absolute path (lm-eval reads them from the working
    directory): a world reached through a link keeps them; a moved one rewrites them, with the same
    content key, so no zoo model is rebuilt."""
    first = mw.build(tmp_path / "a" / "world", mw.WorldConfig(seed=1, **SMALL))
    shutil.move(tmp_path / "a", tmp_path / "disk")                  # moved to a bigger disk and linked back
    (tmp_path / "a").symlink_to(tmp_path / "disk")
    corpus = tmp_path / "disk" / "world" / "corpus.txt"
    mtime = corpus.stat().st_mtime_ns
    assert mw.build(tmp_path / "a" / "world", mw.WorldConfig(seed=1, **SMALL))["content"] == first["content"]
    assert corpus.stat().st_mtime_ns == mtime                      # reached through the link: cached
    (tmp_path / "a").unlink()
    shutil.move(tmp_path / "disk", tmp_path / "b")                  # moved, no link (another checkout)
    moved = mw.build(tmp_path / "b" / "world", mw.WorldConfig(seed=1, **SMALL))
    assert moved["content"] == first["content"] and moved["task_dir"] == str(tmp_path / "b" / "world" / "tasks")
    for yaml_file in (tmp_path / "b" / "world" / "tasks").rglob("*.yaml"):
        assert str(tmp_path / "a") not in yaml_file.read_text()


def test_six_benchmarks_in_the_papers_formats(small_world):
    assert set(small_world.benchmarks) == set(mw.BENCHMARKS)
    kinds = {mw.BENCHMARKS[n].kind for n in small_world.benchmarks}
    metrics = {mw.BENCHMARKS[n].metric for n in small_world.benchmarks}
    assert kinds == {"multiple_choice", "generate_until"}
    assert {"acc", "acc_norm", "exact_match"} <= metrics
    for splits in small_world.benchmarks.values():
        assert set(splits) == {"train", "validation", "test"}
        for recs in splits.values():
            assert recs
    for name in ("mw_facts", "mw_quiz", "mw_reading", "mw_scripts"):   # the gold answer in every position
        labels = {r["label"] for r in small_world.benchmarks[name]["test"]}
        assert labels == {0, 1, 2, 3}, name


def test_splits_never_overlap(small_world):
    for name, splits in small_world.benchmarks.items():
        seen: dict[str, str] = {}
        for split, recs in splits.items():
            for rec in recs:
                text = mw.item_key(name, rec)
                assert text not in seen, f"{name}: {text!r} in {seen.get(text)} and {split}"
                seen[text] = split
    # mw_facts: no (creature, attribute) question of the test split appears in train or validation
    facts = small_world.benchmarks["mw_facts"]
    test_q = {r["query"] for r in facts["test"]}
    assert not test_q & {r["query"] for r in facts["train"] + facts["validation"]}
    for name, splits in small_world.corpora.items():
        texts = [d["text"] for s in splits.values() for d in s]
        assert len(texts) == len(set(texts)), name


def test_corpus_never_holds_the_benchmark_format(small_world):
    docs = small_world.corpus()
    assert len(docs) == SMALL["n_corpus_docs"]
    assert not any("Question:" in d or "Answer:" in d for d in docs)
    held_out = {d["text"] for s in small_world.corpora.values() for sp in s.values() for d in sp}
    assert not held_out & set(docs)


def test_preparation_text_never_asks_a_benchmark_item(small_world):
    """Format and instruction text ask about the world's creatures only in other wordings than the
    benchmarks' (a benchmark-worded question about a creature would be a recall or quiz item); the
    benchmarks' wordings appear only about visitors, after a passage that answers them."""
    import random

    rng, guests = random.Random(0), mw.visitors(small_world, "preparation")
    docs = [mw.qa_document(small_world, rng, guests) for _ in range(1500)]
    docs += [mw.instruct_example(small_world, rng, guests)[0] for _ in range(1500)]
    items = {q.format(name=c.name) for c in small_world.creatures for q in mw.QUESTIONS.values()}
    assert not [d for d in docs if any(item in d for item in items)]
    assert not set(guests) & {c.name for c in small_world.creatures}
    patterns = [re.compile(re.escape(q).replace(re.escape("{name}"), r"(\S+)")) for q in mw.QUESTIONS.values()]
    named = {m for d in docs for p in patterns for m in p.findall(d)}
    assert named and named <= set(guests)                 # benchmark wordings: about visitors only
    assert any(d.startswith("Question: ") or "\nQuestion: " in d for d in docs)    # the common marker


def _creature(text: str, kb: dict) -> str:
    return next(w for w in text.replace("\n", " ").split() if w in kb)


def test_gold_answers_agree_with_the_knowledge_base(small_world):
    kb = {c.name: c for c in small_world.creatures}
    b = small_world.benchmarks
    for rec in b["mw_facts"]["train"]:
        c = kb[_creature(rec["query"], kb)]
        assert rec["choices"][rec["label"]] in {mw.STATEMENTS[a].format(name=c.name, v=getattr(c, a))
                                                for a in mw.VALUES}
        assert len(set(rec["choices"])) == 4
    for rec in b["mw_recall"]["test"]:
        c = kb[_creature(rec["question"], kb)]
        assert rec["answer"] in {getattr(c, a) for a in mw.VALUES}
    for rec in b["mw_quiz"]["test"]:
        c = kb[_creature(rec["query"], kb)]
        assert rec["choices"][rec["label"]] in {getattr(c, a) for a in mw.VALUES} and len(set(rec["choices"])) == 4
    for rec in b["mw_cloze"]["test"]:                         # a corpus sentence cut before its value
        c = kb[_creature(rec["question"], kb)]
        attr = next(a for a, prefix in mw.CLOZE.items() if prefix.format(name=c.name) == rec["question"])
        assert rec["answer"] == getattr(c, attr) and "Question" not in rec["question"]
    for rec in b["mw_scripts"]["test"]:                      # the answer names the creature's own value,
        c = kb[_creature(rec["query"], kb)]                   # which the context does not give away
        answer = rec["choices"][rec["label"]]
        value = next(v for v in (c.food, c.habitat) if v in answer.split())
        assert value not in rec["query"].split() and len(set(rec["choices"])) == 4
    for rec in b["mw_reading"]["test"]:                      # the answer is in the passage,
        passage = rec["query"].split("\n")[0]                # about a creature the KB lacks
        assert rec["choices"][rec["label"]].removeprefix("in the ") in passage.split()
        assert passage.split()[1] not in kb


def test_no_test_answer_is_given_in_training_items(small_world):
    """Units (creature and attribute; creature and routine) never straddle two splits."""
    kb = {c.name: c for c in small_world.creatures}
    b = small_world.benchmarks

    def attribute(text: str) -> str:
        return next(a for a, q in mw.QUESTIONS.items() if q.split("{name}")[0] in text and
                    q.split("{name}")[1].strip(" ?") in text) if "Question" in text else \
            next(a for a, p in mw.CLOZE.items() if p.split("{name}")[0] in text and p.split("{name}")[1] in text)

    for name, field in (("mw_facts", "query"), ("mw_recall", "question"), ("mw_quiz", "query"),
                        ("mw_cloze", "question")):
        units = {s: [(_creature(r[field], kb), attribute(r[field])) for r in recs] for s, recs in b[name].items()}
        assert not set(units["test"]) & (set(units["train"]) | set(units["validation"])), name
        assert len(set(units["test"])) == len(units["test"]), name               # one item per unit
    routine = lambda q: next(r for r, o in mw.OPENINGS.items() if q.removeprefix("Story: ").startswith(o))  # noqa: E731
    scripts = {s: {(_creature(r["query"], kb), routine(r["query"])) for r in recs}
               for s, recs in b["mw_scripts"].items()}
    assert not scripts["test"] & (scripts["train"] | scripts["validation"])


def test_tasks_load_in_lm_eval(tmp_path):
    from lm_eval.tasks import TaskManager

    manifest = mw.build(tmp_path, mw.WorldConfig(seed=0, **SMALL))
    tm = TaskManager(include_path=manifest["task_dir"], include_defaults=False)
    tasks = tm.load(["mw_facts", "mw_recall", "mw_wiki"])["tasks"]
    facts = tasks["mw_facts"]
    assert facts.has_training_docs() and facts.has_validation_docs() and facts.has_test_docs()
    doc = facts.test_docs()[0]
    assert facts.doc_to_text(doc).startswith("Question:")
    assert len(list(tasks["mw_recall"].test_docs())) == manifest["benchmarks"]["mw_recall"]["test"]
    assert json.loads((tmp_path / "tasks" / "mw_wiki" / "train.jsonl").read_text().splitlines()[0])["text"]


def test_invalid_config_is_named():
    with pytest.raises(mw.WorldError, match="n_creatures"):
        mw.WorldConfig(n_creatures=3).validate()
    with pytest.raises(mw.WorldError, match="train"):
        mw.WorldConfig(train=0).validate()
