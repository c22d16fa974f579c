"""Issue 19: nothing stale, nothing silent. Content (never location) decides "cached"; a unit is
finished only when all its files are; every failure ends in one line with what to do, exit code 2
and the traceback in a log; interactive runs cannot leave damage cached; 07 resumes.

A deleted or corrupt ``unit.json`` of real fine-tuning units is in ``test_pipeline_jobs.py``."""

from __future__ import annotations

import dataclasses
import errno
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbclient
import nbformat
import numpy as np
import pytest
from notebook_project import READER, notebook

from lib import data, layout, params, paths, published, store, util
from lib.benchalign import data as bdata
from lib.benchalign import experiments as ex
from lib.benchalign import memo, methods
from lib.pipeline import evaluate as ev
from lib.pipeline import finetune as ft
from lib.pipeline import spec as spec_mod
from lib.pipeline.spec import JobSpec
from runner import failures, kernel, run, stagecache, status
from runner.published import import_store

# --------------------------------------------------------------------------- a tiny project of notebooks
# notebook, WRITER, READER and the project fixture: tests/notebook_project.py


def _errors(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("error:")]


def _log_of(line: str) -> Path:
    return Path(line.rsplit("traceback in ", 1)[1].rstrip(")"))


# --------------------------------------------------------------------------- content, not location
def test_recorded_paths_are_relative_to_their_folder_and_survive_a_link(tmp_path, monkeypatch):
    out, other = tmp_path / "outputs", tmp_path / "bigdisk"
    (other / "smoke").mkdir(parents=True)
    out.mkdir()
    (out / "smoke").symlink_to(other / "smoke")                    # outputs/smoke moved to another disk
    (other / "smoke" / "a.json").write_text("{}")
    monkeypatch.setattr(paths, "OUTPUTS", out)
    assert paths.portable(out / "smoke" / "a.json") == "outputs:smoke/a.json"
    assert paths.located("outputs:smoke/a.json") == out / "smoke" / "a.json"
    monkeypatch.setattr(paths, "OUTPUTS", tmp_path / "link")
    (tmp_path / "link").symlink_to(out)                             # the whole outputs folder reached by a link
    assert paths.portable(tmp_path / "link" / "smoke" / "a.json") == "outputs:smoke/a.json"
    assert paths.portable(out / "smoke" / "a.json") == "outputs:smoke/a.json"
    monkeypatch.setenv(paths.DATA_ENV, str(tmp_path / "data"))
    assert paths.portable(tmp_path / "data" / "oll-v2-items" / "ifeval.npz") == "data:oll-v2-items/ifeval.npz"
    assert paths.portable(paths.ROOT / "lib" / "store.py") == "repo:lib/store.py"


def test_a_relative_harmony_data_is_read_from_the_repository_root(monkeypatch, tmp_path):
    monkeypatch.chdir(paths.NOTEBOOKS)                              # a JupyterLab kernel's working directory
    monkeypatch.setenv(paths.DATA_ENV, "../shared/data")
    assert paths.data_root() == (paths.ROOT / "../shared/data").resolve()
    monkeypatch.setenv(paths.DATA_ENV, str(tmp_path))
    assert paths.data_root() == tmp_path


def _stage_folder(tmp_path, monkeypatch, data_dir: Path) -> tuple[Path, dict]:
    """A stage folder whose stamp says it read ``ifeval.npz`` of the published data."""
    monkeypatch.setattr(paths, "OUTPUTS", tmp_path / "outputs")
    monkeypatch.setenv(paths.DATA_ENV, str(data_dir))
    out = tmp_path / "outputs" / "x" / "07_demo"
    out.mkdir(parents=True)
    (out / "summary.json").write_text('{"rho": 0.5}\n')
    read = data_dir / "oll-v2-items" / "ifeval.npz"
    key = {"notebook": "n", "params": {"n": 1}, "lib": {}}
    util.mark(out / paths.STAGE_STAMP, key, reads={paths.portable(read): util.digest(read)},
              outputs=stagecache.results_digest(out))
    return out, key


def _data_copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("_raw"))
    for p in [dst, *dst.rglob("*")]:
        p.chmod(0o755 if p.is_dir() else 0o644)
    return dst


def test_a_stage_is_stale_when_what_it_read_or_wrote_differs_wherever_it_lies(tmp_path, monkeypatch, harmony_data):
    """Reads are compared by content under the data folder HARMONY_DATA names now: an identical
    copy elsewhere is the same input; the same name with other content is not. A summary that does
    not parse, or outputs changed since (JupyterLab), make the stage stale."""
    first = _data_copy(harmony_data, tmp_path / "first")
    out, key = _stage_folder(tmp_path, monkeypatch, first)
    assert stagecache.stale(out, key) is None
    monkeypatch.setenv(paths.DATA_ENV, str(_data_copy(harmony_data, tmp_path / "identical")))
    assert stagecache.stale(out, key) is None                              # identical data elsewhere: cached
    flipped = _data_copy(harmony_data, tmp_path / "flipped")
    with np.load(flipped / "oll-v2-items" / "ifeval.npz") as npz:
        np.savez_compressed(flipped / "oll-v2-items" / "ifeval.npz", scores=1 - npz["scores"], models=npz["models"])
    monkeypatch.setenv(paths.DATA_ENV, str(flipped))
    assert stagecache.stale(out, key) == "data:oll-v2-items/ifeval.npz changed"
    monkeypatch.setenv(paths.DATA_ENV, str(first))
    assert stagecache.stale(out, {**key, "params": {"n": 2}}) == "its parameters changed (n)"
    (out / "summary.json").write_text('{"rho": ')
    assert stagecache.stale(out, key) == "its summary.json does not parse"
    (out / "summary.json").write_text('{"rho": 0.5}\n')
    (out / "figures").mkdir()
    (out / "figures" / "rho.pdf").write_bytes(b"%PDF CreationDate now")        # a figure drawn again by hand
    assert stagecache.stale(out, key) is None
    (out / "numbers.tex").write_text("\\newcommand{\\Rho}{None}\n")      # written by a notebook run by hand
    assert stagecache.stale(out, key) == "its outputs differ from what its last run wrote"


