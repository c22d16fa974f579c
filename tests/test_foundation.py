"""The ground floor: results store, params validation, report helpers."""

from __future__ import annotations

import json
import math

import pytest

from lib import notebook, outputs, params, store, util


def _res(**kw):
    base = dict(protocol="direct_eval", benchmark="arc_easy", model="org/model-1b", metric="acc_norm",
                score=0.5, stderr=0.01, provenance={"lr": 2e-5})
    base.update(kw)
    return store.Result(**base)


def test_store_roundtrip_and_tidy_frame(tmp_path):
    store.write(tmp_path, _res())
    store.write(tmp_path, _res(protocol="train_before_test", score=0.7))
    store.write(tmp_path, _res(model="gpt2", score=0.3, stderr=None))
    df = store.load(tmp_path)
    assert list(df.columns) == store.COLUMNS
    assert len(df) == 3
    m = store.matrix(df, "direct_eval")
    assert m.loc["org/model-1b", "arc_easy"] == 0.5 and m.loc["gpt2", "arc_easy"] == 0.3
    assert df.loc[df.model == "gpt2", "stderr"].isna().all()
    assert store.path_for(tmp_path, "direct_eval", "arc_easy", "org/model-1b").name == "org__model-1b.json"


def test_store_rejects_bad_results_and_names_corrupt_file(tmp_path):
    with pytest.raises(store.StoreError, match="score must be a finite number"):
        store.write(tmp_path, _res(score=math.nan))
    path = store.write(tmp_path, _res())
    path.write_text('{"schema": 1, "protocol": "direct_eval"')          # truncated
    with pytest.raises(store.StoreError, match=str(path)):
        store.load(tmp_path)
    path.write_text(json.dumps({"schema": 1, "protocol": "direct_eval"}))
    with pytest.raises(store.StoreError, match="missing benchmark, model, metric, score"):
        store.read(path)


def test_atomic_write_leaves_no_temporary_files(tmp_path):
    util.atomic_write_json(tmp_path / "a.json", {"x": 1})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.json"]


def test_a_folders_digest_is_its_files_not_hidden_files_or_bytecode(tmp_path):
    """A task folder read by a stage: lm-eval importing its utils.py (which leaves __pycache__) or
    an editor's hidden file does not make the stage re-run; a changed file does."""
    (tmp_path / "utils.py").write_text("def f(doc):\n    return doc\n")
    before = util.digest(tmp_path)
    (tmp_path / "__pycache__").mkdir()
    (tmp_path / "__pycache__" / "utils.cpython-311.pyc").write_bytes(b"\0")
    (tmp_path / ".utils.py.swp").write_text("x")
    assert util.digest(tmp_path) == before
    (tmp_path / "utils.py").write_text("def f(doc):\n    return doc.strip()\n")
    assert util.digest(tmp_path) != before


def test_a_task_folder_moved_with_its_checkout_keeps_its_digest(tmp_path):
    """lm-eval needs absolute data paths in a local task's YAML: a checkout moved and its tasks
    written again at the new place digest as before (its stages stay cached); other data does not."""
    from lib.pipeline.localtasks import write_task

    def tasks(where, answer="b"):
        write_task(where, "t", "generate_until", {"train": [{"question": "a", "answer": answer}],
                                                  "test": [{"question": "c", "answer": "d"}]})
        return where

    before = util.digest(tasks(tmp_path / "one" / "tasks"))
    yaml = tmp_path / "one" / "tasks" / "t" / "t.yaml"
    assert str(tmp_path / "one") in yaml.read_text()
    single = util.digest(yaml)
    moved = tasks(tmp_path / "two" / "tasks")
    assert util.digest(moved) == before and util.digest(moved / "t" / "t.yaml") == single
    assert util.digest(tasks(tmp_path / "three" / "tasks", answer="other")) != before


def test_stamps_say_whether_cached_work_is_current(tmp_path):
    stamp = tmp_path / "done.json"
    assert util.current(stamp, {"lr": 1e-3}) is None
    util.mark(stamp, {"lr": 1e-3}, seconds=2.0)
    assert util.current(stamp, {"lr": 1e-3})["seconds"] == 2.0
    assert util.current(stamp, {"lr": 2e-3}) is None                      # made another way
    assert util.current(stamp, {"lr": 1e-3}, needs=[tmp_path / "adapter"]) is None
    stamp.write_text("{broken")
    assert util.current(stamp, {"lr": 1e-3}) is None                      # unreadable: redo


