"""lib.pipeline.datasets and runner.fetch: the paper's lm-eval 0.4.8 dataset configs (data), a unit's record of what it
read, a re-ordered copy of a task told apart, a pinned revision passed to the loader, the dataset
table of `make models` offline, and the placement calibration naming units whose documents differ."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pandas as pd
import pytest

from lib import placement, store
from lib.metadata import BENCHMARKS
from lib.pipeline import datasets as ds
from lib.pipeline import localtasks
from lib.pipeline import tasks as tk
from runner import fetch

PAPER_24 = [n for n, b in BENCHMARKS.items() if not b.is_perplexity]
RULE = tk.SplitRule(caps={"train": 20, "validation": 5, "test": 0})         # the paper's procedure, caps that bite


def _rows(n, seed=None):
    rows = [{"query": f"question {i}:", "choices": ["yes", "no"], "label": i % 2} for i in range(n)]
    if seed is not None:
        random.Random(seed).shuffle(rows)
    return rows


def _task(root: Path, name: str, train: list[dict]) -> tuple:
    localtasks.write_task(root, name, "multiple_choice", {"train": train, "test": _rows(12)})
    task, info = tk.inspect(tk.task_manager([root]), name)
    plan = tk.plan_splits(task, info, RULE)
    return plan, ds.record(task, plan)


def test_the_papers_configs_are_lm_eval_048s_and_name_their_source():
    import lm_eval

    data = json.loads(fetch.PAPER_CONFIGS_FILE.read_text())
    assert data["lm_eval"] == "0.4.8" and "lm_eval-0.4.8-py3-none-any.whl (sha256 " in data["source"]
    paper = fetch.paper_configs()
    assert sorted(paper) == sorted(PAPER_24)
    assert paper["social_iqa"]["dataset_path"] == "social_i_qa" and paper["gsm8k"]["dataset_path"] == "gsm8k"
    assert paper["gsm8k"]["dataset_name"] == "main" and paper["mnli"] == {"dataset_path": "glue",
                                                                         "dataset_name": "mnli",
                                                                         "yaml": "glue/mnli/default.yaml"}
    # the installed lm-eval's YAML (same file names in both releases)
    tasks = Path(lm_eval.__file__).parent / "tasks"
    installed = {t: fetch._yaml_source(tasks / cfg["yaml"]) for t, cfg in paper.items()}
    assert all(installed[t]["task"] == t for t in paper)
    assert installed["social_iqa"]["dataset_path"] == "lighteval/siqa"
    assert installed["gsm8k"]["dataset_path"] == "openai/gsm8k"
    moved = fetch.rehomed(installed)
    assert sorted(set(paper) - set(moved)) == ["arc_challenge", "arc_easy", "commonsense_qa", "headqa_en"]
    assert moved["mnli"] == ("glue", "nyu-mll/glue")


def test_the_configs_file_is_read_from_a_wheel_with_lm_evals_loader(tmp_path):
    import zipfile

    wheel = tmp_path / "lm_eval-0.4.8-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("lm_eval/tasks/x/_base.yaml", "dataset_path: old/repo\noutput_type: multiple_choice\n")
        zf.writestr("lm_eval/tasks/x/x.yaml", "include: _base.yaml\ntask: x\ndataset_name: cfg\n")
        zf.writestr("lm_eval/tasks/y/y.yaml", "task: y\ndataset_path: y_repo\n")
    out = fetch.paper_configs_from_wheel(wheel, ["x"])
    assert out["tasks"] == {"x": {"dataset_path": "old/repo", "dataset_name": "cfg", "yaml": "x/x.yaml"}}
    assert out["source"].startswith("lm_eval-0.4.8-py3-none-any.whl (sha256 ")
    with pytest.raises(ds.DatasetError, match=r"no task YAML for \['z'\]"):
        fetch.paper_configs_from_wheel(wheel, ["x", "z"])


def test_a_copy_with_its_rows_reordered_chooses_the_same_positions_but_other_documents(tmp_path):
    plan, rec = _task(tmp_path / "a", "t", _rows(60))
    same_plan, same = _task(tmp_path / "b", "t", _rows(60))               # the same rows elsewhere
    moved_plan, moved = _task(tmp_path / "c", "t", _rows(60, seed=1))     # the same rows, re-ordered
    assert plan.ids == same_plan.ids == moved_plan.ids                    # positions: nothing to see
    assert rec["documents"] == same["documents"]
    assert moved["documents"]["train"] != rec["documents"]["train"]
    assert moved["documents"]["validation"] != rec["documents"]["validation"]
    assert moved["documents"]["test"] == rec["documents"]["test"]                  # the test rows kept their order
    assert moved["documents"]["all"] != rec["documents"]["all"]
    assert rec["repository"] == "json" and rec["resolved"] is None and rec["revision"] is None
    assert set(rec["fingerprint"]) == {"train", "test"} and all(rec["fingerprint"].values())
    assert ds.differences({"t": rec}, {"t": same}) == []
    found = ds.differences({"t": moved}, {"t": rec})
    assert len(found) == 1 and found[0].startswith(f"t (documents {moved['documents']['all'][:12]} here vs "
                                                   f"{rec['documents']['all'][:12]}")


def test_a_pinned_revision_reaches_the_loader_and_the_record(tmp_path, monkeypatch):
    import lm_eval.api.task as lm_task

    localtasks.write_task(tmp_path, "t", "multiple_choice", {"train": _rows(40), "test": _rows(12)})
    seen = []
    real = lm_task.datasets.load_dataset

    def load_dataset(*args, **kwargs):
        seen.append(kwargs.get("revision"))
        return real(*args, **kwargs)

    monkeypatch.setattr(lm_task.datasets, "load_dataset", load_dataset)
    rule = tk.SplitRule(caps={}, revisions={"t": "0123456789abcdef0123456789abcdef01234567"})
    row = tk.select(["t"], [tmp_path], min_train=10, rule=rule)[0]
    assert seen == [rule.revisions["t"]] and row["selected"]
    assert row["dataset"]["revision"] == rule.revisions["t"]
    assert tk.SplitRule.from_dict(rule.to_dict()) == rule and "revisions" not in tk.SplitRule(caps={}).to_dict()
    with pytest.raises(tk.TaskError, match=r"dataset_revisions: 'u' is not one of the profile's tasks"):
        tk.select(["t"], [tmp_path], rule=tk.SplitRule(caps={}, revisions={"u": "main"}))
    with pytest.raises(tk.TaskError, match=r"the revision of 't' must be a non-empty string"):
        tk.SplitRule(caps={}, revisions={"t": ""})


@pytest.mark.slow
def test_make_models_prints_the_dataset_table_offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    lines = fetch.dataset_lines("paper_slice", ["arc_easy", "rte", "medmcqa"],
                                {"include_paths": [], "include_defaults": True, "dataset_revisions": {"rte": "v1"}})
    table = "\n".join(lines)
    assert lines[0] == "[paper_slice] datasets of 3 task(s):"
    assert "nyu-mll/glue" in table and "openlifescienceai/medmcqa" in table
    rte = next(line for line in lines if line.strip().startswith("rte "))
    assert rte.split()[-2:] == ["glue", "v1"]                               # 0.4.8's repository, the pin
    assert lines[-2] == ("[paper_slice] dataset_path differs from lm-eval 0.4.8's (the paper's) for 2 of 3: "
                         "rte: glue -> nyu-mll/glue; medmcqa: medmcqa -> openlifescienceai/medmcqa")
    assert lines[-1].startswith("[paper_slice] resolved revisions, split fingerprints and document hashes: not known "
                                "here (HF_HUB_OFFLINE is set)")


def _frame(benchmarks, documents):
    rows = [{"protocol": p, "benchmark": b, "model": "cal", "score": 0.5, "stderr": 0.01, "metric": "acc",
             "higher_is_better": True, "n": 100,
             "provenance": {"dataset": {"repository": "r", "name": None, "resolved": None, "revision": None,
                                        "documents": {"all": documents[b]}}}}
            for p in store.PROTOCOLS for b in benchmarks]
    return pd.DataFrame(rows)[store.COLUMNS]


def test_the_calibration_names_the_benchmarks_whose_documents_differ():
    ref = _frame(["x", "y"], {"x": "a" * 64, "y": "b" * 64})
    ours = _frame(["x", "y"], {"x": "a" * 64, "y": "c" * 64})
    check = placement.calibration_check(ours, ref, ["cal"], ["x", "y"])
    assert check["comparable"]                                             # the scores agree ...
    assert check["lines"][1].startswith("  but the documents differ from the reference's") and "y (documents " \
        "cccccccccccc here vs bbbbbbbbbbbb)" in check["lines"][1] and "x (" not in check["lines"][1]
    failing = ours.assign(score=[0.6, 0.6, 0.6, 0.6])
    lines = placement.calibration_check(failing, ref, ["cal"], ["x", "y"])["lines"]
    assert lines[0].startswith("NOT COMPARABLE")
    assert any(line.startswith("  documents that differ from the reference's") and "y (documents" in line
               for line in lines)
    assert placement.calibration_check(ref, ref, ["cal"], ["x", "y"])["lines"] == [
        placement.calibration_check(ref, ref, ["cal"], ["x", "y"])["lines"][0]]      # same documents: one line
