"""The Arena target of stage 07: ratings read from wheels as zip files, the name mapping and its
rule, the two designs of the analysis (size hold-out, every model tested once)."""

from __future__ import annotations

import gzip
import json
import zipfile

import numpy as np
import pandas as pd
import pytest
from test_benchalign_experiments import _world

from lib import data as pdata
from lib.benchalign import arena, methods
from lib.util import sha256_file

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _rule_matches(names: list[str], models: list[str]) -> dict:
    """Arena name -> the one leaderboard name with the same key (how the table's rule rows are made)."""
    by_key: dict[str, list[str]] = {}
    for m in dict.fromkeys(models):          # a name listed twice is one model
        by_key.setdefault(arena.key(m), []).append(m)
    return {a: by_key[arena.key(a)][0] for a in names if len(by_key.get(arena.key(a), [])) == 1}


def _fixture_data(root):
    """Two wheels (built here with zipfile) and two leaderboard item files under ``root``."""
    (root / "arena").mkdir()
    text, ledger = (root / w for w, _ in arena.WHEELS.values())
    with zipfile.ZipFile(text, "w") as z:
        z.writestr(arena.WHEELS["text"][1], json.dumps(
            {"text": {"Alpha-7B-Chat": 1100, "beta-70b": 1200, "gamma-3b-it": 1000, "delta": 1300},
             "coding": {"Alpha-7B-Chat": 1}}))
    rows = [["x / alpha-7b-chat", "Alpha", 1110.0, 1100.0, 1120.0, 500, 2],
            ["y / beta-70b", "Beta", 1190.0, 1180.0, 1200.0, 900, 1]]
    with zipfile.ZipFile(ledger, "w") as z:
        z.writestr(arena.WHEELS["ledger"][1], gzip.compress(json.dumps(
            {"ratings": {"tasks": {"instruction_following": rows}}}).encode()))
    models = np.array(["org/alpha-7B-chat", "org/Beta-70B", "org/gamma-3b-it", "org/delta-x", "org/eps-1b"])
    (root / "oll-v2-items").mkdir()
    for name, seed in (("f1", 0), ("f2", 1)):
        scores = np.random.default_rng(seed).integers(0, 2, (5, 4)).astype(np.uint8)
        np.savez(root / "oll-v2-items" / f"{name}.npz", scores=scores, models=models)


TABLE = pd.DataFrame([
    ["Alpha-7B-Chat", "org/alpha-7B-chat", "rule", "", ""],
    ["beta-70b", "org/Beta-70B", "rule", "", ""],
    ["gamma-3b-it", "org/gamma-3b-it", "out", "", "two versions fit"],
    ["delta", "org/delta-x", "hand", "12", "the Hub adds -x"]],
    columns=["arena", "model", "decision", "size_b", "note"])


def test_ratings_are_read_offline_from_the_wheels_as_zip_files(tmp_path):
    _fixture_data(tmp_path)
    text = arena.ratings("text", tmp_path)
    assert dict(zip(text.arena, text.rating)) == {"Alpha-7B-Chat": 1100, "beta-70b": 1200, "gamma-3b-it": 1000,
                                                  "delta": 1300} and text.votes.isna().all()
    led = arena.ratings("instruction_following", tmp_path)
    assert led.arena.tolist() == ["x / alpha-7b-chat", "y / beta-70b"] and led.votes.tolist() == [500, 900]
    with pytest.raises(arena.ItemDataError, match="category 'instruction_followin'.*mean 'instruction_following'"):
        arena.ratings("instruction_followin", tmp_path)
    d = arena.load_arena("text", ["f1", "f2"], tmp_path, TABLE)
    # gamma is left out by the table, eps has no Arena name; delta is matched by hand with its size
    assert d.models == ["org/alpha-7B-chat", "org/Beta-70B", "org/delta-x"]
    assert d.target.tolist() == [1100, 1200, 1300] and d.X.shape == (3, 8)
    assert d.size_b.tolist() == [7.0, 70.0, 12.0] and d.instruct.tolist() == [True, False, False]
    d = arena.load_arena("instruction_following", ["f1"], tmp_path, TABLE)
    assert d.target.tolist() == [1110, 1190] and d.info["votes"] == {"org/alpha-7B-chat": 500, "org/Beta-70B": 900}
    (tmp_path / arena.WHEELS["text"][0]).write_bytes(b"not a zip")
    with pytest.raises(pdata.CorruptData, match="llm_bench_cost"):
        arena.ratings("text", tmp_path)


