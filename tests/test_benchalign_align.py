"""`align` / `score` (runner.align, lib.benchalign.align): round trips on synthetic preferences with a known latent
and on the published leaderboard items, the one-line errors, the readers, and the pair path of rank."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
import torch

from lib import paths
from lib.benchalign import align, rank, studies
from runner import align as cli

pytestmark = pytest.mark.usefixtures("one_torch_thread")
BAR = 0.7          # rho of aligned scores with the latent on held-out models (synthetic world below)


# --------------------------------------------------------------------------- a world with a known latent
def _world(k: int = 70, m: int = 40, seed: int = 0):
    """Items driven by two independent traits (the first half by t1, the second by t2); the latent
    preference is t1-items minus t2-items, so plain accuracy (t1 + t2) says nothing about it and
    only a weighting with both signs can recover it."""
    rng = np.random.default_rng(seed)
    t = rng.normal(size=(k, 2))
    trait = np.repeat([0, 1], m // 2)
    difficulty = rng.normal(size=m)
    X = (rng.random((k, m)) < 1 / (1 + np.exp(-(2.0 * t[:, trait] - difficulty)))).astype(float)
    latent = X[:, trait == 0].mean(1) - X[:, trait == 1].mean(1)
    models = [f"org/model-{i:02d}" for i in range(k)]
    return X, latent, models


def _write_items(path, X, models, ids=None):
    arrays = {"scores": X.astype(np.uint8) if np.isin(X, (0, 1)).all() else X, "models": np.array(models)}
    if ids is not None:
        arrays["items"] = np.array(ids)
    np.savez(path, **arrays)
    return path


def _write_pairs(path, models, winner, loser):
    pd.DataFrame({"winner": [models[i] for i in winner], "loser": [models[i] for i in loser]}).to_csv(path, index=False)
    return path


def _spearman(a, b):
    return pd.Series(a).rank().corr(pd.Series(b).rank())


def test_aligned_scores_of_held_out_models_follow_the_latent(tmp_path):
    """End to end through files: Bradley-Terry pairs among 50 models -> align -> score 20 unseen
    models; their aligned scores follow the latent (rho > BAR) where plain accuracy does not, and a
    random-preference control does not pass the bar."""
    X, latent, models = _world()
    train, test = np.arange(50), np.arange(50, 70)
    items = _write_items(tmp_path / "items.npz", X, models)
    w, lo, wrong = studies.bt_pairs(latent, train, 20, 0.0, seed=0)
    assert 0.0 < wrong < 0.25                                       # Bradley-Terry: some pairs disagree
    bench = align.align(align.read_items([items]), align.read_preferences(_write_pairs(tmp_path / "p.csv", models,
                                                                                      w, lo)))
    assert bench["preferences"] == {"kind": "pairs", "pairs": 500, "models": 50, "components": 1}
    assert bench["settings"]["chosen_step"] > 0 and bench["cv"]["aligned"]["rho"] > 0.7
    ids = [f"items/{j}" for j in range(X.shape[1])]
    new = align.read_items([_write_items(tmp_path / "new.npz", X[test], [models[i] for i in test], ids)])
    scored = align.score(bench, new).set_index("model")
    aligned = scored.loc[[models[i] for i in test], "aligned_score"].to_numpy()
    assert _spearman(aligned, latent[test]) > BAR
    assert abs(_spearman(X[test].mean(1), latent[test])) < 0.4      # the manipulation: accuracy is blind to it
    assert sorted(scored["rank"]) == list(range(1, 21))
    np.testing.assert_allclose(aligned, X[test] @ np.array(bench["weights"]))
    # control: the same number of pairs with random winners
    rng = np.random.default_rng(1)
    coin = rng.random(len(w)) < 0.5
    rw, rl = np.where(coin, w, lo), np.where(coin, lo, w)
    control = align.align(align.read_items([items]),
                          align.read_preferences(_write_pairs(tmp_path / "r.csv", models, rw, rl)))
    control_scores = align.score(control, new).set_index("model").loc[[models[i] for i in test], "aligned_score"]
    assert abs(_spearman(control_scores.to_numpy(), latent[test])) < BAR
    assert abs(control["cv"]["aligned"]["rho"]) < 0.5


def test_align_is_deterministic_and_scores_per_model_work(tmp_path):
    """The same inputs give a byte-identical aligned benchmark; a score per model is a preference too."""
    X, latent, models = _world(k=40)
    items = _write_items(tmp_path / "items.npz", X, models)
    pd.DataFrame({"model": models, "score": latent}).to_csv(tmp_path / "s.csv", index=False)
    outs = []
    for name in ("a.json", "b.json"):
        assert cli.main(["align", "--items", str(items), "--prefs", str(tmp_path / "s.csv"),
                           "--out", str(tmp_path / name)]) == 0
        outs.append((tmp_path / name).read_bytes())
    assert outs[0] == outs[1]
    bench = json.loads(outs[0])
    assert bench["preferences"] == {"kind": "scores", "models": 40}
    assert bench["items"][:2] == ["items/0", "items/1"] and len(bench["weights"]) == 40
    assert bench["inputs"][0] == {"file": "items.npz", "sha256": align._sha256(items)} and len(bench["sha256"]) == 64
    assert bench["cv"]["aligned"]["rho"] > bench["cv"]["plain_accuracy"]["rho"] + 0.3


@pytest.mark.usefixtures("harmony_data")
def test_round_trip_on_published_items(tmp_path, capsys):
    """The published MuSR items of 36 leaderboard models: align 30 of them to their IFEval accuracy
    (as Bradley-Terry pairs written to CSV), score the other 6 through the command line."""
    base = paths.data_dir("oll-v2-items") / "oll-v2-items"
    musr = align.read_items([base / "musr.npz"])
    ifeval = align.read_items([base / "ifeval.npz"])
    acc = dict(zip(ifeval.models, ifeval.X.mean(1)))
    models = [m for m in musr.models if m in acc][:36]
    X = musr.select(models)[:, :120]
    small = _write_items(tmp_path / "musr.npz", X, models, ids=musr.ids[:120])
    latent = np.array([acc[m] for m in models])
    w, lo, _ = studies.bt_pairs(latent, np.arange(30), 8, 0.1, seed=0)
    prefs = _write_pairs(tmp_path / "prefs.csv", models, w, lo)
    assert cli.main(["align", "--items", str(small), "--prefs", str(prefs), "--out", str(tmp_path / "b.json")]) == 0
    printed = capsys.readouterr().out
    assert printed.startswith("aligned 120 items to 120 pairs among 30 models (1 component(s))\n")
    assert "cross-validated rho with Bradley-Terry strengths" in printed
    bench = json.loads((tmp_path / "b.json").read_text())
    assert bench["items"][0] == "musr/0"
    assert bench["source_models"] == list(dict.fromkeys([models[i] for i in [*w, *lo]]))
    rest = _write_items(tmp_path / "rest.npz", X[30:], models[30:], ids=musr.ids[:120])
    assert cli.main(["score", "--bench", str(tmp_path / "b.json"), "--items", str(rest)]) == 0
    table = pd.read_csv(pd.io.common.StringIO(capsys.readouterr().out))
    assert list(table.columns) == ["model", "aligned_score", "rank", "plain_accuracy", "plain_rank", "in_sample"]
    assert not table.in_sample.any()                                  # models 30+ were not aligned on
    assert sorted(table.model) == sorted(models[30:]) and sorted(table["rank"]) == list(range(1, 7))
    np.testing.assert_allclose(table.set_index("model").loc[models[30:], "aligned_score"],
                               X[30:] @ np.array(bench["weights"]), rtol=1e-5)


# --------------------------------------------------------------------------- the one-line errors
def _cli(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "runner.align", *map(str, args)], cwd=paths.ROOT,
                          capture_output=True, text=True, timeout=120)


@pytest.fixture
def small(tmp_path):
    X, latent, models = _world(k=30, m=12)
    items = _write_items(tmp_path / "items.npz", X, models)
    w, lo, _ = studies.bt_pairs(latent, np.arange(30), 4, 0.0, seed=0)
    return tmp_path, items, models, _write_pairs(tmp_path / "prefs.csv", models, w, lo)


def test_error_item_ids_do_not_match(small):
    tmp, items, models, prefs = small
    assert cli.main(["align", "--items", str(items), "--prefs", str(prefs), "--out", str(tmp / "b.json"),
                       "--max-steps", "20"]) == 0
    other = _write_items(tmp / "other.npz", np.ones((2, 12)), ["x/a", "x/b"], ids=[f"musr/{i}" for i in range(12)])
    r = _cli("score", "--bench", tmp / "b.json", "--items", other)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr == (f"error: {other}: 12 of the aligned benchmark's 12 item ids are missing (first: 'items/0'); "
                        f"give the items that {tmp / 'b.json'} was aligned on\n")


def test_error_model_without_items(small, capsys):
    tmp, items, models, prefs = small
    df = pd.read_csv(prefs)
    df.loc[3, "loser"] = "org/unknown-7b"
    df.to_csv(tmp / "p2.csv", index=False)
    assert cli.main(["align", "--items", str(items), "--prefs", str(tmp / "p2.csv"), "--out", str(tmp / "b")]) == 2
    assert capsys.readouterr().err == (
        f"error: {tmp / 'p2.csv'}: 1 model(s) in the preferences have no items in {items} (first: 'org/unknown-7b'); "
        "give their items or drop their preferences\n")


def test_error_preferences_too_few_or_too_disconnected(small, capsys):
    tmp, items, models, _ = small
    few = _write_pairs(tmp / "few.csv", models, [0, 1, 2, 3], [1, 2, 3, 4])
    assert cli.main(["align", "--items", str(items), "--prefs", str(few), "--out", str(tmp / "b")]) == 2
    assert capsys.readouterr().err == (f"error: {few}: preferences too few to learn from: 4 pair(s) among 5 "
                                       "model(s); need at least 10 pairs among at least 4 models\n")
    # 12 pairs in 6 separate pairs of models: 6 components of 2 out of 12 models
    apart = _write_pairs(tmp / "apart.csv", models, [0, 2, 4, 6, 8, 10] * 2, [1, 3, 5, 7, 9, 11] * 2)
    assert cli.main(["align", "--items", str(items), "--prefs", str(apart), "--out", str(tmp / "b")]) == 2
    assert capsys.readouterr().err == (
        f"error: {apart}: preferences too disconnected to learn from: 6 components, the largest holds 2 of 12 "
        "models; need one component holding at least half of them (6): add pairs between the components\n")
    scores = tmp / "s.csv"
    pd.DataFrame({"model": models[:5], "score": [1.0] * 5}).to_csv(scores, index=False)
    assert cli.main(["align", "--items", str(items), "--prefs", str(scores), "--out", str(tmp / "b")]) == 2
    assert capsys.readouterr().err == (f"error: {scores}: preferences too few to learn from: 5 model(s) with 1 "
                                       "distinct score(s); need at least 4 models and 2 distinct scores\n")


def test_error_files_that_do_not_parse(small, capsys):
    tmp, items, models, prefs = small
    bad = tmp / "bad.npz"
    bad.write_bytes(b"not a zip file")
    r = _cli("align", "--items", bad, "--prefs", prefs, "--out", tmp / "b.json")
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr == f"error: {bad} does not parse: not an .npz file (a zip archive of arrays)\n"
    cols = tmp / "cols.csv"
    cols.write_text("a,b\nx,y\n")
    assert cli.main(["align", "--items", str(items), "--prefs", str(cols), "--out", str(tmp / "b")]) == 2
    assert capsys.readouterr().err == (f"error: {cols} does not parse: preferences need columns winner, loser[, "
                                       "weight] or model, score; found ['a', 'b']\n")
    half = tmp / "half.csv"
    half.write_text("model,i1,i2\norg/a,1,0\norg/b,0.5,2\n")
    assert cli.main(["score", "--bench", str(prefs), "--items", str(half)]) == 2
    assert capsys.readouterr().err.startswith(f"error: {prefs} does not parse: JSONDecodeError: ")
    pd.DataFrame({"model": models, "score": np.arange(30.0)}).to_csv(tmp / "s.csv", index=False)
    assert cli.main(["align", "--items", str(half), "--prefs", str(tmp / "s.csv"), "--out", str(tmp / "b")]) == 2
    assert capsys.readouterr().err == (f"error: {half} does not parse: 1 entries are outside [0, 1], first at model "
                                       "'org/b', item 1 (value np.float64(2.0))\n")


# --------------------------------------------------------------------------- readers
def test_items_readers_agree(tmp_path):
    """The same matrix as npz, wide CSV, long parquet and lm-eval samples folders reads the same."""
    X = np.array([[1, 0, 1], [0, 0, 1], [1, 1, 0.5]])
    models = ["org/a", "org/b", "org/c"]
    ids = ["t/0", "t/1", "t/2"]
    _write_items(tmp_path / "x.npz", X, models, ids)
    pd.DataFrame(X, index=pd.Index(models, name="model"), columns=ids).reset_index().to_csv(tmp_path / "x.csv",
                                                                                           index=False)
    pd.DataFrame([(m, i, X[a, b]) for a, m in enumerate(models) for b, i in enumerate(ids)],
                 columns=["model", "item", "correct"]).to_parquet(tmp_path / "x.parquet")
    for a, m in enumerate(models):
        folder = tmp_path / "samples" / m.replace("/", "__")
        folder.mkdir(parents=True)
        old = [{"doc_id": b, "filter": "none", "metrics": ["acc"], "acc": 0.0} for b in range(3)]
        new = [{"doc_id": b, "filter": "none", "metrics": ["acc_norm", "acc"], "acc_norm": X[a, b], "acc": 0.0}
               for b in range(3)]
        (folder / "samples_t_2025-01-01T00-00-00.jsonl").write_text("\n".join(map(json.dumps, old)))
        (folder / "samples_t_2025-02-01T00-00-00.jsonl").write_text("\n".join(map(json.dumps, new)))
    for name in ("x.npz", "x.csv", "x.parquet", "samples"):
        got = align.read_items([tmp_path / name])
        assert got.models == models and got.ids == ids, name
        np.testing.assert_array_equal(got.X, X, err_msg=name)
    assert align.read_items([tmp_path / "samples"], metric="acc").X.sum() == 0


# --------------------------------------------------------------------------- the pair path of rank
def test_pair_list_gradient_matches_autograd():
    """PairList's loss and bincount gradient equal autograd's on the weighted mean softplus."""
    rng = np.random.default_rng(0)
    K, C = 7, 3
    S = torch.tensor(rng.normal(size=(K, C)), dtype=torch.float64, requires_grad=True)
    win, lose = rng.integers(0, K, 20), rng.integers(0, K, 20)
    keep = win != lose
    win, lose, col, wt = win[keep], lose[keep], rng.integers(0, C, keep.sum()), rng.random(keep.sum()) + 0.1
    obj = rank.PairList(win, lose, col, wt, K, C, torch.float64)
    loss, grad = obj.step(S, "ranknet", value=True)
    ref = torch.stack([(torch.nn.functional.softplus(S[lose, c] - S[win, c]) * torch.tensor(wt))[col == c].sum()
                       / wt[col == c].sum() for c in range(C)])
    ref.sum().backward()
    np.testing.assert_allclose(loss.numpy(), ref.detach().numpy(), rtol=1e-12)
    np.testing.assert_allclose(grad.numpy(), S.grad.numpy(), rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(obj.value(S.detach(), "ranknet"), ref.detach().numpy(), rtol=1e-12)


def test_fit_pairs_out_of_fold_scores_and_checks():
    X, latent, _ = _world(k=40, m=20)
    w, lo, _ = studies.bt_pairs(latent, np.arange(40), 10, 0.0, seed=0)
    fit = rank.fit_pairs(X, w, lo, seed=0, max_steps=200)
    assert fit.folds == 5 and fit.fold_weights.shape == (5, 20) and (fit.fold_ids >= 0).all()
    oof = fit.oof_scores(X)
    assert np.isfinite(oof).all() and not np.allclose(oof, fit.scores(X))
    with pytest.raises(rank.RankError, match="prefers a model to itself"):
        rank.fit_pairs(X, [1, 2], [1, 3])
    few = rank.fit_pairs(X, [0, 1], [1, 2])
    assert few.folds == 0 and few.step == 0 and few.note.startswith("3 models: too few to cross-validate")


def test_noise_study_recovers_the_latent_and_reports_every_condition():
    """The study on the synthetic world: clean pairs beat plain accuracy on the unseen models by far;
    every condition and baseline has its record; the table and the docs-table rows follow the grid."""
    from lib.benchalign.data import ItemData
    from lib.benchalign.methods import Config, split_by_size

    X, latent, models = _world(k=60, m=30)
    data = ItemData(X, models, np.array(["w"] * 30), np.arange(30), latent, np.arange(60.0) + 1)
    split = split_by_size(data, 41, {"big": 41})
    study = studies.noise_study(data, split, Config(max_steps=300), flips=(0.0, 0.4), pairs_per_model=(3, 0),
                              seeds=2, n_boot=200)
    from lib.benchalign.methods import METHODS

    usable = [n for n, m in METHODS.items() if not m.learns and (data.instruct is not None or not m.flag)]
    assert study["baselines"][:2] == ["no_alignment", "random"] and study["baselines"] == usable
    assert len(study["conditions"]) == 4
    big = study["summary"]["big"]
    clean = big["pairs flip=0.00 per_model=all"]
    assert clean["spearman"] > 0.6 and clean["spearman_diff_no_alignment_ci"][0] > 0
    assert abs(big["no_alignment"]["spearman"]) < 0.4
    assert study["conditions"]["pairs flip=0.40 per_model=3"]["pairs"] == 60
    assert 0.3 < study["conditions"]["pairs flip=0.40 per_model=3"]["wrong"] < 0.6
    table = studies.noise_table(study)
    assert list(table.method) == [*usable, "pairs flip=0.00 per_model=3",
                                  "pairs flip=0.40 per_model=3", "pairs flip=0.00 per_model=all",
                                  "pairs flip=0.40 per_model=all"]
    too_small = split_by_size(data, 3, {"big": 41})
    assert "skipped" in studies.noise_study(data, too_small, Config())


# --------------------------------------------------------------------------- inputs a user may hand it (issue 50)
@pytest.mark.parametrize("weight, says", [
    ("NaN", "is nan, not a finite number"), ("null", "is None, not a finite number"),
    ("Infinity", "is inf, not a finite number"), ('"0.1"', "is '0.1', not a finite number"),
])
def test_a_hand_edited_aligned_file_with_a_bad_weight_is_one_line(small, capsys, weight, says):
    tmp, items, models, prefs = small
    assert cli.main(["align", "--items", str(items), "--prefs", str(prefs), "--out", str(tmp / "b.json"),
                       "--max-steps", "20"]) == 0
    capsys.readouterr()
    text = (tmp / "b.json").read_text()
    first = json.loads(text)["weights"][0]
    edited = tmp / "e.json"
    edited.write_text(text.replace(f'"weights": [\n  {json.dumps(first)},', f'"weights": [\n  {weight},', 1))
    assert cli.main(["score", "--bench", str(edited), "--items", str(items)]) == 2
    assert capsys.readouterr().err == (f"error: {edited} does not parse: the weight of item 'items/0' {says} "
                                       "(write the file again with `align`)\n")
    bench = json.loads(text)
    bench["items"][1] = bench["items"][0]
    edited.write_text(json.dumps(bench))
    assert cli.main(["score", "--bench", str(edited), "--items", str(items)]) == 2
    assert capsys.readouterr().err == f"error: {edited} does not parse: item id 'items/0' occurs twice\n"


def test_names_are_text_missing_values_are_named_and_every_file_holds_the_same_models(tmp_path, capsys):
    long = tmp_path / "long.csv"
    long.write_text("model,item,correct\n025,q1,1\n025,q2,0\nNA,q1,0\nNA,q2,1\nnull,q1,1\n")
    X, models, ids = align._read_table(long)
    assert models == ["025", "NA", "null"] and ids == ["q1", "q2"]
    with pytest.raises(align.AlignError, match=r"model 'null' has no value for item 'q2' \(missing or not a number; "
                                               r"1 such entries\)"):
        align.read_items([long])
    prefs = tmp_path / "p.csv"
    prefs.write_text("winner,loser\n025,NA\n")
    assert align.read_preferences(prefs).models == ["025", "NA"]
    a, b = tmp_path / "a.csv", tmp_path / "b.csv"
    a.write_text("model,x1,x2\nm1,1,0\nm2,0,1\n")
    b.write_text("model,y1\nm1,1\n")
    with pytest.raises(align.AlignError, match=f"model 'm2' is in {a} but not in {b} \\(1 such models\\)"):
        align.read_items([a, b])


def test_out_is_checked_before_the_fit_never_an_input_and_replaced_only_when_asked(small, capsys):
    tmp, items, models, prefs = small
    base = ["align", "--items", str(items), "--prefs", str(prefs), "--max-steps", "20"]
    for out, says in ((prefs, f"--out {prefs} is one of the inputs: it would be overwritten; give another file name"),
                      (tmp, f"--out {tmp} is a folder: give a file name")):
        assert cli.main([*base, "--out", str(out)]) == 2
        assert capsys.readouterr().err == f"error: {says}\n"
    (tmp / ".b.json.x1y2.tmp").write_text("left by a killed write")
    assert cli.main([*base, "--out", str(tmp / "b.json")]) == 0
    assert not list(tmp.glob(".b.json.*.tmp"))
    capsys.readouterr()
    assert cli.main([*base, "--out", str(tmp / "b.json")]) == 2
    assert capsys.readouterr().err == (f"error: --out {tmp / 'b.json'} exists: add --replace to overwrite it, or "
                                       "give another file name\n")
    assert cli.main([*base, "--out", str(tmp / "b.json"), "--replace"]) == 0
    locked = tmp / "ro"
    locked.mkdir(mode=0o500)
    if not os.access(locked, os.W_OK):                  # (root writes anywhere)
        assert cli.main([*base, "--out", str(locked / "b.json")]) == 2


def test_the_pair_bootstrap_in_blocks_keeps_its_memory_and_its_small_results(monkeypatch):
    rng = np.random.default_rng(0)
    wt = rng.random(500) + 0.5
    right = {"a": rng.integers(0, 2, 500).astype(float), "b": np.full(500, 0.5)}
    whole = align._pair_bootstrap(wt, right, 200, 3)
    d = align.uncertainty.draws(500, 200, 3) * wt            # what it computed before: all draws at once
    np.testing.assert_array_equal(whole["a"], d @ right["a"] / d.sum(1))
    monkeypatch.setattr(align, "BOOT_ELEMENTS", 500 * 30)    # 30 draws at a time
    blocks = align._pair_bootstrap(wt, right, 200, 3)
    assert len(blocks["a"]) == 200 and np.allclose(blocks["b"], 0.5)
    assert abs(np.std(blocks["a"]) - np.std(whole["a"])) < 0.3 * np.std(whole["a"])


def test_preferences_read_in_chunks_equal_one_read_and_name_rows_across_chunks(tmp_path, monkeypatch):
    rng = np.random.default_rng(0)
    names = [f"m{i}" for i in range(30)]
    pairs = [(names[a], names[b], w) for a, b, w in zip(rng.integers(0, 30, 500), rng.integers(0, 30, 500),
                                                         rng.integers(1, 4, 500)) if a != b]
    path = tmp_path / "p.csv"
    path.write_text("winner,loser,weight\n" + "".join(f"{a},{b},{w}\n" for a, b, w in pairs))
    whole = align.read_preferences(path)
    monkeypatch.setattr(align, "CHUNK_ROWS", 7)
    chunked = align.read_preferences(path)
    assert chunked.models == whole.models == list(dict.fromkeys([p[0] for p in pairs] + [p[1] for p in pairs]))
    for k in ("winner", "loser", "weight"):
        assert np.array_equal(getattr(chunked, k), getattr(whole, k))
    assert [chunked.models[i] for i in chunked.winner] == [p[0] for p in pairs]
    path.write_text(path.read_text() + "m1,m1,1\n")
    with pytest.raises(align.AlignError, match=f"row {len(pairs) + 2}: 'm1' is preferred to itself"):
        align.read_preferences(path)


# --------------------------------------------------------------------------- issue 52: the tool people trust
def _one_trait(k=40, m=60, seed=0):
    """The issue's clean problem: items answered by a one-parameter logistic model of a normal latent,
    so plain accuracy already orders the models almost as the latent does."""
    rng = np.random.default_rng(seed)
    latent, difficulty = rng.normal(size=k), rng.normal(size=m)
    X = (rng.random((k, m)) < 1 / (1 + np.exp(-(latent[:, None] - difficulty)))).astype(float)
    return X, latent, [f"m{i:02d}" for i in range(k)]


def test_weights_that_rank_worse_out_of_fold_fall_back_to_plain_accuracy_and_say_so(tmp_path):
    """300 noise-free pairs ordered by the latent: the validation RankNet loss falls as the weights spread
    the scores (step > 0 chosen) while they order the models worse than plain accuracy; the benchmark
    then keeps uniform weights and its verdict says it does not beat plain accuracy."""
    X, latent, models = _one_trait()
    rng = np.random.default_rng(0)
    a, b = rng.integers(0, 40, 600), rng.integers(0, 40, 600)
    keep = np.flatnonzero(a != b)[:300]
    win, lose = np.where(latent[a] > latent[b], a, b)[keep], np.where(latent[a] > latent[b], b, a)[keep]
    bench = align.align(align.read_items([_write_items(tmp_path / "i.npz", X, models)]),
                        align.read_preferences(_write_pairs(tmp_path / "p.csv", models, win, lose)))
    assert bench["cv"]["diff"]["pair_acc"] < 0                                 # what the fitted weights did
    assert bench["settings"]["chosen_step"] == 0 and "fell back to uniform weights" in bench["settings"]["note"]
    assert np.allclose(bench["weights"], 1 / 60)
    assert bench["verdict"].startswith("does not beat plain accuracy (cross-validated pair accuracy -")
    assert align.report_lines(bench)[-1] == f"verdict: the aligned benchmark {bench['verdict']}"


def test_a_clear_gain_is_called_one_and_score_marks_the_models_it_learned_from(tmp_path):
    X, latent, models = _world()
    train = np.arange(50)
    w, lo, _ = studies.bt_pairs(latent, train, 20, 0.0, seed=0)
    items = align.read_items([_write_items(tmp_path / "i.npz", X, models)])
    bench = align.align(items, align.read_preferences(_write_pairs(tmp_path / "p.csv", models, w, lo)),
                        max_steps=600)
    assert bench["verdict"].startswith("beats plain accuracy (cross-validated pair accuracy +")
    assert not bench["warnings"]
    scores = align.score(bench, items).set_index("model")
    assert scores.in_sample.sum() == 50 and scores.loc[models[0], "in_sample"]
    assert not scores.loc[models[60], "in_sample"]


def test_preferences_in_two_groups_warn_and_name_the_models_apart(tmp_path, capsys):
    X, latent, models = _world()
    big, small = np.arange(0, 40), np.arange(40, 48)
    w1, l1, _ = studies.bt_pairs(latent, big, 10, 0.0, seed=0)
    w2, l2, _ = studies.bt_pairs(latent, small, 4, 0.0, seed=0)
    prefs = _write_pairs(tmp_path / "p.csv", models, np.r_[w1, w2], np.r_[l1, l2])
    items = _write_items(tmp_path / "i.npz", X, models)
    assert cli.main(["align", "--items", str(items), "--prefs", str(prefs), "--out", str(tmp_path / "b.json"),
                       "--max-steps", "20"]) == 0
    err = capsys.readouterr().err
    assert err.startswith(f"warning: {prefs}: the pairs form 2 groups with no pair between them: the 8 model(s) "
                          "outside the largest (org/model-4") and "cannot be compared with the rest" in err


@pytest.mark.slow                 # starts make / python subprocesses
def test_python_m_and_make_write_the_same_bytes_and_make_score_prints_only_the_csv(tmp_path):
    """The command pins the arithmetic itself: started without the Makefile's variables it writes the
    file `make align` writes; `make score` without OUT= prints the CSV and nothing else."""
    from lib.pipeline.device import PINNED_ARITHMETIC

    X, latent, models = _world(k=30, m=20)
    items = _write_items(tmp_path / "i.npz", X, models)
    w, lo, _ = studies.bt_pairs(latent, np.arange(30), 6, 0.1, seed=0)
    prefs = _write_pairs(tmp_path / "p.csv", models, w, lo)
    bare = {k: v for k, v in os.environ.items() if k not in PINNED_ARITHMETIC}
    subprocess.run([sys.executable, "-m", "runner.align", "align", "--items", str(items), "--prefs", str(prefs),
                    "--out", str(tmp_path / "m.json"), "--max-steps", "60"], cwd=paths.ROOT, env=bare, check=True,
                   capture_output=True)
    made = subprocess.run(["make", "-s", "align", f"ITEMS={items}", f"PREFS={prefs}", f"OUT={tmp_path / 'make.json'}",
                           "ALIGN_ARGS=--max-steps 60"], cwd=paths.ROOT, capture_output=True, text=True)
    assert made.returncode == 0, made.stderr
    assert (tmp_path / "m.json").read_bytes() == (tmp_path / "make.json").read_bytes()
    scored = subprocess.run(["make", "--no-print-directory", "score", f"BENCH={tmp_path / 'make.json'}",
                             f"ITEMS={items}"], cwd=paths.ROOT, capture_output=True, text=True)
    assert scored.returncode == 0, scored.stderr
    assert scored.stdout.splitlines()[0] == "model,aligned_score,rank,plain_accuracy,plain_rank,in_sample"
    assert len(pd.read_csv(io.StringIO(scored.stdout))) == 30


def test_the_python_api_example_of_docs_align_md_runs(tmp_path, monkeypatch, capsys):
    text = (paths.ROOT / "docs" / "align.md").read_text()
    code = text.split("From Python, the same four steps:\n\n```python\n", 1)[1].split("```", 1)[0]
    X, latent, models = _world(k=30, m=12)
    _write_items(tmp_path / "a.npz", X[:, :6], models)
    _write_items(tmp_path / "b.npz", X[:, 6:], models)
    _write_items(tmp_path / "new.npz", X, models, ids=[f"a/{j}" for j in range(6)] + [f"b/{j}" for j in range(6)])
    w, lo, _ = studies.bt_pairs(latent, np.arange(30), 4, 0.0, seed=0)
    _write_pairs(tmp_path / "prefs.csv", models, w, lo)
    monkeypatch.chdir(tmp_path)
    scope: dict = {}
    exec(code.replace("align.align(items, prefs)", "align.align(items, prefs, max_steps=30)"), scope)
    assert capsys.readouterr().out.strip() == scope["bench"]["verdict"]
    assert len(scope["scores"]) == 30 and (tmp_path / "bench.json").exists()
