"""The work folder's layout: every path under ``outputs/<profile>/work/`` is built here, and each
kind of file there has one reader with one set of checks. Other layers ask this module; none
rebuilds a path. (Test scores live in the results store, :mod:`lib.store`.)

::

    <work>/train_before_test/<model>/<benchmark>/lr=2e-05/unit.json   one learning rate: its curve (done marker)
    <work>/train_before_test/<model>/<benchmark>/lr=2e-05/epoch=3/    its best epoch's LoRA adapter
    <work>/train_before_test/<model>/<benchmark>/lr=2e-05/resume/     while unfinished: its last finished epoch
    <work>/train_before_test/<model>/<benchmark>/lr=2e-05/events.out.tfevents.*   its TensorBoard curves (`tensorboard`)
    <work>/train_before_test/<model>/<benchmark>/selection.json       the chosen (lr, epoch) and every curve
    <work>/train_before_test/<model>/<benchmark>/first_example.json   its first training example, decoded
    <work>/items/<protocol>/<benchmark>/<model>.json                  per-item correctness of a test score
    <work>/locks/<protocol>/<model>/<benchmark>[.lr=2e-05].lock       held while a job works on the unit (or on one lr)
    <work>/failed/<protocol>/<model>/<benchmark>[.lr=2e-05].json      why a unit failed, and the spec that retries it
    <work>/submitit/<stage>/                                          submitit's logs of a stage's jobs
    <work>/benchalign/<unit>.pkl                                      a finished unit of notebook 07 (resume)
    <work>/world/, <work>/models/, <work>/zoo.json                    the mini world, its zoo, the zoo's summary

Model and benchmark names appear as :func:`lib.store.slug` (``org/model`` -> ``org__model``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

from .errors import UserError
from .store import TBT, slug
from .util import FORCE_ENV, CorruptFile, atomic_write_json, jsonable, note_read, read_json

UNIT_FILE = "unit.json"            # written last: a learning-rate unit without it is unfinished
SELECTION_FILE = "selection.json"
RESUME_DIR = "resume"              # an unfinished unit's last finished epoch (see resume_dir)
EXAMPLE_FILE = "first_example.json"
CURVE_COLUMNS = ["model", "benchmark", "lr", "epoch", "val_score", "val_loss", "criterion", "train_loss",
                 "best_of_unit"]

Work = str | os.PathLike


# --------------------------------------------------------------------------- train-before-test units
def lr_name(lr: float) -> str:
    """``2e-05`` -> ``lr=2e-05`` (the folder name of a learning-rate unit, and the key of its curve)."""
    return f"lr={lr:g}"


def benchmark_dir(work: Work, model: str, benchmark: str, protocol: str = TBT) -> Path:
    """The train-before-test units of one (model, benchmark) (of ``protocol``, a form of it such as
    the reduced budget, whose units must not meet the full protocol's)."""
    return Path(work) / protocol / slug(model) / slug(benchmark)


def unit_dir(work: Work, model: str, benchmark: str, lr: float, protocol: str = TBT) -> Path:
    """One learning-rate unit: ``unit.json`` and the adapter of its best epoch."""
    return benchmark_dir(work, model, benchmark, protocol) / lr_name(lr)


def adapter_dir(unit: Work, epoch: int) -> Path:
    """The LoRA adapter a unit keeps for ``epoch``."""
    return Path(unit) / f"epoch={epoch}"


def resume_dir(unit: Work) -> Path:
    """A unit's state after its last finished epoch (trainable weights, optimiser, schedule, random
    states, the curve so far), replaced atomically after every epoch and removed when the unit ends."""
    return Path(unit) / RESUME_DIR


def selection_path(work: Work, model: str, benchmark: str, protocol: str = TBT) -> Path:
    """The chosen (learning rate, epoch) of one (model, benchmark), with every curve."""
    return benchmark_dir(work, model, benchmark, protocol) / SELECTION_FILE


def example_path(work: Work, model: str, benchmark: str, protocol: str = TBT) -> Path:
    """The first training example of one (model, benchmark), decoded: what the model was trained on."""
    return benchmark_dir(work, model, benchmark, protocol) / EXAMPLE_FILE


def examples_frame(work: Work, models: list[str], benchmarks: list[str]):
    """The decoded first training example of each (model, benchmark) that has one."""
    import pandas as pd

    rows = []
    for m in models:
        for b in benchmarks:
            path = example_path(work, m, b)
            note_read(path)
            if path.exists():
                rows.append({"model": m, "benchmark": b, **read_json(path)})
    return pd.DataFrame(rows, columns=["model", "benchmark", "text", "tokens", "loss_tokens", "loss_text"])


def write_unit(unit: Work, record: dict) -> Path:
    """Write a unit's ``unit.json`` (last: it marks the unit finished). Its adapter is named
    relative to the unit's folder, so the unit stays finished when outputs/ moves."""
    record = dict(record)
    if record.get("adapter"):
        record["adapter"] = Path(record["adapter"]).name
    return atomic_write_json(Path(unit) / UNIT_FILE, record)


def forced_out(path: Path) -> bool:
    """Whether ``path`` was written before the start of a ``FORCE=1`` run (:data:`FORCE_ENV`, set
    by :mod:`runner.run`), so that the result or unit it holds is redone, not reused."""
    since = os.environ.get(FORCE_ENV)
    try:
        return bool(since) and path.stat().st_mtime < float(since)
    except FileNotFoundError:
        return False


def unit_record(unit: Work, config: dict | None = None) -> dict | None:
    """A finished unit's record (:func:`check_unit`); None when it has not finished, is damaged or,
    given ``config``, was made with another configuration (so that it is redone)."""
    record, _ = check_unit(unit, config)
    return record


def check_unit(unit: Work, config: dict | None = None) -> tuple[dict | None, str]:
    """``(record, "")`` for a finished unit (of ``config``, when given); else ``(None, why)``, why
    being ``""`` when there is nothing to say (never started, or made with another configuration:
    an ordinary reason to run it) and a few words when a file is missing or damaged."""
    unit = Path(unit)
    path = unit / UNIT_FILE
    if not path.exists():
        return None, f"{lr_label(unit)} has no {UNIT_FILE} (interrupted, or the file was removed)" \
            if unit.is_dir() else ""
    try:
        record = read_json(path)
    except CorruptFile:
        return None, f"{lr_label(unit)}/{UNIT_FILE} does not parse"
    if not isinstance(record, dict):
        return None, f"{lr_label(unit)}/{UNIT_FILE} is not a JSON object"
    if config is not None and (jsonable(record.get("config")) != jsonable(config) or forced_out(path)):
        return None, ""         # to be redone by the job that asks with its config; a reader (no config) still sees it
    problem = _curve_problem(record)
    if problem:
        return None, f"{lr_label(unit)}/{UNIT_FILE}: {problem}"
    if record.get("adapter"):
        record["adapter"] = str(adapter_dir(unit, int(str(record["adapter"]).rsplit("=", 1)[-1])))
    return record, ""


def lr_label(unit: Work) -> str:
    """``mw-llama-s/mw_facts/lr=0.001``: a unit's folder, for messages."""
    return "/".join(Path(unit).parts[-3:])


def _curve_problem(record: dict) -> str:
    """What is wrong with a unit's validation curve ("" when nothing): one point per epoch from 1,
    each with a value of the unit's criterion and its training loss, the best epoch among them."""
    curve, key = record.get("curve"), record.get("criterion", "val_score")
    if not isinstance(curve, list) or not curve:
        return "no validation curve"
    for i, point in enumerate(curve, start=1):
        if not isinstance(point, dict) or point.get("epoch") != i:
            return f"curve point {i} is not epoch {i}"
        for field in (key, "train_loss"):             # null: a non-finite value, recorded as such
            value = point.get(field, "missing")
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
                return f"epoch {i} has no {field}"
    if record.get("best_epoch") not in range(1, len(curve) + 1):
        return f"best epoch {record.get('best_epoch')!r} is not on its curve"
    if record.get("adapter") and not str(record["adapter"]).endswith(f"epoch={record['best_epoch']}"):
        return f"its adapter {record['adapter']} is not the best epoch's"
    return ""


def adapter_problem(adapter: Work) -> str:
    """What is missing or damaged in a kept adapter ("" when nothing): a LoRA adapter's or (full
    training) a whole model's config and weights; a safetensors file as long as its header says."""
    adapter = Path(adapter)
    name = lr_label(adapter)
    if not adapter.is_dir():
        return f"the adapter {name} is missing"
    config = next((c for c in ("adapter_config.json", "config.json") if (adapter / c).exists()), None)
    if config is None:
        return f"the adapter {name} has no adapter_config.json"
    try:
        read_json(adapter / config)
    except CorruptFile:
        return f"{name}/{config} does not parse"
    stem = "adapter_model" if config == "adapter_config.json" else "model"
    weights = [p for p in (adapter / f"{stem}.safetensors", adapter / f"{stem}.bin") if p.exists()]
    if not weights and not list(adapter.glob(f"{stem}-*.safetensors")):
        return f"the adapter {name} has no weights ({stem}.safetensors)"
    for path in [*weights, *adapter.glob(f"{stem}-*.safetensors")]:
        if path.suffix == ".safetensors" and not safetensors_complete(path):
            return f"{name}/{path.name} is truncated or damaged"
    return ""


def safetensors_complete(path: Work) -> bool:
    """Whether a ``.safetensors`` file is as long as its header says (a cheap check that reads the
    header only: a truncated copy or an interrupted write fails it)."""
    path = Path(path)
    try:
        size = path.stat().st_size
        with open(path, "rb") as fh:
            n = int.from_bytes(fh.read(8), "little")
            if n <= 0 or 8 + n > size:
                return False
            header = json.loads(fh.read(n))
        ends = [v["data_offsets"][1] for k, v in header.items() if k != "__metadata__"]
        return 8 + n + max(ends, default=0) == size
    except (OSError, ValueError, KeyError, TypeError, IndexError):
        return False


def unit_problems(work: Work, model: str, benchmark: str, configs: dict[float, dict],
                  chosen: float | None, protocol: str = TBT) -> list[str]:
    """Why the train-before-test units of one (model, benchmark) are not all finished: one entry per
    missing or damaged ``unit.json`` (of its ``configs`` entry) or adapter of the ``chosen`` rate."""
    out = []
    for lr, config in configs.items():
        unit = unit_dir(work, model, benchmark, lr, protocol)
        record, why = check_unit(unit, config)
        if record is None:
            out.append(why or (f"{lr_label(unit)} was made with another configuration" if unit.is_dir()
                               else f"{lr_label(unit)} is missing"))
        elif lr == chosen and record.get("adapter"):
            out.append(adapter_problem(record["adapter"]))
    return [p for p in out if p]


def unit_files(work: Work, models: list[str], benchmarks: list[str]) -> Iterator[tuple[str, str, Path]]:
    """(model, benchmark, unit folder) of every learning-rate unit on disk, finished or not."""
    if not (Path(work) / TBT).is_dir():           # published results: no fine-tuning here
        return
    for m in models:
        for b in benchmarks:
            bdir = benchmark_dir(work, m, b)
            if bdir.is_dir():
                for udir in sorted(bdir.glob("lr=*")):
                    yield m, b, udir


def curves_frame(work: Work, models: list[str], benchmarks: list[str]):
    """Validation curves of the finished units: one row per (model, benchmark, lr, epoch) (columns
    :data:`CURVE_COLUMNS`). Notes the unit files it reads, not the (large) adapters beside them."""
    import pandas as pd

    rows = []
    for m, b, udir in unit_files(work, models, benchmarks):
        note_read(udir / UNIT_FILE)
        unit = unit_record(udir)
        if unit is None:
            continue
        for p in unit["curve"]:
            rows.append({"model": m, "benchmark": b, "lr": unit["lr"], "epoch": p["epoch"],
                         "val_score": p.get("val_score"), "val_loss": p.get("val_loss"),
                         "criterion": unit.get("criterion", "val_score"), "train_loss": p["train_loss"],
                         "best_of_unit": p["epoch"] == unit.get("best_epoch")})
    return pd.DataFrame(rows, columns=CURVE_COLUMNS)


# --------------------------------------------------------------------------- per-item correctness
class ItemFileError(UserError, ValueError):
    """A per-item results file is malformed; the message names it."""


def items_dir(work: Work, protocol: str, benchmark: str | None = None) -> Path:
    """The per-item files of a protocol (of one of its benchmarks, given ``benchmark``)."""
    root = Path(work) / "items" / slug(protocol)
    return root if benchmark is None else root / slug(benchmark)


def items_path(work: Work, protocol: str, benchmark: str, model: str) -> Path:
    return items_dir(work, protocol, benchmark) / f"{slug(model)}.json"


def write_items(work: Work, protocol: str, benchmark: str, model: str, *, metric: str, doc_ids: list,
                correct: list[float]) -> Path:
    """Per-item correctness of one test score (what BenchAlign and the noise estimates read)."""
    return atomic_write_json(items_path(work, protocol, benchmark, model), {
        "model": model, "benchmark": benchmark, "protocol": protocol, "metric": metric,
        "doc_ids": doc_ids, "correct": correct})


def read_items(path: Work) -> dict:
    """One per-item file, checked: the keys, as many values as doc ids, unique ids, every value a
    number in [0, 1]. A file that does not parse raises :class:`lib.util.CorruptFile`, one that
    fails a check :class:`ItemFileError`; both name it."""
    data = read_json(path)
    for key in ("model", "benchmark", "doc_ids", "correct"):
        if not isinstance(data, dict) or key not in data:
            raise ItemFileError(f"{path}: missing key {key!r}")
    ids, correct = data["doc_ids"], data["correct"]
    if len(ids) != len(correct) or len(set(map(str, ids))) != len(ids):
        raise ItemFileError(f"{path}: {len(ids)} doc_ids (unique: {len(set(map(str, ids)))}) for "
                            f"{len(correct)} values")
    bad = [v for v in correct if not (isinstance(v, (int, float)) and 0 <= v <= 1)]
    if bad:
        raise ItemFileError(f"{path}: values that are not numbers in [0, 1], e.g. {bad[0]!r}")
    return data


def items_problem(work: Work, protocol: str, benchmark: str, model: str) -> str:
    """What is wrong with the per-item file of one test score ("" when nothing)."""
    path = items_path(work, protocol, benchmark, model)
    name = "/".join(path.parts[-4:])
    if not path.exists():
        return f"its per-item file {name} is missing"
    try:
        read_items(path)
    except (CorruptFile, ItemFileError) as exc:
        return f"its per-item file {name} is damaged ({str(exc).replace(str(path), '').strip(': ')})"
    return ""


# --------------------------------------------------------------------------- jobs
def _job_name(benchmark: str, lr: float | None) -> str:
    return slug(benchmark) if lr is None else f"{slug(benchmark)}.{lr_name(lr)}"


def lock_path(work: Work, protocol: str, model: str, benchmark: str, lr: float | None = None) -> Path:
    """The lock a job holds while it works on one (model, benchmark) (or on its rate ``lr``)."""
    return Path(work) / "locks" / protocol / slug(model) / f"{_job_name(benchmark, lr)}.lock"


def failure_path(work: Work, protocol: str, model: str, benchmark: str, lr: float | None = None) -> Path:
    """Why one (model, benchmark) (or its rate ``lr``) failed, with the job spec that retries it."""
    return Path(work) / "failed" / protocol / slug(model) / f"{_job_name(benchmark, lr)}.json"


def submitit_dir(work: Work, stage: str | None = None) -> Path:
    """submitit's job logs (of one stage, given ``stage``)."""
    root = Path(work) / "submitit"
    return root if stage is None else root / stage


# --------------------------------------------------------------------------- notebook 07
def benchalign_dir(work: Work) -> Path:
    """Notebook 07's finished units of work (:mod:`lib.benchalign.memo`), so a stopped run resumes."""
    return Path(work) / "benchalign"


# --------------------------------------------------------------------------- the mini world (lib.miniworld)
def world_dir(work: Work) -> Path:
    """The generated world: corpus, knowledge base and its benchmarks as local lm-eval tasks."""
    return Path(work) / "world"


def models_dir(work: Work) -> Path:
    """The zoo's pre-trained models and their build records."""
    return Path(work) / "models"


def zoo_summary_path(work: Work) -> Path:
    return Path(work) / "zoo.json"
