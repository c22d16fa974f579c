"""BenchAlign item data: sizes from ids, joins by model name, duplicates, bad entries, pipeline files."""

from __future__ import annotations

import json

import numpy as np
import pytest

from lib import layout, store
from lib.benchalign import data


@pytest.mark.parametrize("model, size", [
    ("meta-llama/Meta-Llama-3-70B-Instruct", 70.0), ("Qwen/Qwen2.5-0.5B", 0.5), ("EleutherAI/pythia-6.9b", 6.9),
    ("mistralai/Mixtral-8x7B-v0.1", 56.0), ("mistralai/Mixtral-8x22B-v0.1", 176.0),
    ("bigscience/bloom-7b1", 7.1), ("internlm/internlm2-1_8b", 1.8), ("HuggingFaceTB/SmolLM-135M", 0.135),
    ("Qwen/Qwen2-57B-A14B-Instruct", 57.0), ("allenai/OLMoE-1B-7B-0924", 7.0),
    ("Qwen/Qwen2.5-7B-Instruct-1M", 7.0), ("01-ai/Yi-1.5-34B-32K", 34.0), ("TencentARC/Mistral_Pro_8B_v0.1", 8.0),
    ("gpt2", None), ("microsoft/phi-4", None), ("google/flan-t5-xl", None), ("Qwen/Qwen1.5-MoE-A2.7B", None),
    ("mistralai/Mistral-7B-v0.3", 7.0),
])
def test_sizes_are_parsed_from_model_ids(model, size):
    assert data.parse_size_b(model) == (pytest.approx(size) if size is not None else None)


def _write_npz(folder, name, scores, models):
    (folder / data.OLL_DIR).mkdir(parents=True, exist_ok=True)
    np.savez(folder / data.OLL_DIR / f"{name}.npz", scores=np.asarray(scores, dtype=np.uint8),
             models=np.array(models))


def test_join_by_model_name_not_by_row_and_duplicates_first(tmp_path):
    _write_npz(tmp_path, "feat", [[1, 0], [0, 0], [1, 1], [1, 1]], ["org/a-1B", "org/b-2B", "org/c-70B", "org/a-1B"])
    _write_npz(tmp_path, "more", [[1], [0], [1]], ["org/c-70B", "org/a-1B", "org/z-9B"])        # other order and set
    _write_npz(tmp_path, "tgt", [[1, 1], [0, 1], [0, 0]], ["org/b-2B", "org/c-70B", "org/a-1B"])
    d = data.load_oll(["feat", "more"], "tgt", data=tmp_path)
    assert d.models == ["org/a-1B", "org/c-70B"]                 # b lacks "more"; z lacks feat/tgt
    np.testing.assert_array_equal(d.X, [[1, 0, 0], [1, 1, 1]])   # a: first row of its duplicate kept
    np.testing.assert_allclose(d.target, [0.0, 0.5])
    np.testing.assert_allclose(d.size_b, [1.0, 70.0])
    assert d.info["duplicated_names"]["feat"] == ["org/a-1B"]
    assert list(d.item_benchmark) == ["feat", "feat", "more"] and list(d.item_id) == [0, 1, 0]


def test_duplicate_policies_mean_and_error(tmp_path):
    _write_npz(tmp_path, "feat", [[1, 0], [0, 0], [1, 1]], ["m-1B", "m-2B", "m-1B"])
    X, names, dups = data.read_oll("feat", tmp_path, duplicates="mean")
    assert names == ["m-1B", "m-2B"] and dups == {"m-1B": 2}
    np.testing.assert_allclose(X[0], [1.0, 0.5])
    with pytest.raises(data.ItemDataError, match="'m-1B' occurs 2 times with different rows"):
        data.read_oll("feat", tmp_path, duplicates="error")
    _write_npz(tmp_path, "same", [[1, 0], [1, 0]], ["m-1B", "m-1B"])
    X, names, _ = data.read_oll("same", tmp_path, duplicates="error")   # identical duplicates collapse
    assert names == ["m-1B"] and X.shape == (1, 2)
    with pytest.raises(data.ItemDataError, match="unknown duplicate policy 'last'"):
        data.read_oll("same", tmp_path, duplicates="last")


def test_non_binary_and_nan_entries_are_rejected_with_names(tmp_path):
    _write_npz(tmp_path, "bad", [[1, 2], [0, 1]], ["m-1B", "m-2B"])
    with pytest.raises(data.ItemDataError, match=r"bad.npz: 1 entries are not 0/1, first at model 'm-1B', item 1"):
        data.read_oll("bad", tmp_path)
    (tmp_path / data.OLL_DIR).mkdir(exist_ok=True)
    np.savez(tmp_path / data.OLL_DIR / "nan.npz", scores=np.array([[1.0, np.nan]]), models=np.array(["m-1B"]))
    with pytest.raises(data.ItemDataError, match="NaN or infinite, first at model 'm-1B', item 1"):
        data.read_oll("nan", tmp_path)
    with pytest.raises(data.ItemDataError, match="did you mean 'bad'"):
        data.read_oll("bda", tmp_path)