@pytest.mark.slow
def test_a_summary_that_does_not_parse_reruns_its_stage_not_the_next_one_failing(project):
    notebook(project / "notebooks" / "02_reader.ipynb", READER)
    (project / "params" / "x.yaml").write_text("description: demo\nstages:\n  01_demo: {n: 7}\n  02_reader:\n")
    assert [s["status"] for s in run.run_profile("x").values()] == ["ran", "ran"]
    summary = project / "outputs" / "x" / "01_demo" / "summary.json"
    summary.write_text('{"n_squared": ')
    log = run.run_profile("x")
    assert log["01_demo"]["status"] == "ran" and log["02_reader"]["status"] == "cached"   # same summary again
    assert json.loads(summary.read_text()) == {"n_squared": 49}


@pytest.mark.slow
def test_moved_or_linked_outputs_stay_cached(project, monkeypatch):
    """outputs/x moved to another disk and linked back, then the whole outputs folder moved (as with
    a moved checkout): every stage stays cached."""
    notebook(project / "notebooks" / "02_reader.ipynb", READER)
    (project / "params" / "x.yaml").write_text("description: demo\nstages:\n  01_demo: {n: 7}\n  02_reader:\n")
    assert [s["status"] for s in run.run_profile("x").values()] == ["ran", "ran"]
    shutil.move(project / "outputs" / "x", project / "disk")
    (project / "outputs" / "x").symlink_to(project / "disk")
    assert [s["status"] for s in run.run_profile("x").values()] == ["cached", "cached"]
    (project / "outputs" / "x").unlink()
    shutil.move(project / "disk", project / "elsewhere" / "x")
    monkeypatch.setenv("TBT_OUTPUTS", str(project / "elsewhere"))
    monkeypatch.setattr(paths, "OUTPUTS", project / "elsewhere")
    assert [s["status"] for s in run.run_profile("x").values()] == ["cached", "cached"]


DATA_READER = """
from lib import notebook, outputs, params
from lib.benchalign import data as bdata
ctx = notebook.stage("01_demo", globals())
scores, models, _ = bdata.read_oll("ifeval")
outputs.write_summary(ctx.out, {"mean": float(scores.mean()), "n": n})
"""


@pytest.mark.slow
def test_other_data_under_harmony_data_reruns_the_stage_that_read_it(project, monkeypatch, capfd, harmony_data):
    """HARMONY_DATA pointed at an identical copy: cached. At a copy whose ifeval.npz has every item
    flipped: the stage runs again and reports the new data's numbers. At a truncated copy: one line
    naming the file and how to restore it, exit code 2."""
    notebook(project / "notebooks" / "01_demo.ipynb", DATA_READER)
    first = _data_copy(harmony_data, project / "first")
    monkeypatch.setenv(paths.DATA_ENV, str(first))
    assert run.run_profile("x")["01_demo"]["status"] == "ran"
    summary = project / "outputs" / "x" / "01_demo" / "summary.json"
    mean = json.loads(summary.read_text())["mean"]
    monkeypatch.setenv(paths.DATA_ENV, str(_data_copy(harmony_data, project / "identical")))
    assert run.run_profile("x")["01_demo"]["status"] == "cached"
    flipped = _data_copy(harmony_data, project / "flipped")
    with np.load(flipped / "oll-v2-items" / "ifeval.npz") as npz:
        np.savez_compressed(flipped / "oll-v2-items" / "ifeval.npz", scores=1 - npz["scores"], models=npz["models"])
    monkeypatch.setenv(paths.DATA_ENV, str(flipped))
    assert run.run_profile("x")["01_demo"]["status"] == "ran"
    assert json.loads(summary.read_text())["mean"] == pytest.approx(1 - mean)
    truncated = _data_copy(harmony_data, project / "truncated")
    npz = truncated / "oll-v2-items" / "ifeval.npz"
    npz.write_bytes(npz.read_bytes()[:1000])
    monkeypatch.setenv(paths.DATA_ENV, str(truncated))
    capfd.readouterr()
    assert run.main(["x"]) == 2
    err = _errors(capfd.readouterr().err)
    assert len(err) == 1 and "corrupt data file" in err[0] and "oll-v2-items/ifeval.npz" in err[0], err
    assert "make data" in err[0] and "Traceback" in _log_of(err[0]).read_text()


# --------------------------------------------------------------------------- units are keyed on content
def _model(folder: Path, weights: bytes = b"w" * 64) -> Path:
    folder.mkdir(parents=True)
    (folder / "config.json").write_text('{"model_type": "llama"}')
    (folder / "model.safetensors").write_bytes(weights)
    (folder / "pretrain.json").write_text('{"seconds": 12.5}')       # a build record: not the model
    return folder