def test_the_rule_and_the_mapping_table():
    assert arena.key("meta-llama/Llama-3.1-8B-Instruct") == arena.key("llama-3.1-8b-instruct") == "llama318binstruct"
    assert arena.key("meta / llama-3.1-8b-instruct") == "llama318binstruct"
    assert _rule_matches(["a-1", "b-2", "c"], ["o/A_1", "o/b2", "p/B.2", "o/d"]) == {"a-1": "o/A_1"}  # b: two
    t = arena.names()
    assert set(t.decision) == {"rule", "hand", "out"} and not t.arena.map(arena.key).duplicated().any()
    assert (t.note[t.decision != "rule"] != "").all(), "every hand decision says why"
    rule = t[t.decision == "rule"]
    assert (rule.arena.map(arena.key) == rule.model.map(arena.key)).all()
    hand = t[t.decision == "hand"]
    assert (hand.arena.map(arena.key) != hand.model.map(arena.key)).all(), "a hand row the rule would make"
    sized = t[t.size_b != ""]
    assert all(arena.parse_size_b(m) is None for m in sized.model), "a size the name already gives"


def test_the_rule_rows_are_the_rules_matches_in_the_published_data(harmony_data):
    """The table's rule rows (kept or left out) are exactly what the rule finds between the Arena names of
    both wheels and the leaderboard's models; the wheels are the pinned ones."""
    for r in pdata.WHEELS:
        assert sha256_file(harmony_data / r.dest) == r.sha256, r.dest
    t = arena.names()
    models = [str(m) for m in np.load(harmony_data / "oll-v2-items" / "openllm_math.npz")["models"]]
    names = [*arena.ratings("text").arena, *arena.ratings("instruction_following").arena]
    found = {arena.key(a): m for a, m in _rule_matches(names, models).items()}
    table = {arena.key(a): m for a, m in zip(t.arena, t.model) if arena.key(a) == arena.key(m)}
    assert found == table
    d = arena.load_arena("text", ["ifeval", "musr", "openllm_math"])
    assert len(d.models) >= 50 and np.isfinite(d.size_b).all() and len(set(d.models)) == len(d.models)


def test_arena_report_tests_every_model_once_and_pairs_every_baseline():
    d = _world(K=30, M=20)
    cfg = methods.Config(max_steps=40, patience=20, eval_every=10)
    rep = arena.arena_report(d, cfg, seeds=2, n_boot=50, source_max_b=13.0,
                             test_groups={"30B+": 30.0, "100B+": 100.0}, min_test=5, folds=3)
    assert rep["counts"]["30B+"] == int((d.size_b >= 30).sum()) and "100B+" not in rep["hold_out"]
    assert any("100B+" in n for n in rep["notes"])
    (g, cv), = rep["cv"].items()
    assert g == "all (3-fold)" and set(cv) == set(arena.METHODS)
    for m, r in {**cv, **rep["hold_out"]["30B+"]}.items():
        assert r["n_models"] in (30, rep["counts"]["30B+"]) and r["n_seeds"] == 2 and r["spearman_ci"]
        if m != "no_alignment":
            assert r["spearman_diff_no_alignment_ci"] is not None
    # plain accuracy learns nothing: its pooled held-out scores are its scores on all models
    plain = methods.evaluate(d.X.mean(1), d.target, {"all": np.arange(30)})["all"]["spearman"]
    assert cv["no_alignment"]["spearman"] == pytest.approx(plain, abs=1e-4)
