"""What one job runs (:class:`JobSpec`): a model, its benchmarks, the protocol, the recipe and the
evaluation settings; and, from them, what determines a result (:meth:`JobSpec.config`, stored with
it so that a result of another configuration is redone) and a result's provenance.

The job grid (:mod:`lib.pipeline.launch.jobs`) makes the specs and launches them; the protocols
(:mod:`lib.pipeline.protocols`) run one (model, benchmark) of a spec.
"""

from __future__ import annotations

import functools
import os
from dataclasses import asdict, dataclass, field, replace
from importlib import metadata
from pathlib import Path

from .. import layout, paths, store
from ..store import DIRECT, TBT
from ..util import code_digest, jsonable, lib_closure
from . import evaluate as ev
from . import finetune as ft
from . import tasks as tk
from .device import PINNED_ARITHMETIC, THREADS_ENV


def planned_benchmarks(protocol: str, selection: dict) -> list[str]:
    """The tasks of notebook 01's ``selection`` a job of ``protocol`` runs: every selected one for the
    paper's two protocols; for a cheaper form (k-shot, a reduced budget), which only ranks
    benchmarks, the selected benchmarks without the perplexity corpora."""
    names = list(selection.get("selected") or [])
    if protocol in store.PROTOCOLS:
        return names
    return [n for n in names if n in selection.get("benchmarks", names)]


# The libraries whose code shapes a unit's numbers (their versions are part of its key).
NUMERIC_LIBRARIES = ("torch", "transformers", "peft", "lm_eval", "datasets", "tokenizers", "numpy")


@functools.lru_cache(maxsize=4)
def code_version(root: Path | None = None) -> dict:
    """What code computes a unit, part of its key (:meth:`JobSpec.config`): every ``lib`` module a
    job imports, by what it does (:func:`lib.util.code_digest`: comments and docstrings do not
    count), the versions of the libraries that shape its numbers, and the CPU arithmetic and thread
    count it runs with. After any change of these a stored unit is redone, never reused."""
    root = root or paths.ROOT
    files = lib_closure(["import lib.pipeline.protocols"], root)
    return {"lib": {p.relative_to(root).as_posix(): code_digest(p)[:16] for p in files},
            "libraries": {name: metadata.version(name) for name in NUMERIC_LIBRARIES},
            "arithmetic": {**{k: os.environ.get(k) for k in PINNED_ARITHMETIC},
                           THREADS_ENV: os.environ.get(THREADS_ENV) or "1"}}     # its default, as device.py reads it


def code_change(stored: dict | None, current: dict | None = None) -> str:
    """In a few words, how the code of a stored unit (its config's ``code``) differs from
    ``current`` (today's :func:`code_version`); ``""`` when it does not."""
    current = code_version() if current is None else current
    if not isinstance(stored, dict):
        return "computed before units recorded their code"
    if stored == current:
        return ""
    old, new = stored.get("lib", {}), current["lib"]
    changes = [f"{f} changed" for f in sorted(new) if f in old and old[f] != new[f]]
    changes += [f"{f} new" for f in sorted(set(new) - set(old))]
    changes += [f"{f} gone" for f in sorted(set(old) - set(new))]
    for part in ("libraries", "arithmetic"):
        was = stored.get(part) or {}
        changes += [f"{k} {was.get(k)} -> {v}" for k, v in current[part].items() if was.get(k) != v]
    shown = ", ".join(changes[:3]) + (f" and {len(changes) - 3} more" if len(changes) > 3 else "")
    return f"computed by other code ({shown})"


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
        lies: a model rebuilt in place with other weights is redone, a moved folder is not. The
        code that computes it is in it too (:func:`code_version`): a result of older code is redone."""
        cfg = {"protocol": self.protocol, "model": ev.model_key(self.source), "splits": self.splits,
               "chat_template": self.chat_template, "dtype": self.dtype, "add_bos_token": self.add_bos_token,
               "max_gen_toks": self.max_gen_toks, "code": code_version()}
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
        return store.base_protocol(self.protocol) == TBT

    def provenance(self, plan: tk.SplitPlan, **extra) -> dict:
        """The provenance of a result of this job (the one place it is put together): the recipe once,
        in ``config``; its documents in ``dataset``; how a unit ran (micro-batch, seconds) in ``extra``."""
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
        stored, config = result.provenance.get("config") or {}, self.config()
        if stored != config:
            same_but_code = {k: v for k, v in stored.items() if k != "code"} == \
                {k: v for k, v in config.items() if k != "code"}
            return code_change(stored.get("code"), config["code"]) if same_but_code else ""
        if layout.forced_out(path):
            return "FORCE=1 redoes it"
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