def _spec(source: Path | str, work: Path, lrs=(1e-3, 3e-3)) -> JobSpec:
    recipe = ft.Recipe.default(lrs=lrs, epochs=2, lora_r=4, lora_alpha=8, lora_dropout=0.0, batch_size=2,
                               max_length=64, weight_decay=0.0)
    return JobSpec(protocol=store.TBT, model="m", source=str(source), benchmarks=["b"], include_paths=[],
                   include_defaults=False, store_root=str(work / "store"), work_root=str(work / "work"), recipe=recipe)


def test_a_unit_is_keyed_on_the_model_content_not_its_path(tmp_path):
    a = _model(tmp_path / "a" / "models" / "m")
    key = _spec(a, tmp_path).config(1e-3)
    assert str(tmp_path) not in json.dumps(key) and key["model"].startswith("sha256:")
    moved = tmp_path / "elsewhere" / "m"
    shutil.copytree(a, moved)
    (moved / "pretrain.json").write_text('{"seconds": 99}')
    assert _spec(moved, tmp_path / "w2").config(1e-3) == key          # moved (and timed again): the same model
    (a / "model.safetensors").write_bytes(b"v" * 64)                   # rebuilt in place with other weights
    assert _spec(a, tmp_path).config(1e-3)["model"] != key["model"]
    assert ev.model_key("org/model-that-is-not-cached").startswith("hub:org/model-that-is-not-cached")


def test_the_zoo_records_model_folders_relative_to_the_store(tmp_path, monkeypatch):
    root = tmp_path / "outputs" / "p" / "store"
    model = _model(tmp_path / "outputs" / "p" / "work" / "models" / "m")
    rel = store.relative_meta_path(root, model)
    assert rel == "../work/models/m"
    store.write_meta(root, "models", {"m": {"family": "f", "path": rel}})
    shutil.move(tmp_path / "outputs", tmp_path / "bigdisk")            # outputs moved to another disk
    name, source = ev.resolve_model("m", tmp_path / "bigdisk" / "p" / "store")
    assert name == "m" and Path(source) == tmp_path / "bigdisk" / "p" / "work" / "models" / "m"
    monkeypatch.setattr(paths, "OUTPUTS", tmp_path / "bigdisk")          # a profile's models under outputs/
    model = tmp_path / "bigdisk" / "p" / "work" / "models" / "m"
    assert store.relative_meta_path(tmp_path / "bigdisk" / "p" / "store", model) == "outputs:p/work/models/m"
    copy = tmp_path / "copy"                                           # a copy of the store (tests make them)
    store.write_meta(copy, "models", {"m": {"family": "f", "path": "outputs:p/work/models/m"}})
    assert Path(ev.resolve_model("m", copy)[1]) == model


def _unit(work: Path, lr: float, config: dict, best: int = 2, adapter: bool = True) -> Path:
    udir = layout.unit_dir(work, "m", "b", lr)
    if adapter:
        a = layout.adapter_dir(udir, best)
        a.mkdir(parents=True)
        (a / "adapter_config.json").write_text("{}")
        header = json.dumps({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}).encode()
        (a / "adapter_model.safetensors").write_bytes(len(header).to_bytes(8, "little") + header + b"\0" * 8)
    curve = [{"epoch": e, "val_loss": 2.0 - 0.1 * e * (e <= best), "train_loss": 1.0} for e in (1, 2)]
    layout.write_unit(udir, {"lr": lr, "curve": curve, "criterion": "val_loss", "best_epoch": best,
                             "adapter": str(layout.adapter_dir(udir, best)), "config": config})
    return udir


def test_a_unit_is_finished_only_when_all_its_files_are(tmp_path):
    """The result, its per-item file, every learning rate's unit.json and the chosen adapter: any of
    them missing or damaged makes the (model, benchmark) unfinished, with the reason."""
    spec = _spec(_model(tmp_path / "m"), tmp_path)
    work = Path(spec.work_root)
    units = {lr: _unit(work, lr, spec.config(lr), adapter=lr == 3e-3) for lr in spec.recipe.lrs}
    layout.write_items(work, store.TBT, "b", "m", metric="acc", doc_ids=[0, 1], correct=[1.0, 0.0])
    assert spec.unfinished("b") == ""                                  # no result: simply not made
    store.write(spec.store_root, store.Result(store.TBT, "b", "m", "acc", 0.5, provenance={
        "config": spec.config(), "lr": 3e-3, "kind": "multiple_choice"}))
    assert spec.unfinished("b") is None and spec.done("b")
    assert json.loads((units[1e-3] / "unit.json").read_text())["adapter"] == "epoch=2"   # no absolute path
    assert ft.read_unit(units[3e-3]).adapter == str(layout.adapter_dir(units[3e-3], 2))

    def broken(damage, *expected):
        backup = {p: p.read_bytes() for p in work.rglob("*") if p.is_file()}
        damage()
        why = spec.unfinished("b")
        for p, content in backup.items():
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_bytes(content)
        assert why and all(e in why for e in expected), why

    broken(lambda: (units[1e-3] / "unit.json").unlink(), "lr=0.001 has no unit.json")
    broken(lambda: (units[1e-3] / "unit.json").write_text('{"lr": '), "lr=0.001/unit.json does not parse")
    broken(lambda: (units[1e-3] / "unit.json").write_text(json.dumps(
        {**json.loads((units[1e-3] / "unit.json").read_text()), "curve": []})), "no validation curve")
    broken(lambda: shutil.rmtree(units[3e-3] / "epoch=2"), "the adapter", "is missing")
    weights = units[3e-3] / "epoch=2" / "adapter_model.safetensors"
    broken(lambda: weights.write_bytes(weights.read_bytes()[:20]), "adapter_model.safetensors is truncated")
    items = layout.items_path(work, store.TBT, "b", "m")
    broken(lambda: items.unlink(), "per-item file", "is missing")
    broken(lambda: items.write_text("{"), "per-item file", "damaged")
    assert spec.unfinished("b") is None                                # a pruned adapter of another lr is fine
    items.unlink()                                                     # a metric without per-item values
    store.write(spec.store_root, store.Result(store.TBT, "b", "m", "acc", 0.5, provenance={
        "config": spec.config(), "lr": 3e-3, "kind": "generate_until", "per_item": False}))
    assert spec.unfinished("b") is None
    path = store.path_for(spec.store_root, store.TBT, "b", "m")
    path.write_text(path.read_text().replace('"score": 0.5', '"score": NaN'))
    assert "is damaged" in spec.unfinished("b")


