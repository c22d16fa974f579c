"""The job grid: every (protocol, model, benchmark, learning rate) unit, resumable, run locally or on Slurm.

Units and where they live (``<work>`` = ``outputs/<profile>/work``)::

    <work>/train_before_test/<model>/<benchmark>/lr=2e-05/unit.json   one learning rate: curve (done marker)
    <work>/train_before_test/<model>/<benchmark>/lr=2e-05/epoch=3/    its best epoch's LoRA adapter
    <work>/train_before_test/<model>/<benchmark>/selection.json       chosen (lr, epoch) and all curves
    <store>/train_before_test/<benchmark>/<model>.json                 test score of the chosen adapter
    <store>/direct_eval/<benchmark>/<model>.json                       zero-shot test score
    <work>/items/<protocol>/<benchmark>/<model>.json                   per-item correctness

Every file is written atomically and the last one of a unit marks it done, so finished units are
skipped and a killed unit is redone from scratch (deterministically), never read half-written.

A *job* is one model with a list of benchmarks: the base model is loaded once per job and kept
in memory across benchmarks, learning rates and epochs (adapters are attached and removed). Jobs
run in this process with a progress bar (``executor="local"``) or through submitit
(``"slurm"`` on a cluster; ``"submitit_local"`` to try that path on one machine).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from .. import store
from ..store import DIRECT, PROTOCOLS, TBT
from ..util import atomic_write_json, did_you_mean, jsonable
from . import evaluate as ev
from . import finetune as ft
from . import tasks as tk

EXECUTORS = ("local", "slurm", "submitit_local")


class JobError(RuntimeError):
    """A job failed (the message names the model and where its log is)."""


@dataclass
class JobSpec:
    """Everything one job needs, as plain data (picklable for submitit, JSON for the CLI)."""
    protocol: str                           # lib.store.DIRECT or lib.store.TBT
    model: str                              # name in the store
    source: str                             # local folder or hub id
    benchmarks: list[str]
    include_paths: list[str]
    include_defaults: bool
    store_root: str
    work_root: str
    recipe: dict = field(default_factory=dict)   # finetune.Recipe fields (train-before-test only)
    caps: dict = field(default_factory=dict)     # train / validation / test (from notebook 01)
    split_seed: int = 0                          # seed of the split plan (from notebook 01)
    chat_template: bool = False                  # apply the model's chat template (instruct models)
    eval_batch_size: int = 32
    bootstrap_iters: int = 1000
    task_timeout: float = 300.0

    def __post_init__(self):
        if self.protocol not in PROTOCOLS:
            raise ValueError(f"job protocol must be one of {list(PROTOCOLS)}, got {self.protocol!r}")

    def config(self, lr: float | None = None) -> dict:
        """What determines a result (recorded with it): a result or unit made with another
        recipe, split plan, model source or chat setting is not reused but redone."""
        cfg = {"protocol": self.protocol, "source": self.source, "caps": self.caps,
               "split_seed": self.split_seed, "chat_template": self.chat_template}
        if self.protocol == TBT:
            recipe = {k: v for k, v in self.recipe.items() if k != "lrs"}
            cfg["recipe"] = recipe if lr is None else {**recipe, "lr": lr}
            if lr is None:
                cfg["lrs"] = list(self.recipe["lrs"])
        return jsonable(cfg)

    def provenance(self, plan: tk.SplitPlan, **extra) -> dict:
        """The provenance of a result of this job (the one place it is put together)."""
        return {"source": self.source, "seed": self.recipe.get("seed", 0), "split_seed": self.split_seed,
                "n_train": plan.sizes["train"], "n_val": plan.sizes["validation"], "n_test": plan.sizes["test"],
                "test_split": plan.source["test"], "validation_carved_from_train": plan.carved,
                "chat_template": self.chat_template, "caps": plan.caps, "config": self.config(), **extra}

    def done(self, benchmark: str) -> bool:
        path = store.path_for(self.store_root, self.protocol, benchmark, self.model)
        return path.exists() and store.read(path).provenance.get("config") == self.config()

    def pending(self) -> list[str]:
        """Benchmarks without a result of this configuration in the store."""
        return [b for b in self.benchmarks if not self.done(b)]


def benchmark_dir(work: str | Path, model: str, benchmark: str) -> Path:
    return Path(work) / TBT / store.slug(model) / store.slug(benchmark)


def unit_dir(work: str | Path, model: str, benchmark: str, lr: float) -> Path:
    return benchmark_dir(work, model, benchmark) / ft.lr_name(lr)


# ---------------------------------------------------------------------------------------------
# planning (validates everything before any training)


def plan(protocol: str, models: list[str], selection: dict, *, store_root: str | Path, work_root: str | Path,
         recipe: ft.Recipe | None = None, chat_template: bool = False, eval_batch_size: int = 32,
         bootstrap_iters: int = 1000, benchmarks_per_job: int = 0) -> list[JobSpec]:
    """One :class:`JobSpec` per model (and chunk of ``benchmarks_per_job`` benchmarks, 0 = all).

    ``selection`` is notebook 01's summary: ``selected`` tasks, ``include_paths``,
    ``include_defaults``, ``caps`` and ``split_seed`` (so 02 and 03 test on the same documents).
    ``models`` are names from the store's model metadata (with a ``path``), local folders or hub
    ids. ``chat_template`` applies the chat template to instruction-tuned models only (by
    ``lib.metadata``). Unknown models/tasks and tasks that cannot be trained on raise here.
    """
    from .. import metadata

    if protocol == TBT and recipe is None:
        raise ValueError("plan: train-before-test needs a recipe")
    names = list(selection.get("selected") or [])
    if not names:
        raise tk.TaskError("no benchmarks selected (notebook 01 selected none)")
    if not models:
        raise ev.ModelError("no models given")
    manager = tk.task_manager(selection.get("include_paths") or [], bool(selection.get("include_defaults")))
    tk.check_names(manager, names)
    for name, row in (selection.get("tasks") or {}).items():
        if name in names and row.get("count_source") == "dataset":
            tk.validate_for_training(tk.TaskInfo.from_dict(row))
    resolved = [ev.resolve_model(m, store_root) for m in models]
    seen = {}
    for (name, _), entry in zip(resolved, models):
        if name in seen:
            raise ev.ModelError(f"models {seen[name]!r} and {entry!r} get the same name {name!r}")
        seen[name] = entry
    chunk = benchmarks_per_job or len(names)
    specs = []
    for name, source in resolved:
        try:
            instruct = metadata.model_info(name, store_root).instruct
        except metadata.MetadataError:
            instruct = False
        for i in range(0, len(names), chunk):
            specs.append(JobSpec(protocol=protocol, model=name, source=source, benchmarks=names[i:i + chunk],
                                 include_paths=[str(p) for p in selection.get("include_paths") or []],
                                 include_defaults=bool(selection.get("include_defaults")),
                                 store_root=str(store_root), work_root=str(work_root),
                                 recipe=recipe.to_dict() if protocol == TBT else {},
                                 caps=dict(selection.get("caps") or {}),
                                 split_seed=int(selection.get("split_seed", 0)),
                                 chat_template=bool(chat_template and instruct),
                                 eval_batch_size=eval_batch_size, bootstrap_iters=bootstrap_iters))
    return specs


# ---------------------------------------------------------------------------------------------
# running one job


def _log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def run_job(spec: JobSpec | dict, progress=None) -> dict:
    """Run the pending benchmarks of one job; returns {benchmark: score} of what it finished."""
    spec = JobSpec(**spec) if isinstance(spec, dict) else spec
    pending = spec.pending()
    if not pending:
        return {}
    manager = tk.task_manager(spec.include_paths, spec.include_defaults)
    model, tokenizer = ev.load_model(spec.source)          # once per job
    done = {}
    for bench in pending:
        task, info = tk.inspect(manager, bench, spec.store_root, spec.task_timeout)
        split_plan = tk.plan_splits(task, info, spec.caps, spec.split_seed)
        tk.install_splits(task, split_plan)
        score = (train_before_test if spec.protocol == TBT else direct_eval)(
            spec, model, tokenizer, task, info, split_plan)
        done[bench] = score
        if progress:
            progress(f"{spec.model} / {bench}: {info.metric} {score:.4f}")
    return done


def direct_eval(spec: JobSpec, model, tokenizer, task, info: tk.TaskInfo, split_plan: tk.SplitPlan) -> float:
    """Direct evaluation of one benchmark: the model as it is, zero-shot, on the planned test split."""
    outcome = _score(spec, model, tokenizer, task, info, split_plan, "test")
    ev.record(spec.store_root, spec.work_root, DIRECT, info, spec.model, outcome, spec.provenance(split_plan))
    return outcome.score


def train_before_test(spec: JobSpec, model, tokenizer, task, info: tk.TaskInfo,
                      split_plan: tk.SplitPlan) -> float:
    """Train-before-test of one benchmark, as the paper does it: train a LoRA adapter at each
    learning rate (validating after every epoch), choose the (learning rate, epoch) that is best on
    validation, score the test split once with that adapter, record the result."""
    recipe = ft.Recipe(**spec.recipe)
    validate = partial(_validation_score, spec, tokenizer, task, info, split_plan)
    examples = None

    # 1. train each learning rate (a finished unit of the same configuration is reused)
    units = []
    for lr in recipe.lrs:
        udir = unit_dir(spec.work_root, spec.model, info.name, lr)
        unit = ft.read_unit(udir, spec.config(lr))
        if unit is None or (unit.adapter and not Path(unit.adapter).exists()):   # missing or pruned: retrain
            if examples is None:
                lm = ev.make_lm(model, tokenizer, spec.eval_batch_size)
                examples = ft.training_examples(task, info, lm, recipe.max_length, spec.chat_template)
            unit = ft.train_unit(model, tokenizer, examples, recipe, lr, udir, validate, info.higher_is_better,
                                 config=spec.config(lr))
        units.append(unit)

    # 2. choose on validation
    lr, epoch, val_score = ft.select_best(units, info.higher_is_better)
    chosen = next(u for u in units if u.lr == lr)
    if chosen.best_epoch != epoch or not Path(chosen.adapter).exists():
        raise JobError(f"{spec.model} / {info.name}: adapter of {ft.lr_name(lr)} epoch={epoch} missing at "
                       f"{chosen.adapter}")
    curves = {ft.lr_name(u.lr): [p["val_score"] for p in u.curve] for u in units}
    atomic_write_json(benchmark_dir(spec.work_root, spec.model, info.name) / "selection.json",
                      {"lr": lr, "epoch": epoch, "val_score": val_score, "adapter": chosen.adapter,
                       "curves": curves, "higher_is_better": info.higher_is_better})

    # 3. score the test split once, with the chosen adapter
    with ft.adapter(model, chosen.adapter) as tuned:
        outcome = _score(spec, tuned, tokenizer, task, info, split_plan, "test")

    # 4. record, and keep only the chosen adapter
    ev.record(spec.store_root, spec.work_root, TBT, info, spec.model, outcome, spec.provenance(
        split_plan, lr=lr, epoch=epoch, val_score=val_score, val_curves=curves, adapter=chosen.adapter,
        recipe=recipe.to_dict(), train_seconds=sum(u.seconds for u in units)))
    for u in units:
        if u.lr != lr and u.adapter:
            shutil.rmtree(u.adapter, ignore_errors=True)
    return outcome.score


def _score(spec: JobSpec, model, tokenizer, task, info, split_plan, role: str) -> ev.Outcome:
    lm = ev.make_lm(model, tokenizer, spec.eval_batch_size)
    return ev.evaluate(lm, task, info, role, split_plan.ids[role], chat_template=spec.chat_template,
                       bootstrap_iters=spec.bootstrap_iters if role == "test" else 0,
                       seed=spec.recipe.get("seed", 0))


def _validation_score(spec, tokenizer, task, info, split_plan, peft_model) -> float:
    return _score(spec, peft_model, tokenizer, task, info, split_plan, "validation").score


# ---------------------------------------------------------------------------------------------
# launching


def launch(specs: list[JobSpec], executor: str = "local", resources: dict | None = None,
           log_folder: str | Path | None = None) -> dict[str, dict]:
    """Run the jobs; returns {model: {benchmark: score}} of what they finished.

    ``local``: in this process, one after another, with a tqdm bar over jobs. ``slurm``:
    ``submitit.AutoExecutor`` with ``resources`` (e.g. ``slurm_partition``, ``gpus_per_node``,
    ``timeout_min``, ``mem_gb``, ``cpus_per_task``) as one job array; ``submitit_local``
    (``LocalExecutor``, subprocesses) runs the same path on one machine. Jobs with nothing
    pending are not submitted.
    """
    if executor not in EXECUTORS:
        raise ValueError(f"unknown executor {executor!r}{did_you_mean(executor, EXECUTORS)}; "
                         f"expected one of {list(EXECUTORS)}")
    todo = [s for s in specs if s.pending()]
    results: dict[str, dict] = {}
    if not todo:
        return results
    if executor == "local":
        from tqdm.auto import tqdm

        bar = tqdm(todo, desc=f"{todo[0].protocol} jobs", unit="job")
        for spec in bar:
            bar.set_postfix_str(spec.model)
            results.setdefault(spec.model, {}).update(run_job(spec, progress=bar.write))
        return results
    import submitit

    folder = Path(log_folder or Path(todo[0].work_root) / "submitit")
    if executor == "slurm":
        ex = submitit.AutoExecutor(folder=folder, cluster="slurm")
        res = dict(resources or {})
    else:                                   # the local executor knows only generic parameters
        ex = submitit.LocalExecutor(folder=folder)
        res = {k: v for k, v in (resources or {}).items() if k in ("timeout_min", "gpus_per_node", "cpus_per_task",
                                                                    "nodes", "tasks_per_node", "visible_gpus")}
    if res:
        ex.update_parameters(**res)
    jobs = ex.map_array(run_job, todo)
    for spec, job in zip(todo, jobs):
        try:
            results.setdefault(spec.model, {}).update(job.result())
        except Exception as exc:
            raise JobError(f"{spec.protocol} job for model {spec.model!r} failed ({type(exc).__name__}); "
                           f"logs: {folder}") from exc
    return results


# ---------------------------------------------------------------------------------------------
# reading back


def curves_frame(work: str | Path, models: list[str], benchmarks: list[str]):
    """Validation curves of finished units: one row per (model, benchmark, lr, epoch)."""
    import pandas as pd

    rows = []
    for m in models:
        for b in benchmarks:
            bdir = benchmark_dir(work, m, b)
            if not bdir.is_dir():
                continue
            for udir in sorted(bdir.glob("lr=*")):
                unit = ft.read_unit(udir)
                if unit is None:
                    continue
                for p in unit.curve:
                    rows.append({"model": m, "benchmark": b, "lr": unit.lr, "epoch": p["epoch"],
                                 "val_score": p["val_score"], "train_loss": p["train_loss"],
                                 "best_of_unit": p["epoch"] == unit.best_epoch})
    return pd.DataFrame(rows, columns=["model", "benchmark", "lr", "epoch", "val_score", "train_loss",
                                       "best_of_unit"])


def main(argv: list[str] | None = None) -> int:
    """``python -m lib.pipeline.jobs SPEC.json``: run one job spec (used by tests and by hand)."""
    ap = argparse.ArgumentParser(prog="python -m lib.pipeline.jobs", description=main.__doc__)
    ap.add_argument("spec", help="a JSON file holding one JobSpec (or a list of them)")
    args = ap.parse_args(argv)
    data = json.loads(Path(args.spec).read_text())
    for item in data if isinstance(data, list) else [data]:
        print(json.dumps(run_job(JobSpec(**item), progress=_log)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