def test_meta_merges(tmp_path):
    store.write_meta(tmp_path, "models", {"m1": {"family": "a"}})
    store.write_meta(tmp_path, "models", {"m2": {"family": "b"}})
    assert set(store.read_meta(tmp_path, "models")) == {"m1", "m2"}
    with pytest.raises(store.StoreError, match="unknown metadata kind"):
        store.write_meta(tmp_path, "things", {})


def test_macro_names_are_letters_only():
    assert outputs.macro_name("tau_mean/direct_eval") == "TauMeanDirectEval"
    assert outputs.macro_name("pc1_share") == "PcOneShare"


@pytest.fixture
def fake_project(tmp_path, monkeypatch):
    nb_dir, params_dir = tmp_path / "notebooks", tmp_path / "params"
    nb_dir.mkdir(), params_dir.mkdir()
    cell = {"cell_type": "code", "id": "p", "metadata": {"tags": ["parameters"]}, "outputs": [],
            "execution_count": None, "source": ['profile = "x"\n', "alpha = 0.5\n", "names = ['a']\n"]}
    kernel = {"name": "python3", "language": "python", "display_name": "Python 3"}
    (nb_dir / "01_demo.ipynb").write_text(json.dumps({"cells": [cell], "nbformat": 4, "nbformat_minor": 5,
                                                      "metadata": {"kernelspec": kernel}}))
    monkeypatch.setattr(params.paths, "NOTEBOOKS", nb_dir)
    monkeypatch.setattr(params.paths, "PARAMS", params_dir)
    return params_dir


def test_params_valid_profile(fake_project):
    (fake_project / "x.yaml").write_text("description: t\nstages:\n  01_demo: {alpha: 1, names: [b]}\n")
    prof = params.load_profile("x")
    assert params.check_stage(prof, "01_demo") == {"profile": "x", "alpha": 1, "names": ["b"]}


def test_a_profile_holds_only_overrides_and_common_values(fake_project):
    (fake_project / "x.yaml").write_text("description: t\nstages:\n  01_demo: {alpha: 2}\n")
    assert params.check_stage(params.load_profile("x"), "01_demo") == {"profile": "x", "alpha": 2, "names": ["a"]}
    (fake_project / "x.yaml").write_text("description: t\ncommon: {names: [c]}\nstages:\n  01_demo:\n")
    assert params.load_profile("x").params("01_demo") == {"profile": "x", "alpha": 0.5, "names": ["c"]}
    (fake_project / "x.yaml").write_text("description: t\ncommon: {nmes: [c]}\nstages:\n  01_demo:\n")
    with pytest.raises(params.ParamsError, match="common.nmes: no stage of this profile has that parameter "
                                                 r"\(did you mean 'names'\?\)"):
        params.load_profile("x")


def test_a_kind_switches_its_stages_on_and_the_profile_lists_only_changes():
    """The shipped profiles keep their stages with a kind, and list no stage only to switch it on."""
    published = params.load_profile("published")
    assert list(published.stages) == ["04_rank_agreement", "05_perplexity", "06_pca", "07_benchalign"]
    place = params.load_profile("place_smoke")                  # the kind's three, 08 changed, nothing added
    assert list(place.stages) == ["02_finetune", "03_direct_eval", "08_placement"]
    assert place.stages["08_placement"] == {"n_boot": 200} and place.stages["02_finetune"] == {}
    assert list(params.load_profile("place_paper").stages)[0] == "01_select_benchmarks"   # listed: added
    for name in params.known_profiles():
        raw = params.read_yaml(params.profile_path(name))
        if raw.get("kind"):
            empty = [s for s, v in (raw.get("stages") or {}).items() if not v and s in params.KINDS[raw["kind"]]]
            assert not empty, f"{name}: {empty} listed only to switch them on: its kind does"


