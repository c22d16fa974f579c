"""What one job runs (:class:`JobSpec`): a model, its benchmarks, the protocol, the recipe and the
evaluation settings; and, from them, what determines a result (:meth:`JobSpec.config`, stored with
it so that a result of another configuration is redone) and a result's provenance.

The job grid (:mod:`lib.pipeline.launch.jobs`) makes the specs and launches them; the protocols
(:mod:`lib.pipeline.protocols`) run one (model, benchmark) of a spec.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from .. import layout, paths, store
from ..store import DIRECT, TBT
from ..util import jsonable
from . import evaluate as ev
from . import finetune as ft
from . import tasks as tk


def planned_benchmarks(protocol: str, selection: dict) -> list[str]:
    """The tasks of notebook 01's ``selection`` a job of ``protocol`` runs: every selected one for the
    paper's two protocols; for a cheaper form (k-shot, a reduced budget), which only ranks
    benchmarks, the selected benchmarks without the perplexity corpora."""
    names = list(selection.get("selected") or [])
    if protocol in store.PROTOCOLS:
        return names
    return [n for n in names if n in selection.get("benchmarks", names)]


def fine_tunes(protocol: str) -> bool:
    """Whether a job of ``protocol`` fine-tunes (train-before-test or a form of it)."""
    return store.base_protocol(protocol) == TBT


@dataclass
class JobSpec:
    """Everything one job needs: a dataclass of plain values and the typed recipe, so it pickles for
    submitit as it is and becomes a dict only at the JSON command-line boundary (:meth:`to_dict`,
    :meth:`from_dict`)."""
    protocol: str                           # the store's name: lib.store.DIRECT, TBT or a form of one (REDUCED, k-shot)
    model: str                              # name in the store
    source: str                             # local folder or hub id
    benchmarks: list[str]
    include_paths: list[str]
    include_defaults: bool
    store_root: str
    work_root: str
    recipe: ft.Recipe | None = None              # the fine-tuning recipe (train-before-test only)
    splits: dict = field(default_factory=dict)   # tasks.SplitRule fields (from notebook 01)
    chat_template: bool = False                  # apply the model's chat template (instruct models)
    dtype: str = "float32"                       # weights and compute (the paper: float32)
    add_bos_token: bool = True                   # lm-eval encodes contexts with special tokens (paper)
    max_gen_toks: int = 256                      # generation cap (the paper's gen_kwargs; 0: the task's)
    eval_batch_size: int | str = 1               # documents per forward pass (the paper: 1) or "auto"
    bootstrap_iters: int = 1000
    task_timeout: float = 300.0                  # seconds to load a dataset (notebook 01's task_timeout)
    only_lr: float | None = None                 # train this learning rate's unit and stop (a unit the preflight
                                                 # split: the job of all its rates then chooses and tests)
    num_fewshot: int = 0                         # direct evaluation: examples of the training split in the prompt
    train_fraction: float = 1.0                  # train-before-test: the share of the planned training split used

    def __post_init__(self):
        base = store.base_protocol(self.protocol)
        if self.num_fewshot and (base != DIRECT or self.protocol != store.fewshot_protocol(self.num_fewshot)):
            raise ValueError(f"a job of {self.num_fewshot} in-context examples is stored as "
                             f"{store.fewshot_protocol(self.num_fewshot)!r}, not {self.protocol!r}")
        if not 0 < self.train_fraction <= 1 or (self.train_fraction < 1 and base != TBT):
            raise ValueError(f"train_fraction {self.train_fraction}: a share in (0, 1], below 1 only for "
                             "train-before-test")
        if base == TBT and not isinstance(self.recipe, ft.Recipe):
            raise ValueError(f"a train-before-test job needs a finetune.Recipe, got {type(self.recipe).__name__}")
        ev.check_batch_size(self.eval_batch_size)
        if self.only_lr is not None and (base != TBT or self.only_lr not in self.recipe.lrs):
            raise ValueError(f"only_lr {self.only_lr} is not one of the recipe's learning rates")

    def to_dict(self) -> dict:
        """Plain JSON-ready values (what a failure record keeps to retry the job)."""
        return jsonable(asdict(self))

    @classmethod
    def from_dict(cls, data: dict) -> JobSpec:
        """The spec of :meth:`to_dict`'s values (the recipe typed again)."""
        recipe = data.get("recipe")
        return cls(**{**data, "recipe": ft.Recipe(**recipe) if recipe else None})

    def config(self, lr: float | None = None) -> dict:
        """What determines a result (recorded with it): a result or unit made with another
        recipe, split rule, model, precision or evaluation setting is not reused but redone. The
        model is named by its content (:func:`lib.pipeline.evaluate.model_key`), never by where it
        lies: a model rebuilt in place with other weights is redone, a moved folder is not."""
        cfg = {"protocol": self.protocol, "model": ev.model_key(self.source), "splits": self.splits,
               "chat_template": self.chat_template, "dtype": self.dtype, "add_bos_token": self.add_bos_token,
               "max_gen_toks": self.max_gen_toks}
        if self.trains:
            recipe = {k: v for k, v in self.recipe.key().items() if k != "lrs"}
            cfg["recipe"] = recipe if lr is None else {**recipe, "lr": lr}
            if lr is None:
                cfg["lrs"] = list(self.recipe.lrs)
        if self.num_fewshot:                      # (left out at their defaults: results made before stay valid)
            cfg["num_fewshot"] = self.num_fewshot
        if self.train_fraction < 1:
            cfg["train_fraction"] = self.train_fraction
        return jsonable(cfg)

    @property
    def trains(self) -> bool:
        """Whether the job fine-tunes (train-before-test or a form of it)."""
        return fine_tunes(self.protocol)

    def provenance(self, plan: tk.SplitPlan, **extra) -> dict:
        """The provenance of a result of this job (the one place it is put together). The recipe is
        in it once, as part of ``config`` (what determines the result: its fields, the learning
        rates, splits, model source, evaluation settings); what its documents are in ``dataset``
        (:func:`lib.pipeline.datasets.record`); how a unit ran (micro-batch, gradient checkpointing,
        seconds) comes in ``extra``."""
        rule = tk.SplitRule.from_dict(self.splits)
        return {"source": paths.portable(self.source) if Path(self.source).is_absolute() else self.source,
                "seed": self.seed, "split_seed": rule.seed,
                "n_train": plan.sizes["train"], "n_val": plan.sizes["validation"], "n_test": plan.sizes["test"],
                "test_split": plan.source["test"], "validation_carved_from_train": plan.carved,
                "validation_in_test": plan.validation_in_test, "split_procedure": rule.procedure,
                "chat_template": self.chat_template, "dtype": self.dtype, "add_bos_token": self.add_bos_token,
                "max_gen_toks": self.max_gen_toks, "eval_batch_size": self.eval_batch_size, "caps": plan.caps,
                "dataset": plan.dataset, "config": self.config(), **extra}

    @property
    def seed(self) -> int:
        """The recipe's seed (0 for direct evaluation: lm-eval's few-shot seed, unused zero-shot)."""
        return self.recipe.seed if self.recipe is not None else 0

    def unfinished(self, benchmark: str) -> str | None:
        """None when ``benchmark`` has a result of this configuration and every file it stands on is
        there and sound (the per-item file; for train-before-test every learning rate's
        ``unit.json`` and the chosen adapter, :func:`lib.layout.unit_problems`). Otherwise why it
        is (re)done: ``""`` when it was simply not made, or made another way; else which files are
        missing or damaged, in a few words."""
        path = store.path_for(self.store_root, self.protocol, benchmark, self.model)
        if not path.exists():
            return ""
        try:
            result = store.read(path)
        except store.StoreError as exc:      # what is wrong, not the advice to delete it: it is being redone
            why = str(exc).split("; delete it", 1)[0].split(": ", 2)[-1][:120]
            return f"its result {'/'.join(path.parts[-3:])} is damaged ({why})"
        if result.provenance.get("config") != self.config():
            return ""
        problems = []
        prov = result.provenance               # per-item values were written (perplexity has none)
        if prov.get("per_item", prov.get("kind") != "loglikelihood_rolling"):
            problems.append(layout.items_problem(self.work_root, self.protocol, benchmark, self.model))
        if self.trains:
            problems += layout.unit_problems(self.work_root, self.model, benchmark,
                                             {lr: self.config(lr) for lr in self.recipe.lrs},
                                             chosen=result.provenance.get("lr"), protocol=self.protocol)
        problems = [p for p in problems if p]
        return "; ".join(problems) if problems else None

    def done(self, benchmark: str) -> bool:
        """This configuration's result is there and whole (with ``only_lr``: or that rate's unit has finished)."""
        if self.unfinished(benchmark) is None:
            return True
        return self.only_lr is not None and layout.unit_record(
            layout.unit_dir(self.work_root, self.model, benchmark, self.only_lr, self.protocol),
            self.config(self.only_lr)) is not None

    def pending(self) -> list[str]:
        """Benchmarks without a result of this configuration in the store."""
        return [b for b in self.benchmarks if not self.done(b)]

    def only(self, benchmark: str) -> JobSpec:
        """This job restricted to one benchmark (what a retry runs)."""
        return replace(self, benchmarks=[benchmark])

    def by_lr(self) -> list[JobSpec]:
        """One job per learning rate of this (train-before-test) job: each trains its rate's unit and
        stops; this job, run after them, finds the units finished, chooses and tests."""
        return [replace(self, only_lr=lr) for lr in self.recipe.lrs]