def test_real_leaderboard_items_join(harmony_data):
    d = data.load_oll(["musr", "openllm_math"], "ifeval", data=harmony_data)
    assert d.X.shape == (428, 756 + 894)
    assert set(np.unique(d.X)) == {0.0, 1.0}
    assert all(len(v) == 19 for v in d.info["duplicated_names"].values())
    with np.load(harmony_data / data.OLL_DIR / "musr.npz") as npz:       # the join is by name
        rows = np.flatnonzero(npz["models"] == "Qwen/Qwen2.5-72B-Instruct")
        expect = npz["scores"][rows[0]]
    i = d.models.index("Qwen/Qwen2.5-72B-Instruct")
    np.testing.assert_array_equal(d.X[i, d.item_benchmark == "musr"], expect)
    sizes = d.size_b[np.isfinite(d.size_b)]
    assert (sizes < 13).sum() > 200 and (sizes >= 70).sum() >= 30


def _items_file(work, bench, model, ids, correct):
    layout.write_items(work, "direct_eval", bench, model, metric="acc", doc_ids=ids, correct=correct)


def make_pipeline_world(root, n_models=8, seed=0):
    """A results store + per-item files like the pipeline writes: sizes 1..n (metadata), two benchmarks."""
    rng = np.random.default_rng(seed)
    st, work = root / "store", root / "work"
    models = [f"tiny-{k}" for k in range(n_models)]
    store.write_meta(st, "models", {m: {"family": "tiny", "params_b": (k + 1) * 1e-4} for k, m in enumerate(models)})
    store.write_meta(st, "benchmarks", {b: {"category": "Math", "metric": "acc"} for b in ("ba", "bb")})
    for k, m in enumerate(models):
        skill = k / n_models
        for b, n in (("ba", 12), ("bb", 9)):
            ids = list(range(100, 100 + n))[::-1]            # file order need not be sorted
            _items_file(work, b, m, ids, (rng.random(n) < 0.2 + 0.6 * skill).astype(int).tolist())
            score = float(0.3 + 0.5 * skill + 0.01 * (b == "bb"))
            store.write(st, store.Result("train_before_test", b, m, "acc", score))
    return st, work, models


def test_pipeline_items_and_target(tmp_path):
    st, work, models = make_pipeline_world(tmp_path)
    _items_file(work, "ba", "orphan", [100], [1])                # no items on bb, no target: left out
    d = data.load_pipeline(st, work)
    assert d.models == models and d.X.shape == (8, 21)
    assert list(d.item_id[:3]) == [100, 101, 102]                # matched by doc id
    raw = json.loads((work / "items/direct_eval/ba/tiny-3.json").read_text())
    by_id = dict(zip(raw["doc_ids"], raw["correct"]))
    np.testing.assert_array_equal(d.X[3, :12], [by_id[i] for i in range(100, 112)])
    np.testing.assert_allclose(d.target, 0.305 + 0.5 * np.arange(8) / 8)
    np.testing.assert_allclose(d.size_b, (np.arange(8) + 1) * 1e-4)
    assert "orphan" in d.info["dropped"]["no items for every benchmark"]


def test_pipeline_item_files_are_validated(tmp_path):
    st, work, _ = make_pipeline_world(tmp_path, n_models=3)
    _items_file(work, "ba", "tiny-1", [100, 101], [1, 1.5])
    with pytest.raises(layout.ItemFileError, match=r"tiny-1.json: values that are not numbers in \[0, 1\], e.g. 1.5"):
        data.load_pipeline(st, work)
    _items_file(work, "ba", "tiny-1", [100, 101], [1, None])
    with pytest.raises(layout.ItemFileError, match="e.g. None"):
        data.load_pipeline(st, work)
    _items_file(work, "ba", "tiny-1", [100, 100], [1, 0])
    with pytest.raises(layout.ItemFileError, match=r"2 doc_ids \(unique: 1\)"):
        data.load_pipeline(st, work)
    with pytest.raises(data.ItemDataError, match="no per-item files for benchmark 'bx'"):
        data.load_pipeline(st, work, ["bx"])
    with pytest.raises(data.ItemDataError, match="unknown data source 'oll'"):
        data.load_source("oll", store=st, work=work)