def test_an_unknown_kind_is_refused_with_the_kinds(fake_project):
    (fake_project / "x.yaml").write_text("description: t\nkind: wrld\n")
    with pytest.raises(params.ParamsError, match=r"kind: unknown kind 'wrld' \(did you mean 'world'\?\); kinds: "
                                                 r"world \(00, 01"):
        params.load_profile("x")
    (fake_project / "x.yaml").write_text("description: t\n")
    with pytest.raises(params.ParamsError, match="'stages' must be a non-empty mapping"):
        params.load_profile("x")


def test_a_notebook_resolves_the_profile_in_and_out_of_papermill(fake_project, tmp_path, monkeypatch, capsys):
    """Stepped through with the cell's defaults, a notebook gets the profile's values; a value
    changed by hand wins and clears the stage's cache stamp so `make all` re-runs it."""
    monkeypatch.setattr(params.paths, "OUTPUTS", tmp_path / "out")
    monkeypatch.delenv("TBT_READS", raising=False)
    (fake_project / "x.yaml").write_text("description: t\nstages:\n  01_demo: {alpha: 2}\n")
    ns = {"profile": "x", "alpha": 0.5, "names": ["a"]}
    ctx = notebook.stage("01_demo", ns)
    assert ns == {"profile": "x", "alpha": 2, "names": ["a"]} and ctx.changed == {}
    stamp = ctx.out / params.paths.STAGE_STAMP
    stamp.write_text("{}")
    ns = {"profile": "x", "alpha": 0.5, "names": ["z"]}
    ctx = notebook.stage("01_demo", ns)
    assert ns["names"] == ["z"] and ns["alpha"] == 2 and ctx.changed == {"names": ["z"]}
    assert not stamp.exists() and "re-runs this stage" in capsys.readouterr().out
    with pytest.raises(params.ParamsError, match="alpha = 'x': expected float"):
        notebook.stage("01_demo", {"profile": "x", "alpha": "x", "names": []})


@pytest.mark.parametrize("body, message", [
    ("description: t\nstages:\n  01_demo: {alpha: 1, names: [b], alhpa: 2}\n", "unknown key.*did you mean 'alpha'"),
    ("description: t\nstages:\n  01_demo: {alpha: fast, names: [b]}\n", "alpha: expected float, got str"),
    ("description: t\nstages:\n  01_dmeo: {}\n", "unknown stage '01_dmeo'.*did you mean '01_demo'"),
    ("stages:\n  01_demo: {alpha: 1, names: [b]}\n", "missing key 'description'"),
    ("description: t\nstagse: {}\n", "unknown key 'stagse'"),
])
def test_params_errors_name_file_and_key(fake_project, body, message):
    (fake_project / "x.yaml").write_text(body)
    with pytest.raises(params.ParamsError, match=message) as info:
        params.load_profile("x")
    assert "x.yaml" in str(info.value)


def test_unknown_profile_suggests(fake_project):
    (fake_project / "smoke.yaml").write_text("description: t\nstages: {01_demo: {alpha: 1, names: []}}\n")
    with pytest.raises(params.ParamsError, match="did you mean 'smoke'"):
        params.load_profile("smoek")


def test_progress_reports_units_elapsed_and_time_left(monkeypatch):
    import io

    from lib.progress import Progress

    monkeypatch.setenv("TBT_STAGE", "02_finetune")
    out = io.StringIO()
    with Progress(total=4, label="train_before_test", every=0.0, stream=out) as progress:
        progress.advance()
        progress.update(3, note="mw-llama-s")
    lines = out.getvalue().splitlines()
    assert lines[0] == "[02_finetune] train_before_test: 0/4 units, 0s elapsed (started)"
    assert lines[1].startswith("[02_finetune] train_before_test: 1/4 units") and "left" in lines[1]
    assert lines[2].endswith("(mw-llama-s)")
    assert len(lines) == 4 and lines[3].startswith("[02_finetune] train_before_test: 3/4 units")  # where it stopped
    quiet = io.StringIO()
    with Progress(total=2, label="x", every=3600.0, stream=quiet) as progress:
        progress.advance()                                               # within `every`: no line
        progress.advance()                                               # the last unit: always a line
    assert [line.split(":")[1].strip() for line in quiet.getvalue().splitlines()] == \
        ["0/2 units, 0s elapsed (started)", "2/2 units, 0s elapsed"]
