"""Issue 54: a profile's results as Every Eval Ever records (runner.export), checked against the pinned
release's schema, read back equal to the store, and a train-before-test score impossible to read as
zero-shot. The schema comes from the release's wheel (`make test` fetches it first)."""

from __future__ import annotations

import json
import math

import pytest

from lib import paths, published, store, util
from runner import export
from runner.published import import_store


def _records(folder, **where):
    """The aggregate records of an export whose protocol and benchmark are ``where``'s."""
    out = []
    for path in sorted(folder.rglob("*.json")):
        record = json.loads(path.read_text())
        res = record["evaluation_results"][0]
        seen = {"protocol": record["source_metadata"]["additional_details"]["protocol"],
                "benchmark": res["source_data"]["dataset_name"], "model": record["model_info"]["id"]}
        if all(seen[k] == v for k, v in where.items()):
            out.append(record)
    return out


def _none(x) -> bool:
    return x is None or (isinstance(x, float) and math.isnan(x))


def _same_as_the_store(back, results):
    """Every score, standard error, metric, direction and size of ``back`` (an export read back) is the store's."""
    assert len(back) == len(results)
    both = results.merge(back, on=["protocol", "benchmark", "model"], suffixes=("", "_x"), validate="one_to_one")
    assert len(both) == len(results)
    for row in both.itertuples():
        assert row.score_x == row.score and row.metric_x == row.metric, row
        assert row.higher_is_better_x == row.higher_is_better
        for a, b in ((row.stderr, row.stderr_x), (row.n, row.n_x)):
            assert (_none(a) and _none(b)) or a == b, row


def test_the_schema_is_read_from_the_pinned_wheel_and_a_bad_record_is_named():
    checks = export.validators()
    assert set(checks) == {"aggregate", "instance"}
    assert export.problems({"schema_version": export.VERSION}, "aggregate")          # required fields missing
    with pytest.raises(export.ExportError, match=r"not a valid every-eval-ever 0.3.0 aggregate record: \(top\): "
                                                 r"'evaluation_id' is a required property"):
        export._check({"schema_version": export.VERSION}, "aggregate", "x.json")


def test_a_missing_or_altered_wheel_and_a_missing_store_are_one_line_with_the_command(tmp_path, monkeypatch):
    with pytest.raises(export.ExportError, match=r"is missing .*`make export` fetches it"):
        export.validators(tmp_path / export.WHEEL.name)
    (tmp_path / export.WHEEL.name).write_bytes(b"not a wheel")
    with pytest.raises(export.ExportError, match=r"has sha256 .* expected 564b8bc6.*delete it and run `make export`"):
        export.validators(tmp_path / export.WHEEL.name)
    monkeypatch.setattr(paths, "OUTPUTS", tmp_path / "outputs")
    with pytest.raises(export.ExportError, match=r"store does not exist: run `make all PROFILE=smoke` first"):
        export.export("smoke")


