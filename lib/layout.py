"""The work folder's layout: every path under ``outputs/<profile>/work/`` is built here, and each
kind of file there has one reader with one set of checks. Other layers ask this module; none
rebuilds a path. (Test scores live in the results store, :mod:`lib.store`.)

::

    <work>/train_before_test/<model>/<benchmark>/lr=2e-05/unit.json   one learning rate: its curve (done marker)
    <work>/train_before_test/<model>/<benchmark>/lr=2e-05/epoch=3/    its best epoch's LoRA adapter
    <work>/train_before_test/<model>/<benchmark>/lr=2e-05/resume/     while unfinished: its last finished epoch
    <work>/train_before_test/<model>/<benchmark>/selection.json       the chosen (lr, epoch) and every curve
    <work>/train_before_test/<model>/<benchmark>/first_example.json   its first training example, decoded
    <work>/items/<protocol>/<benchmark>/<model>.json                  per-item correctness of a test score
    <work>/locks/<protocol>/<model>/<benchmark>[.lr=2e-05].lock       held while a job works on the unit (or on one lr)
    <work>/failed/<protocol>/<model>/<benchmark>[.lr=2e-05].json      why a unit failed, and the spec that retries it
    <work>/submitit/<stage>/                                          submitit's logs of a stage's jobs
    <work>/world/, <work>/models/, <work>/zoo.json                    the mini world, its zoo, the zoo's summary

Model and benchmark names appear as :func:`lib.store.slug` (``org/model`` -> ``org__model``).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

from .store import TBT, slug
from .util import atomic_write_json, current, note_read, read_json

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


def benchmark_dir(work: Work, model: str, benchmark: str) -> Path:
    """The train-before-test units of one (model, benchmark)."""
    return Path(work) / TBT / slug(model) / slug(benchmark)


def unit_dir(work: Work, model: str, benchmark: str, lr: float) -> Path:
    """One learning-rate unit: ``unit.json`` and the adapter of its best epoch."""
    return benchmark_dir(work, model, benchmark) / lr_name(lr)


def adapter_dir(unit: Work, epoch: int) -> Path:
    """The LoRA adapter a unit keeps for ``epoch``."""
    return Path(unit) / f"epoch={epoch}"


def resume_dir(unit: Work) -> Path:
    """A unit's state after its last finished epoch (trainable weights, optimiser, schedule, random
    states, the curve so far), replaced atomically after every epoch and removed when the unit ends."""
    return Path(unit) / RESUME_DIR


def selection_path(work: Work, model: str, benchmark: str) -> Path:
    """The chosen (learning rate, epoch) of one (model, benchmark), with every curve."""
    return benchmark_dir(work, model, benchmark) / SELECTION_FILE


def example_path(work: Work, model: str, benchmark: str) -> Path:
    """The first training example of one (model, benchmark), decoded: what the model was trained on."""
    return benchmark_dir(work, model, benchmark) / EXAMPLE_FILE


def examples_frame(work: Work, models: list[str], benchmarks: list[str]):
    """The decoded first training example of each (model, benchmark) that has one: columns model,
    benchmark, text, tokens, loss_tokens, loss_text (the tokens that carry loss)."""
    import pandas as pd

    rows = []
    for m in models:
        for b in benchmarks:
            path = example_path(work, m, b)
            note_read(path)
            if path.exists():
                rows.append({"model": m, "benchmark": b, **read_json(path)})
    return pd.DataFrame(rows, columns=["model", "benchmark", "text", "tokens", "loss_tokens", "loss_text"])


def read_unit(unit: Work, config: dict | None = None) -> dict | None:
    """A finished unit's record (``unit.json``); None when it has not finished or, given
    ``config``, was made with another configuration (so that it is redone)."""
    path = Path(unit) / UNIT_FILE
    if config is not None:
        return current(path, config, field="config")
    return read_json(path) if path.exists() else None


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
    """Validation curves of the finished units: one row per (model, benchmark, lr, epoch), with the
    validation loss and/or score and the criterion the unit was chosen on (columns
    :data:`CURVE_COLUMNS`). Records the unit files it reads (:func:`lib.util.note_read`), not the
    (large) adapters beside them."""
    import pandas as pd

    rows = []
    for m, b, udir in unit_files(work, models, benchmarks):
        note_read(udir / UNIT_FILE)
        unit = read_unit(udir)
        if unit is None:
            continue
        for p in unit["curve"]:
            rows.append({"model": m, "benchmark": b, "lr": unit["lr"], "epoch": p["epoch"],
                         "val_score": p.get("val_score"), "val_loss": p.get("val_loss"),
                         "criterion": unit.get("criterion", "val_score"), "train_loss": p["train_loss"],
                         "best_of_unit": p["epoch"] == unit.get("best_epoch")})
    return pd.DataFrame(rows, columns=CURVE_COLUMNS)


# --------------------------------------------------------------------------- per-item correctness
class ItemFileError(ValueError):
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


# --------------------------------------------------------------------------- jobs
def _job_name(benchmark: str, lr: float | None) -> str:
    return slug(benchmark) if lr is None else f"{slug(benchmark)}.{lr_name(lr)}"


def lock_path(work: Work, protocol: str, model: str, benchmark: str, lr: float | None = None) -> Path:
    """The lock a job holds while it works on one (model, benchmark) (:mod:`lib.pipeline.locks`);
    given ``lr``, on that learning rate of it alone (a unit the preflight split)."""
    return Path(work) / "locks" / protocol / slug(model) / f"{_job_name(benchmark, lr)}.lock"


def failure_path(work: Work, protocol: str, model: str, benchmark: str, lr: float | None = None) -> Path:
    """Why one (model, benchmark) (given ``lr``: one learning rate of it) failed, with the job spec
    that retries it."""
    return Path(work) / "failed" / protocol / slug(model) / f"{_job_name(benchmark, lr)}.json"


def submitit_dir(work: Work, stage: str | None = None) -> Path:
    """submitit's job logs (of one stage, given ``stage``)."""
    root = Path(work) / "submitit"
    return root if stage is None else root / stage


# --------------------------------------------------------------------------- the mini world (lib.miniworld)
def world_dir(work: Work) -> Path:
    """The generated world: corpus, knowledge base and its benchmarks as local lm-eval tasks."""
    return Path(work) / "world"


def models_dir(work: Work) -> Path:
    """The zoo's pre-trained models and their build records."""
    return Path(work) / "models"


def zoo_summary_path(work: Work) -> Path:
    return Path(work) / "zoo.json"
