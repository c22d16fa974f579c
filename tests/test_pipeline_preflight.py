"""The preflight before any job is submitted: the estimate's arithmetic, jobs split to fit the time
limit, units refused in one line, and the paper's grid with nothing over the limit after splitting."""

from __future__ import annotations

import math

import numpy as np
import pytest

from lib import store
from lib.pipeline import finetune as ft
from lib.pipeline.launch import preflight
from lib.pipeline.spec import JobSpec
from runner import preflight as cli_preflight

N = 1e9                      # parameters of the made-up model
TOK = 400 / 4 + 2            # tokens of an example of 400 characters
HOUR = 1e12 * 3600           # FLOPs in one GPU-hour at 1 TFLOP/s


def test_unit_flops_are_the_stated_arithmetic():
    recipe = ft.Recipe.default()
    task = {"kind": "multiple_choice", "chars_per_example": 400, "plan_train": 1000, "plan_validation": 100,
            "plan_test": 200}
    f = preflight.unit_flops(N, task, recipe)
    assert f["train"] == 4 * N * TOK * 1000 * 5                         # 4 N a trained token, every epoch
    assert f["validation"] == 2 * N * TOK * 100 * 5                     # the loss: each document once an epoch
    assert f["test"] == 2 * N * TOK * 4 * 200                           # four choices a document
    metric = preflight.unit_flops(N, task, ft.Recipe.default(select_on="metric"))
    assert metric["validation"] == 4 * f["validation"]                  # lm-eval scores every choice
    assert preflight.unit_flops(N, task, recipe, checkpointing=True)["train"] == 1.5 * f["train"]   # + a forward
    gen = preflight.unit_flops(N, {**task, "kind": "generate_until"}, recipe, max_gen_toks=256)
    assert gen["test"] == 2 * N * (TOK + 256) * 200
    assert preflight.unit_flops(N, task)["train"] == 0                    # direct evaluation trains nothing
    five = preflight.unit_flops(N, task, num_fewshot=5)                   # issue 42's cheaper protocols
    assert five["test"] == 6 * f["test"] and five["train"] == 0           # five examples before every document
    reduced = preflight.unit_flops(N, task, ft.Recipe.default(lrs=(1e-5,), epochs=1), train_fraction=0.1)
    assert reduced["train"] == f["train"] / 5 / 10 and reduced["test"] == f["test"]


@pytest.mark.slow                 # starts make / python subprocesses
def test_make_preflight_prices_the_cheaper_protocols_a_profile_asks_for(monkeypatch):
    """`make preflight PROFILE=paper` with issue 42's protocols switched on: the k-shot and reduced
    rows sit beside the full protocol's, downstream benchmarks only, and add to the GPU-hours."""
    from lib import params

    plain = cli_preflight.preflight_profile("paper")
    load = params.load_profile

    def with_cheaper(profile, **kw):
        prof = load(profile, **kw)
        stages = prof.stages
        stages["02_finetune"] = {**(stages.get("02_finetune") or {}),
                                 "reduced": {"lr": 5e-5, "epochs": 1, "train_fraction": 0.1}}
        stages["03_direct_eval"] = {**(stages.get("03_direct_eval") or {}), "fewshot": [5]}
        return prof

    monkeypatch.setattr(params, "load_profile", with_cheaper)
    both = cli_preflight.preflight_profile("paper")
    t = both.table
    assert set(t["protocol"]) == {store.TBT, store.REDUCED, "direct_eval_5shot"}
    full = t[t.protocol == store.TBT].set_index(["model", "benchmark"])
    reduced = t[t.protocol == store.REDUCED].set_index(["model", "benchmark"])
    five = t[t.protocol == "direct_eval_5shot"].set_index(["model", "benchmark"])
    assert len(reduced) == len(five) == len(full)                          # the paper has no corpora
    assert (reduced["gpu_hours"] < full.loc[reduced.index, "gpu_hours"]).all()
    ratio = five["test_gpu_hours"] / full.loc[five.index, "test_gpu_hours"]
    assert np.isclose(ratio, 6).mean() > 0.8 and (ratio > 1).all()     # 5 examples + the document (generation: less)
    assert five["gpu_hours"].sum() < full["gpu_hours"].sum()
    assert both.summary["preflight_gpu_hours"] == pytest.approx(t["gpu_hours"].sum())
    assert both.summary["preflight_gpu_hours"] > plain.summary["preflight_gpu_hours"]