# --------------------------------------------------------------------------- units follow the code
def test_a_code_digest_ignores_comments_and_docstrings_but_not_behaviour(tmp_path):
    src = tmp_path / "m.py"
    src.write_text('"""Doc."""\ndef f(x):\n    """Doc."""\n    return x * 1.0\n')
    before = util.code_digest(src)
    src.write_text('"""Other doc."""\n# a comment\ndef f(x):\n    """Other."""\n\n    return x * 1.0  # why\n')
    assert util.code_digest(src) == before
    src.write_text('"""Doc."""\ndef f(x):\n    """Doc."""\n    return x * 0.05\n')
    assert util.code_digest(src) != before


def test_a_training_change_redoes_the_units_of_older_code_and_a_comment_does_not(tmp_path, monkeypatch):
    """The issue-50 trial on a copy of lib: max_norm 1.0 -> 0.05 in the training step makes a stored
    result 'computed by other code', naming the file; a comment changes nothing. The library
    versions are part of the key too."""
    root = tmp_path / "repo"
    shutil.copytree(paths.ROOT / "lib", root / "lib", ignore=shutil.ignore_patterns("__pycache__"))
    step = root / "lib" / "pipeline" / "training.py"
    uncached = spec_mod.code_version.__wrapped__
    today = uncached(root)
    assert set(today) == {"lib", "libraries", "arithmetic"} and "lib/pipeline/training.py" in today["lib"]
    assert today["libraries"]["torch"].startswith("2.13.0") and "lm_eval" in today["libraries"]
    step.write_text(step.read_text().replace("def optimizer_step(", "# clipped as the paper does\ndef optimizer_step("))
    assert uncached(root) == today
    step.write_text(step.read_text().replace("max_norm: float = 1.0", "max_norm: float = 0.05"))
    changed = uncached(root)
    assert changed["lib"]["lib/pipeline/training.py"] != today["lib"]["lib/pipeline/training.py"]
    assert spec_mod.code_change(today, changed) == "computed by other code (lib/pipeline/training.py changed)"
    newer = {**today, "libraries": {**today["libraries"], "torch": "2.14.1"}}
    assert f"torch {today['libraries']['torch']} -> 2.14.1" in spec_mod.code_change(today, newer)
    assert spec_mod.code_change(None, today) == "computed before units recorded their code"

    spec = _spec(_model(tmp_path / "m"), tmp_path)           # a result of today's code, read after the change
    monkeypatch.setattr(spec_mod, "code_version", lambda root=None: today)
    store.write(spec.store_root, store.Result(store.TBT, "b", "m", "acc", 0.5, provenance={
        "config": spec.config(), "lr": 1e-3, "kind": "generate_until", "per_item": False}))
    for lr in spec.recipe.lrs:
        _unit(Path(spec.work_root), lr, spec.config(lr), adapter=lr == 1e-3)
    assert spec.unfinished("b") is None
    monkeypatch.setattr(spec_mod, "code_version", lambda root=None: changed)
    assert spec.unfinished("b") == "computed by other code (lib/pipeline/training.py changed)"
    assert status.older_code(spec.store_root) == {"computed by other code (lib/pipeline/training.py changed)": 1}
    assert all(ft.read_unit(layout.unit_dir(spec.work_root, "m", "b", lr), spec.config(lr)) is None
               for lr in spec.recipe.lrs)                      # and no unit of it is reused either