@pytest.mark.slow
def test_smoke_exports_every_result_and_reads_back_as_the_store(smoke, tmp_path):
    """The round trip: every result of smoke's store (both protocols, the 1-shot and reduced-budget ones,
    the perplexity corpus), every record and instance row valid, every score as stored; the
    instance rows are the per-item file's, and a train-before-test record says so wherever it is read."""
    counts = export.export("smoke", out=tmp_path / "export")
    back = export.read(tmp_path / "export")                  # every record and every row checked again
    results = store.load(smoke["store"])
    _same_as_the_store(back, results)
    assert set(back["protocol"]) == {store.DIRECT, store.TBT, store.fewshot_protocol(1), store.REDUCED}
    per_item = [bool(p.get("per_item")) for p in results["provenance"]]
    assert counts["instance_files"] == sum(per_item) > 0 and counts["instance_rows"] == back["rows"].sum()
    both = results.merge(back[["protocol", "benchmark", "model", "rows"]], on=["protocol", "benchmark", "model"])
    assert ((both["rows"] == both["n"]) == per_item).all()      # per-item results: a row per test document

    model, bench = "mw-llama-s", "mw_facts"
    row = results[(results.protocol == store.TBT) & (results.benchmark == bench) & (results.model == model)].iloc[0]
    prov = row.provenance
    (tbt,) = _records(tmp_path / "export", protocol=store.TBT, benchmark=bench, model=model)
    res = tbt["evaluation_results"][0]
    details = res["score_details"]["details"]
    assert res["evaluation_name"] == "mw_facts (train-before-test: fine-tuned on its training split first)"
    assert tbt["model_info"]["name"] == "mw-llama-s fine-tuned on mw_facts (train_before_test)"
    assert tbt["model_info"]["additional_details"]["fine_tuned"] == "true"
    assert "Not a zero-shot score" in res["metric_config"]["evaluation_description"]
    assert "train_before_test" in tbt["source_metadata"]["source_name"]
    assert details["fine_tuned_before_test"] == "true" and details["protocol"] == store.TBT
    assert (details["recipe.method"], details["recipe.lora_r"], details["recipe.epochs"]) == ("lora", "16", "3")
    assert all(details[f"recipe.{k}"] == (v if isinstance(v, str) else json.dumps(v))
               for k, v in prov["config"]["recipe"].items())
    assert json.loads(details["recipe.learning_rates"]) == [0.001, 0.003]
    assert (float(details["chosen_learning_rate"]), int(details["chosen_epoch"])) == (prov["lr"], prov["epoch"])
    assert json.loads(details["provenance"]) == prov
    assert res["source_data"]["additional_details"]["documents_sha256.test"] == prov["dataset"]["documents"]["test"]
    assert json.loads(res["source_data"]["additional_details"]["caps"]) == prov["caps"]
    assert tbt["eval_library"] == {"name": "lm_eval", "version": prov["versions"]["lm_eval"],
                                   "additional_details": tbt["eval_library"]["additional_details"]}
    assert tbt["eval_library"]["additional_details"]["torch"] == prov["versions"]["torch"]

    (direct,) = _records(tmp_path / "export", protocol=store.DIRECT, benchmark=bench, model=model)
    res = direct["evaluation_results"][0]
    assert res["evaluation_name"] == "mw_facts (zero-shot)" and direct["model_info"]["name"] == model
    assert res["score_details"]["details"]["fine_tuned_before_test"] == "false"
    samples = tmp_path / "export" / direct["detailed_evaluation_results"]["file_path"]
    rows = [json.loads(line) for line in samples.read_text().splitlines()]
    assert sum(r["evaluation"]["score"] for r in rows) / len(rows) == pytest.approx(res["score_details"]["score"])
    assert {r["evaluation_id"] for r in rows} == {direct["evaluation_id"]}
    (shot,) = _records(tmp_path / "export", protocol=store.fewshot_protocol(1), benchmark=bench, model=model)
    assert shot["evaluation_results"][0]["evaluation_name"] == "mw_facts (1-shot)"
    (cheap,) = _records(tmp_path / "export", protocol=store.REDUCED, benchmark=bench, model=model)
    res = cheap["evaluation_results"][0]
    assert "reduced budget: fine-tuned on part of its training split first" in res["evaluation_name"]
    assert res["score_details"]["details"]["fine_tuned_before_test"] == "true"
    assert res["score_details"]["details"]["train_fraction"] == "0.5"


@pytest.mark.slow
def test_the_published_results_export_as_documentation_with_the_papers_recipe(harmony_data, tmp_path, monkeypatch):
    """The published profile's import (here: three of its models, every benchmark and both protocols, taken
    from the real file) exports as records that validate, with the paper's recipe and every score as imported."""
    raw = json.loads((harmony_data / published.RESULTS_FILE).read_text())
    keep = {"EleutherAI/pythia-160m-deduped", "Qwen/Qwen2.5-7B-Instruct", "google/gemma-2-9b"}
    subset = {protocol: {bench: {m: v for m, v in by_model.items() if m in keep} for bench, by_model in per.items()}
              for protocol, per in raw.items()}
    (tmp_path / "all_results.json").write_text(json.dumps(subset))
    monkeypatch.setattr(paths, "OUTPUTS", tmp_path / "outputs")
    import_store("published", source=tmp_path / "all_results.json")
    export.export("published", out=tmp_path / "export")
    back = export.read(tmp_path / "export")
    results = store.load(paths.store_dir("published"))
    _same_as_the_store(back, results)
    assert set(back["model"]) == keep and back["benchmark"].nunique() == 27 and set(back["protocol"]) == {
        store.DIRECT, store.TBT}
    (tbt,) = _records(tmp_path / "export", protocol=store.TBT, benchmark="arc_easy", model="google/gemma-2-9b")
    res = tbt["evaluation_results"][0]
    details = res["score_details"]["details"]
    assert tbt["source_metadata"]["source_type"] == "documentation"
    assert tbt["source_metadata"]["additional_details"]["sha256"] == util.sha256_file(tmp_path / "all_results.json")
    assert (details["recipe.lora_r"], details["recipe.epochs"], json.loads(details["recipe.learning_rates"])) == \
        ("8", "5", [1e-05, 2e-05, 5e-05])                                              # the paper's recipe
    assert "not published" in details["chosen"] and tbt["eval_library"]["version"] == "0.4.8"
    assert (res["source_data"]["hf_repo"], res["evaluation_name"]) == (
        "allenai/ai2_arc", "arc_easy (train-before-test: fine-tuned on its training split first)")