def _spec(benchmarks, tmp_path, protocol=store.TBT, **kw):
    return JobSpec(protocol=protocol, model="m", source="m", benchmarks=list(benchmarks), include_paths=[],
                   include_defaults=False, store_root=str(tmp_path / "store"), work_root=str(tmp_path / "work"),
                   recipe=ft.Recipe.default() if protocol == store.TBT else None, **kw)


def _selection(**train_sizes):
    return {"tasks": {b: {"kind": "multiple_choice", "chars_per_example": 400, "plan_train": n, "plan_validation": 0,
                          "plan_test": 0} for b, n in train_sizes.items()}}


def _train_for(hours_per_lr: float) -> int:
    """Training examples that take ``hours_per_lr`` GPU-hours a learning rate at 1 TFLOP/s."""
    return round(hours_per_lr * HOUR / (4 * N * TOK * 5))


@pytest.fixture
def model_of_1b(monkeypatch):
    shape = {"family": "llama", "n_params": N, "layers": 16, "hidden": 2048, "heads": 16, "vocab": 32000}
    monkeypatch.setattr(preflight, "shape_of", lambda source, model=None: shape)
    return shape


def test_jobs_over_the_limit_are_split_and_units_that_cannot_finish_refused(model_of_1b, tmp_path):
    spec = _spec(["small", "big", "huge"], tmp_path)
    selection = _selection(small=_train_for(0.1), big=_train_for(5), huge=_train_for(20))
    pre = preflight.preflight([spec], selection, {"timeout_min": 600}, tflops=1.0)      # 10 h: 9 h to plan with
    assert pre.limit_hours == pytest.approx(9.0) and pre.tflops_source == "given (throughput_tflops)"
    t = pre.table.set_index("benchmark")
    assert t.loc["big", "gpu_hours_per_lr"] == pytest.approx(5, rel=1e-3)
    assert t.loc["big", "gpu_hours"] == pytest.approx(15, rel=1e-3)
    assert list(t["action"]) == [preflight.ONE_JOB, preflight.SPLIT, preflight.REFUSED]
    big = spec.only("big")
    assert pre.specs == [spec.only("small"), *big.by_lr(), big]        # the rates first, then choose and test
    assert [s.only_lr for s in pre.specs] == [None, 1e-5, 2e-5, 5e-5, None]
    assert pre.refused == ["refused: m / huge: one learning rate needs about 20 GPU-hours > 9 h: raise timeout_min, "
                           "lower cap_train, use dtype bfloat16, or give throughput_tflops a measured value"]
    with pytest.raises(preflight.PreflightError, match=r"^1 unit\(s\) cannot finish .*\nrefused: m / huge: "):
        pre.check()
    assert pre.summary["preflight_gpu_hours"] == pytest.approx(0.3 + 15 + 60, rel=1e-3)
    lines = pre.lines()
    assert lines[0].startswith("preflight: 3 units, 5 jobs, about 75.3 GPU-hours in all at 1 TFLOP/s")
    assert any(line.startswith("1 units over the limit run as one job per learning rate") for line in lines)


def test_a_job_that_fits_is_left_alone_and_no_limit_splits_nothing(model_of_1b, tmp_path):
    spec = _spec(["a", "b"], tmp_path)
    selection = _selection(a=_train_for(1), b=_train_for(1))
    assert preflight.preflight([spec], selection, {"timeout_min": 600}, tflops=1.0).specs == [spec]   # 6 h in all
    free = preflight.preflight([spec], _selection(a=_train_for(50), b=0), {}, tflops=1.0)
    assert free.specs == [spec] and free.refused == [] and free.limit_hours is None