@pytest.mark.parametrize("method, kept", [("full", True), ("lora", False)])
def test_a_field_the_method_ignores_retrains_nothing(tmp_path, method, kept):
    """Issue 51's trap: under ``method: full`` the LoRA fields are unused, so a changed ``lora_r``
    leaves every finished unit and result current; under LoRA it redoes them."""
    spec = _spec(_model(tmp_path / "m"), tmp_path)
    spec = dataclasses.replace(spec, recipe=dataclasses.replace(spec.recipe, method=method))
    store.write(spec.store_root, store.Result(store.TBT, "b", "m", "acc", 0.5, provenance={
        "config": spec.config(), "lr": 1e-3, "kind": "generate_until", "per_item": False}))
    for lr in spec.recipe.lrs:
        _unit(Path(spec.work_root), lr, spec.config(lr), adapter=lr == 1e-3)
    assert spec.unfinished("b") is None
    other = dataclasses.replace(spec, recipe=dataclasses.replace(spec.recipe, lora_r=64, lora_modules="all"))
    assert (other.unfinished("b") is None) == kept
    assert all((ft.read_unit(layout.unit_dir(spec.work_root, "m", "b", lr), other.config(lr)) is not None) == kept
               for lr in spec.recipe.lrs)


def test_force_redoes_results_and_units_written_before_the_forced_run(tmp_path, monkeypatch):
    with run._forced(123.0):                                   # the runner sets it for a forced stage only
        assert os.environ[util.FORCE_ENV] == "123.0"
    assert util.FORCE_ENV not in os.environ
    spec = _spec(_model(tmp_path / "m"), tmp_path)
    store.write(spec.store_root, store.Result(store.TBT, "b", "m", "acc", 0.5, provenance={
        "config": spec.config(), "lr": 1e-3, "kind": "generate_until", "per_item": False}))
    units = [_unit(Path(spec.work_root), lr, spec.config(lr), adapter=lr == 1e-3) for lr in spec.recipe.lrs]
    assert spec.unfinished("b") is None
    monkeypatch.setenv(util.FORCE_ENV, str(time.time() + 1))
    assert spec.unfinished("b") == "FORCE=1 redoes it"
    assert ft.read_unit(units[0], spec.config(1e-3)) is None
    curves = layout.curves_frame(spec.work_root, ["m"], ["b"])   # an analysis forced after it still reads them
    assert sorted(curves["lr"].unique()) == sorted(spec.recipe.lrs)
    monkeypatch.setenv(util.FORCE_ENV, str(time.time() - 60))  # written after the forced run began: kept
    assert spec.unfinished("b") is None and ft.read_unit(units[0], spec.config(1e-3)) is not None


# --------------------------------------------------------------------------- one line for every failure
def test_a_bad_store_result_names_the_file_and_the_command(tmp_path, monkeypatch):
    monkeypatch.setattr(paths, "OUTPUTS", tmp_path / "outputs")
    root = paths.store_dir("smoke")
    path = store.write(root, store.Result("direct_eval", "b", "m", "acc", 0.5))
    path.write_text(path.read_text().replace('"score": 0.5', '"score": NaN'))
    with pytest.raises(store.StoreError, match=r"\.json.*score must be a finite number.*delete it and run "
                                               r"`make all PROFILE=smoke`"):
        store.read(path)


def test_a_corrupt_data_file_is_named_with_how_to_restore_it(tmp_path, monkeypatch, harmony_data):
    copy = _data_copy(harmony_data, tmp_path / "data")
    npz = copy / "oll-v2-items" / "ifeval.npz"
    npz.write_bytes(npz.read_bytes()[:1000])                            # truncated
    monkeypatch.setenv(paths.DATA_ENV, str(copy))
    with pytest.raises(data.CorruptData, match=r"corrupt data file .*oll-v2-items/ifeval\.npz \(BadZipFile.*"
                                               r"`unset HARMONY_DATA; make data`"):
        bdata.read_oll("ifeval")
    results = copy / published.RESULTS_FILE
    results.write_text(results.read_text()[:5000])
    with pytest.raises(store.StoreError, match="corrupt data file .*all_results.json .*a good copy has sha256 "
                                               + data.expected_sha256(published.RESULTS_FILE)):
        import_store("p", source=None)


@pytest.mark.parametrize("damage", ["truncated", "nan"])
def test_a_bad_published_results_file_ends_in_one_line_exit_2_and_a_log(tmp_path, monkeypatch, capfd, harmony_data,
                                                                     damage):
    copy = _data_copy(harmony_data, tmp_path / "data")
    results = copy / published.RESULTS_FILE
    text = results.read_text()
    results.write_text(text[:len(text) // 2] if damage == "truncated" else text.replace("0.", "NaN + 0.", 1))
    monkeypatch.setenv(paths.DATA_ENV, str(copy))
    monkeypatch.setattr(paths, "OUTPUTS", tmp_path / "outputs")
    assert run.main(["published"]) == 2
    err = capfd.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: StoreError: corrupt data file"), err
    assert "all_results.json" in err[0] and "make data" in err[0]
    assert "Traceback" in _log_of(err[0]).read_text()


def test_a_notebook_that_does_not_parse_says_git_checkout(project, capfd):
    (project / "notebooks" / "01_demo.ipynb").write_text('{"cells": [')
    assert run.main(["x"]) == 2
    err = capfd.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "01_demo.ipynb: cannot read its parameters cell" in err[0]
    assert "`git checkout " in err[0] and "01_demo.ipynb` restores the committed notebook" in err[0]


def test_os_errors_name_the_folder_and_the_space(monkeypatch):
    full = failures.os_error_line(errno.ENOSPC, str(paths.OUTPUTS / "smoke" / "02_finetune" / "x.json"), "smoke")
    assert full.startswith(f"disk full writing {paths.show(paths.OUTPUTS / 'smoke' / '02_finetune' / 'x.json')} (")
    assert " free on the disk of " in full
    assert "free space there, then run `make all PROFILE=smoke` again" in full and "ln -s" in full
    # no file named and outputs/ has room: the full disk is the one named (here the temporary folder)
    real = shutil.disk_usage
    monkeypatch.setattr(failures.shutil, "disk_usage", lambda p: real(p)._replace(
        free=0 if str(p) == tempfile.gettempdir() else 10 << 30))
    line = failures.os_error_line(errno.ENOSPC, None, "smoke", failures.Where(profile="smoke"))
    assert f"0 B free on the disk of {paths.show(Path(tempfile.gettempdir()))}" in line, line
    ro = failures.os_error_line(errno.EROFS, "/tmp/x", "smoke")
    assert ro.startswith("/tmp is on a read-only file system: remount it read-write, or move outputs/ to another disk")
    assert "everything made so far stays cached" in ro and ro.endswith("then run `make all PROFILE=smoke` again")


RAISE = {   # a cell body -> what the one line must say
    "store": ("import math\nfrom lib import store\np = store.write(ctx.store, store.Result('direct_eval', 'b', 'm', "
              "'acc', 0.5))\np.write_text(p.read_text().replace('0.5', 'NaN'))\nstore.read(p)",
              ["StoreError:", "score must be a finite number", "delete it and run `make all PROFILE=x`"]),
    "read-only": ("raise OSError(30, 'Read-only file system', str(ctx.out / 'table.csv'))",
                  ["01_demo is on a read-only file system", "ln -s"]),
    "full": ("raise OSError(28, 'No space left on device', str(ctx.out / 'table.csv'))",
             ["disk full writing ", "table.csv", "free on the disk of", "holds"]),
    "units": ("from lib.pipeline.launch import outcome\nfrom lib.pipeline.spec import JobSpec\n"
              "spec = JobSpec('direct_eval', 'm', 'm', ['b'], [], False, str(ctx.store), str(ctx.work))\n"
              "full = {'b': 'OSError: [Errno 28] No space left on device'}\n"
              "outcome.summarise([outcome.JobOutcome.of(spec, failed=full)], [spec])",
              ["disk full writing ", "free space there, then run"]),
    "failed-units": ("from lib.pipeline.launch import outcome\nfrom lib.pipeline.spec import JobSpec\n"
                     "spec = JobSpec('direct_eval', 'm', 'm', ['b'], [], False, str(ctx.store), str(ctx.work))\n"
                     "outcome.summarise([outcome.JobOutcome.of(spec, failed={'b': 'ValueError: bad'})], [spec])",
                     ["1 unit(s) failed and 0 run elsewhere", "(listed above)"]),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(RAISE))
def test_every_failure_in_a_stage_ends_in_one_line_exit_2_and_the_traceback_in_a_log(project, capfd, case):
    body, expected = RAISE[case]
    notebook(project / "notebooks" / "01_demo.ipynb",
              "from lib import notebook, params\nctx = notebook.stage('01_demo', globals())", body)
    assert run.main(["x"]) == 2
    captured = capfd.readouterr()
    err = _errors(captured.err)
    assert len(err) == 1 and err[0].startswith("error: [x] 01_demo: "), captured.err
    assert all(e in err[0] for e in expected), err[0]
    log = _log_of(err[0]).read_text()
    assert "Traceback" in log and "the failed cell's traceback" in log
    if case == "failed-units":                                          # the failed units listed once, not twice
        assert (captured.out + captured.err).count("FAILED direct_eval m / b") == 1
    if case == "units":                                                 # a full disk is the one line, no list
        assert "FAILED" not in captured.out + captured.err


PROGRESSING = """
import time
from lib import notebook, outputs, params
from lib.progress import Progress
ctx = notebook.stage("01_demo", globals())
with Progress(20, "demo units", every=0) as bar:
    for i in range(20):
        time.sleep(0.5)
        bar.advance()
outputs.write_summary(ctx.out, {"done": 20})
"""


@pytest.mark.slow
def test_ctrl_c_ends_in_one_line_saying_where_make_all_resumes(project):
    notebook(project / "notebooks" / "01_demo.ipynb", PROGRESSING)
    proc = subprocess.Popen([sys.executable, "-m", "runner.run", "x"], cwd=paths.ROOT, env=dict(os.environ),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    heartbeat = project / "outputs" / "x" / "01_demo" / ".heartbeat"
    deadline = time.time() + 180
    while time.time() < deadline:
        done = heartbeat.read_text().split(" ")[0] if heartbeat.exists() else ""
        if done.isdigit() and 3 <= int(done) < 18:          # well inside the work (a wide window: a loaded
            break                                            # machine may poll late)
        time.sleep(0.1)
    proc.send_signal(signal.SIGINT)                                     # Ctrl-C
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 2, (out, err)
    lines = [line for line in err.splitlines() if not line.startswith("[01_demo]")]     # the kernel's progress lines
    assert len(lines) == 1 and "Traceback" not in err, err
    assert "interrupted in 01_demo (stage 1 of 1); `make all PROFILE=x` resumes from" in lines[0]
    assert " of 20 units of demo units (finished units are kept)" in lines[0]
    assert "KeyboardInterrupt" in _log_of(lines[0]).read_text()


# --------------------------------------------------------------------------- interactive runs
@pytest.mark.slow
def test_a_value_changed_by_hand_is_used_and_the_default_takes_the_profiles(project):
    """Profile x sets n = 7; the notebook's default is 1. A cell typed in JupyterLab with n = 3 runs
    with 3, clears the stamp and says so, and the next run redoes the stage with 7; n = 1, the
    default, takes the profile's 7 (nothing is guessed from the kernel's history or git)."""
    out = project / "outputs" / "x" / "01_demo"
    assert run.run_profile("x")["01_demo"]["status"] == "ran"

    def by_hand(line):
        nb = nbformat.read(project / "notebooks" / "01_demo.ipynb", as_version=4)
        nb.cells.insert(2, nbformat.v4.new_code_cell(line))
        nbclient.NotebookClient(nb, kernel_manager_class=kernel.kernel_manager_class(), kernel_name=params.KERNEL,
                                resources={"metadata": {"path": str(project / "notebooks")}}).execute()
        return "".join(o.get("text", "") for o in nb.cells[3].outputs), json.loads((out / "summary.json").read_text())

    said, summary = by_hand("n = 3")
    assert "changed by hand: n=3;" in said and summary == {"n_squared": 9}
    assert not (out / paths.STAGE_STAMP).exists()
    assert run.run_profile("x")["01_demo"]["status"] == "ran"
    assert json.loads((out / "summary.json").read_text()) == {"n_squared": 49}
    said, summary = by_hand("n = 1")
    assert "changed by hand" not in said and summary == {"n_squared": 49}
    assert (out / paths.STAGE_STAMP).exists()


@pytest.mark.slow
def test_06_in_jupyterlab_without_the_data_stops_and_make_all_repairs_damage(published_analyses, monkeypatch,
                                                                          tmp_path):
    """Run as in JupyterLab without the published data, 06 stops with the command that provides it,
    before it writes anything; and outputs damaged by a run outside make all (the old `None`s in
    numbers.tex) are redone by the next run."""
    out = paths.stage_dir("published", "06_pca")
    before = (out / "numbers.tex").read_text()
    assert "None" not in before
    nb = nbformat.read(paths.NOTEBOOKS / "06_pca.ipynb", as_version=4)
    cell = next(c for c in nb.cells if "parameters" in c.metadata.get("tags", []))
    cell.source = cell.source.replace('profile = "mini"', 'profile = "published"')
    monkeypatch.setenv(paths.DATA_ENV, str(tmp_path))                 # a folder without the data
    monkeypatch.delenv("TBT_READS", raising=False)
    client = nbclient.NotebookClient(nb, kernel_manager_class=kernel.kernel_manager_class(), kernel_name=params.KERNEL,
                                     resources={"metadata": {"path": str(paths.NOTEBOOKS)}})
    with pytest.raises(nbclient.exceptions.CellExecutionError) as info:
        client.execute()
    assert "DataMissing" in str(info.value) and "obsscaling/base_llm_benchmark_eval.csv" in str(info.value)
    assert "export HARMONY_DATA=" in str(info.value)
    assert (out / "numbers.tex").read_text() == before                  # nothing written
    monkeypatch.undo()
    (out / "numbers.tex").write_text(before.replace(before.splitlines()[-1].split("{")[-1], "None}"))
    log = run.run_profile("published", stages=["06"], wait=True)
    assert log["06_pca"]["status"] == "ran" and (out / "numbers.tex").read_text() == before


def test_an_executed_notebook_keeps_no_progress_bars_and_no_path_of_this_machine(tmp_path):
    """What lm-eval's bars leave in a cell's output (one stream output per redraw) is dropped, the
    lines around them are kept; papermill's record of the notebooks names them from the repository."""
    nb = nbformat.v4.new_notebook()
    bars = [nbformat.v4.new_output("stream", name="stderr", text=f"\rRunning loglikelihood requests: {p:3d}%|"
                                   f"{'#' * (p // 10):<10}| {4 * p}/400 [00:00<00:00, 938.93it/s]")
            for p in (0, 16, 40, 100)]
    cell = nbformat.v4.new_code_cell("x")
    cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text="[19:22:27] lr=0.003 epoch=3\n"), *bars,
                    nbformat.v4.new_output("stream", name="stderr", text="\n"),
                    nbformat.v4.new_output("stream", name="stderr", text="Map: 400it [00:01, 399.00it/s]\nkept\n")]
    nb.cells = [cell]
    out = paths.OUTPUTS / "smoke" / "02_finetune"
    nb.metadata["papermill"] = {"input_path": str(paths.NOTEBOOKS / "02_finetune.ipynb"),
                                "output_path": str(out / ".02_finetune.partial.ipynb")}
    path = tmp_path / "nb.ipynb"
    nbformat.write(nb, path)
    kernel._tidy(path, out / "02_finetune.ipynb")
    text = path.read_text()
    assert "it/s" not in text and str(paths.ROOT) not in text
    kept = nbformat.read(path, as_version=4)
    assert ["".join(o["text"]) for o in kept.cells[0].outputs] == ["[19:22:27] lr=0.003 epoch=3\n", "kept\n"]
    assert kept.metadata["papermill"] == {"input_path": "notebooks/02_finetune.ipynb",
                                          "output_path": paths.show(out / "02_finetune.ipynb")}


# --------------------------------------------------------------------------- the git filter and make venv
@pytest.mark.slow
def test_the_notebook_filter_lets_git_work_without_the_environment(tmp_path):
    repo = tmp_path / "repo"
    (repo / "notebooks").mkdir(parents=True)
    for name in ("Makefile", ".gitattributes"):
        shutil.copy(paths.ROOT / name, repo / name)
    nb = paths.NOTEBOOKS / "04_rank_agreement.ipynb"
    shutil.copy(nb, repo / "notebooks" / nb.name)
    (repo / ".gitignore").write_text(".venv/\n")
    (repo / ".venv" / "bin").mkdir(parents=True)
    python = repo / ".venv" / "bin" / "python"
    python.write_text(f'#!/bin/sh\nexec {sys.executable} "$@"\n')
    python.chmod(0o755)
    git = ["git", "-c", "user.email=t@t", "-c", "user.name=t"]
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    subprocess.run(["make", "--no-print-directory", "hooks"], cwd=repo, check=True, capture_output=True,
                   env={**os.environ, "MAKEFLAGS": ""})
    subprocess.run([*git, "add", "-A"], cwd=repo, check=True)
    subprocess.run([*git, "commit", "-qm", "x"], cwd=repo, check=True)
    saved = nbformat.read(repo / "notebooks" / nb.name, as_version=4)
    saved.cells[2].outputs = [nbformat.v4.new_output("stream", name="stdout", text="out\n")]
    nbformat.write(saved, repo / "notebooks" / nb.name)
    assert subprocess.run([*git, "diff", "--stat"], cwd=repo, capture_output=True, text=True).stdout == ""
    python.unlink()                                                     # .venv removed
    said = set()
    for cmd in (["status", "--short"], ["diff", "--stat"], ["add", "-A"], ["commit", "-qm", "y"]):
        done = subprocess.run([*git, *cmd], cwd=repo, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr                        # git keeps working
        said |= set(done.stderr.strip().splitlines())
    assert said == {"nbstripout filter: .venv is missing, so notebook outputs are not stripped; run make venv to "
                    "restore the filter"}


def test_setting_up_the_environment_says_when_it_starts_and_ends(tmp_path):
    for name in ("Makefile", "pyproject.toml", "requirements.lock"):
        shutil.copy(paths.ROOT / name, tmp_path / name)
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS")}   # not make's child
    done = subprocess.run(["make", "--no-print-directory", "-n", "venv"], cwd=tmp_path, capture_output=True,
                          text=True, check=True, env=env)
    lines = done.stdout.splitlines()
    assert lines[0].startswith('echo "setting up .venv:') and "set up .venv in" in done.stdout


# --------------------------------------------------------------------------- 07 resumes where it stopped
def _items(K=60, M=40, seed=0) -> bdata.ItemData:
    rng = np.random.default_rng(seed)
    skill = rng.normal(size=K)
    Xa = (rng.random((K, M // 2)) < 1 / (1 + np.exp(-(skill[:, None] - rng.normal(size=M // 2))))).astype(float)
    Xb = (rng.random((K, M - M // 2)) < 0.5).astype(float)
    return bdata.ItemData(np.hstack([Xa, Xb]), [f"m{k}" for k in range(K)],
                          np.array(["a"] * (M // 2) + ["b"] * (M - M // 2)), np.arange(M), skill,
                          np.geomspace(0.5, 120, K), instruct=np.arange(K) % 2 == 1)


@pytest.mark.usefixtures("one_torch_thread")
def test_benchalign_resumes_after_a_stop_with_identical_numbers(tmp_path, monkeypatch):
    from lib import progress

    items = _items()
    split = methods.split_by_size(items, 13.0, {"30B+": 30.0})
    cfg = methods.Config(max_steps=60, patience=20, eval_every=10, subset_items=10)
    kw = dict(seeds=2, n_boot=50, losses=["ranknet", "pointwise"], source_counts=[10], item_counts=[20],
              need_seeds=2, progress=True)
    clean = ex.benchalign_report(items, split, cfg, **kw)["summary"]
    real, calls = progress.Progress.advance, []

    def stop_at_five(self, *a, **k):
        calls.append(1)
        if len(calls) == 5:
            raise KeyboardInterrupt
        return real(self, *a, **k)

    monkeypatch.setattr(progress.Progress, "advance", stop_at_five)
    with pytest.raises(KeyboardInterrupt):
        ex.benchalign_report(items, split, cfg, resume=tmp_path / "benchalign", **kw)
    monkeypatch.undo()
    assert len(list((tmp_path / "benchalign").glob("*.pkl"))) == 5
    made = {p: p.stat().st_mtime_ns for p in (tmp_path / "benchalign").glob("*.pkl")}
    resumed = memo.Memo.for_report(tmp_path / "benchalign", items, split, cfg, 2, 50)
    monkeypatch.setattr(memo.Memo, "for_report", classmethod(lambda cls, *a: resumed))
    summary = ex.benchalign_report(items, split, cfg, resume=tmp_path / "benchalign", **kw)["summary"]
    assert len(resumed.reused) == 5 and all(p.stat().st_mtime_ns == m for p, m in made.items())
    assert json.dumps(summary, sort_keys=True) == json.dumps(clean, sort_keys=True)
    monkeypatch.undo()
    other = memo.Memo.for_report(tmp_path / "benchalign", items, split, methods.Config(max_steps=70), 2, 50)
    assert other("method-benchalign", lambda: "recomputed") == "recomputed"     # other settings: not reused