def test_memory_back_off_and_refusal(model_of_1b, tmp_path):
    spec = _spec(["a"], tmp_path)
    selection = _selection(a=100)
    roomy = preflight.preflight([spec], selection, {}, tflops=1.0, gpu_memory_gb=80).table.iloc[0]
    assert roomy["micro_batch"] == 8 and not roomy["checkpointing"]
    tight_gb = preflight.training_memory_gb(model_of_1b, "float32", 2, 1024) + 0.1
    tight = preflight.preflight([spec], selection, {}, tflops=1.0, gpu_memory_gb=tight_gb).table.iloc[0]
    assert tight["micro_batch"] == 2 and tight["peak_gb"] > tight_gb                # halved twice, as the back-off
    ckpt_gb = preflight.training_memory_gb(model_of_1b, "float32", 1, 1024, checkpointing=True) + 0.1
    ckpt = preflight.preflight([spec], selection, {}, tflops=1.0, gpu_memory_gb=ckpt_gb)
    row = ckpt.table.iloc[0]
    assert row["micro_batch"] == 1 and row["checkpointing"]
    plain = preflight.preflight([spec], selection, {}, tflops=1.0).table.iloc[0]
    assert row["gpu_hours_per_lr"] > plain["gpu_hours_per_lr"]                     # recomputation counted
    refused = preflight.preflight([spec], selection, {}, tflops=1.0, gpu_memory_gb=2.0)
    assert refused.refused[0].startswith("refused: m / a: does not fit 2 GB even at micro-batch 1 with gradient "
                                         "checkpointing")


def test_direct_evaluation_is_never_split_only_refused(model_of_1b, tmp_path):
    spec = _spec(["a"], tmp_path, protocol=store.DIRECT)
    selection = {"tasks": {"a": {"kind": "multiple_choice", "chars_per_example": 400, "plan_test": 10_000_000}}}
    pre = preflight.preflight([spec], selection, {"timeout_min": 60}, tflops=1.0)
    assert pre.specs == [] and pre.refused[0].startswith("refused: m / a: its test needs about")


def test_the_throughput_comes_from_the_parameter_a_slice_run_or_the_assumption(tmp_path, monkeypatch):
    from lib import paths

    monkeypatch.setattr(paths, "stage_dir", lambda profile, stage: tmp_path / profile / stage)
    assert preflight.throughput("float32") == (15.0, "assumed for float32 (no paper_slice run has measured it)")
    (tmp_path / "paper_slice" / "02_finetune").mkdir(parents=True)
    (tmp_path / "paper_slice" / "02_finetune" / "summary.json").write_text('{"measured_tflops": {"float32": 21.5}}')
    assert preflight.throughput("float32") == (21.5, "measured by the paper_slice run")
    assert preflight.throughput("bfloat16")[1].startswith("assumed")                 # measured in another dtype
    assert preflight.throughput("float32", 7.0) == (7.0, "given (throughput_tflops)")


@pytest.mark.slow
def test_the_papers_grid_fits_the_time_limit_after_splitting():
    """The paper profile offline (its training counts, validation and test at their caps, model sizes
    from lib.metadata): every job of the split grid fits 90 % of timeout_min and none is refused."""
    pre = cli_preflight.preflight_profile("paper")
    t = pre.table
    assert len(t) == 61 * 24 and not pre.refused and set(t["action"]) <= {preflight.ONE_JOB, preflight.SPLIT}
    units = t.set_index(["model", "benchmark"])
    for spec in pre.specs:
        (bench,) = spec.benchmarks
        row = units.loc[(spec.model, bench)]
        hours = row["gpu_hours_per_lr"] if spec.only_lr is not None else \
            row["test_gpu_hours"] if row["action"] == preflight.SPLIT else row["gpu_hours"]
        assert hours <= pre.limit_hours, (spec.model, bench, spec.only_lr, hours)
    split = t[t["action"] == preflight.SPLIT]
    assert len(pre.specs) == len(t) + 3 * len(split) and len(split) > 0
    assert ("Qwen/Qwen2.5-14B", "mnli") in set(zip(split["model"], split["benchmark"]))
    assert math.isclose(pre.summary["preflight_gpu_hours"], t["gpu_hours"].sum(), rel_tol=1e-6)


def test_a_model_recorded_by_its_portable_name_is_read_where_it_lies_now(tmp_path, monkeypatch):
    """Results name a local model folder portably (``outputs:<profile>/work/models/x``, issue 19);
    the preflight's shape (and 02's measured throughput) read its config from where that name points."""
    from lib import paths
    from lib.pipeline import tiny

    folder = tmp_path / "prof" / "work" / "models" / "tiny"
    tok = tiny.train_tokenizer(["a b c d e f g h"] * 20, 300)
    tiny.make_model("llama", tok, d_model=16, n_layers=1, n_heads=2).config.save_pretrained(folder)
    monkeypatch.setattr(paths, "OUTPUTS", tmp_path)
    shape = preflight.model_shape("outputs:prof/work/models/tiny")
    assert shape["n_params"] > 0
    assert str(paths.located("Qwen/Qwen2-7B")) == "Qwen/Qwen2-7B"             # a hub id: as it is
