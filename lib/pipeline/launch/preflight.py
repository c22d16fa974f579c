"""The preflight (notebook 02 runs it; ``make preflight`` is :mod:`runner.preflight`): before any
job is submitted, what each (model, benchmark) of notebook 02 costs in GPU-hours and memory, and
whether it can finish within the time limit. The estimates are rough by design (stated
assumptions): they say which units need micro-batches or gradient checkpointing, which must be
split into one job per learning rate, and which cannot run at all (:class:`PreflightError`).
"""

from __future__ import annotations

import functools
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from ... import paths, store
from ...errors import UserError
from . import slurm

BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
# sustained TFLOP/s assumed for the time estimate: an A100/H100-class GPU at about 40 % of peak
# (float32 matmuls without TF32, PyTorch's default; half precision on tensor cores)
TFLOPS = {"float32": 15.0, "bfloat16": 120.0, "float16": 120.0}
CHARS_PER_TOKEN = 4.0          # English text with a 30k-250k BPE vocabulary: 3.5-4.5 characters a token
CONTEXT_GB = 1.5               # CUDA context, allocator slack and the LoRA optimiser state
DEFAULT_CHARS = 400            # characters of a training example when notebook 01 has not measured them


# ---------------------------------------------------------------------------------------------
# model sizes and the cost of a unit


def model_shape(source: str) -> dict:
    """Architecture numbers of a model from its config alone (no weights are loaded): family,
    parameters, layers, width, heads, vocabulary. ``source``: a folder, also by the portable name
    results record (``outputs:mini/work/models/x``), or a hub id."""
    return _shape(str(paths.located(source)))


@functools.lru_cache(maxsize=256)
def _shape(source: str) -> dict:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(source)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    text = getattr(config, "text_config", config)
    return {"family": config.model_type, "n_params": sum(p.numel() for p in model.parameters()),
            "layers": int(text.num_hidden_layers), "hidden": int(text.hidden_size),
            "heads": int(text.num_attention_heads), "vocab": int(text.vocab_size)}


def training_memory_gb(shape: dict, dtype: str, micro_batch: int, tokens: int, checkpointing: bool = False) -> float:
    """Peak GPU memory (GB) of a LoRA training step, roughly: weights; activations kept for the
    backward pass (about 17 values per layer, token and hidden unit without checkpointing, one per
    layer plus one layer's worth with it; eager attention, as Gemma uses, adds the attention
    matrices); the logits, their float32 copy and its gradient; CUDA context."""
    b = BYTES[dtype]
    rows = micro_batch * tokens
    weights = shape["n_params"] * b
    per_layer = 17 * shape["hidden"] * rows * b
    if shape["family"].startswith("gemma"):
        per_layer += 2 * micro_batch * shape["heads"] * tokens * tokens * b
    acts = (shape["layers"] * shape["hidden"] * rows * b + per_layer) if checkpointing else shape["layers"] * per_layer
    logits = rows * shape["vocab"] * (b + 8)
    return (weights + acts + logits) / 1e9 + CONTEXT_GB


def shape_of(source: str, model: str | None = None) -> dict:
    """:func:`model_shape` from the model's config; when the config cannot be had (offline, before
    `make models`), the parameter count of ``lib.metadata`` with the other numbers unknown (None),
    so time can be estimated and memory cannot."""
    try:
        return model_shape(source)
    except Exception as exc:  # noqa: BLE001 - no config here: fall back on the known size
        from ... import metadata

        try:
            info = metadata.model_info(model or source)
        except metadata.MetadataError:
            info = None
        if info is None or not info.params_b:
            named = size_in_name(model or source)
            if named:
                return {"family": "unknown", "n_params": named, "layers": None, "hidden": None, "heads": None,
                        "vocab": None}
            raise PreflightError(f"model {model or source!r}: neither its config ({type(exc).__name__}) nor its size "
                                 "is known; run `make models` first") from None
        return {"family": info.family, "n_params": info.params_b * 1e9, "layers": None, "hidden": None,
                "heads": None, "vocab": None}


def size_in_name(model: str) -> float | None:
    """Parameters a hub id states in its name (``SmolLM2-1.7B`` -> 1.7e9, ``pythia-160m`` -> 1.6e8),
    for a preview of models whose config is not at hand (`make models` fetches it); None without one."""
    import re

    found = re.findall(r"(?<![A-Za-z0-9.])(\d+(?:\.\d+)?)([BbMm])(?![A-Za-z])", model.rsplit("/", 1)[-1])
    if not found:
        return None
    number, unit = found[-1]
    return float(number) * (1e9 if unit in "Bb" else 1e6)


def unit_flops(n_params: float, task: dict, recipe=None, max_gen_toks: int = 256, checkpointing: bool = False,
               num_fewshot: int = 0, train_fraction: float = 1.0) -> dict[str, float]:
    """FLOPs of one (model, benchmark) from notebook 01's row of the task (planned sizes, kind,
    characters per example): ``train`` and ``validation`` per learning rate (all epochs) and
    ``test`` (once). A trained token costs 4 N with LoRA (no weight gradients of the base model;
    6 N when the whole model trains, 2 N more with gradient checkpointing), a scored token 2 N;
    a multiple-choice document is scored once per choice (4 assumed), a generated answer costs
    ``max_gen_toks`` more tokens. Validation on the loss scores each document once. ``num_fewshot``
    examples in the prompt lengthen every scored context by that many examples; ``train_fraction``
    trains on that share of the planned training split (the cheaper protocols of issue 42)."""
    max_length = recipe.max_length if recipe is not None else 1024
    tok = min(max_length, task.get("chars_per_example", DEFAULT_CHARS) / CHARS_PER_TOKEN + 2)
    kind = task.get("kind")
    per_doc = (tok * (1 + num_fewshot) * (4 if kind == "multiple_choice" else 1)
               + (max_gen_toks if kind == "generate_until" else 0))
    out = {"train": 0.0, "validation": 0.0, "test": 2 * n_params * per_doc * (task.get("plan_test") or 0)}
    if recipe is not None:
        full = getattr(recipe, "method", "lora") == "full"
        k = (6 if full else 4) + (2 if checkpointing else 0)
        out["train"] = k * n_params * tok * round((task.get("plan_train") or 0) * train_fraction) * recipe.epochs
        per_val = tok if recipe.select_on == "loss" else per_doc
        out["validation"] = 2 * n_params * per_val * (task.get("plan_validation") or 0) * recipe.epochs
    return out


# ---------------------------------------------------------------------------------------------
# the preflight: what each unit costs, and whether it can finish within the time limit


class PreflightError(UserError, RuntimeError):
    """Units that cannot finish within the time limit or fit the GPU (one line each, with what to change)."""
    hint = "`make preflight PROFILE=<profile>` lists each unit's estimate and what to change"


SAFETY = 0.9         # the share of timeout_min a job may plan to use: loading and the estimate's error need the rest
SLICE = "paper_slice"        # the profile whose measured throughput the preflight uses when none is given


def throughput(dtype: str, tflops: float = 0.0, slice_profile: str = SLICE) -> tuple[float, str]:
    """(TFLOP/s, where it comes from) for the preflight: ``tflops`` when given (> 0), else the value a
    run of ``slice_profile`` measured in the same dtype (its notebook 02 summary's
    ``measured_tflops``), else the assumption of :data:`TFLOPS`."""
    if tflops and tflops > 0:
        return float(tflops), "given (throughput_tflops)"
    path = paths.stage_dir(slice_profile, "02_finetune") / "summary.json"
    if path.exists():
        measured = (json.loads(path.read_text()).get("measured_tflops") or {}).get(dtype)
        if measured:
            return float(measured), f"measured by the {slice_profile} run"
    return TFLOPS[dtype], f"assumed for {dtype} (no {slice_profile} run has measured it)"


def measured_tflops(store_root: str | Path, models: list[str], selection: dict) -> dict[str, float]:
    """{dtype: TFLOP/s} that this store's train-before-test results achieved: :func:`unit_flops` of
    their training and validation over the seconds they took (``train_seconds``). Counted with the
    estimate's own assumptions, so a preflight that uses it predicts this run's times exactly."""
    from ...store import TBT
    from ..finetune import Recipe

    try:
        results = store.load(store_root, TBT)
    except store.StoreError:
        return {}
    tasks = selection.get("tasks") or {}
    flops: dict[str, float] = {}
    seconds: dict[str, float] = {}
    for r in results.itertuples():
        prov = r.provenance
        if r.model not in models or not prov.get("train_seconds") or "config" not in prov:
            continue
        cfg = prov["config"]
        recipe = Recipe.default(**{**{k: v for k, v in cfg["recipe"].items() if k in Recipe.__dataclass_fields__},
                           "lrs": cfg["lrs"], "micro_batch_size": 0,
                           "gradient_checkpointing": bool(prov.get("gradient_checkpointing"))})
        task = {**tasks.get(r.benchmark, {}), "plan_train": prov["n_train"], "plan_validation": prov["n_val"]}
        f = unit_flops(shape_of(prov["source"], r.model)["n_params"], task, recipe, prov.get("max_gen_toks", 256),
                       recipe.gradient_checkpointing)
        dtype = prov.get("dtype", "float32")
        flops[dtype] = flops.get(dtype, 0.0) + (f["train"] + f["validation"]) * len(recipe.lrs)
        seconds[dtype] = seconds.get(dtype, 0.0) + prov["train_seconds"]
    return {d: round(flops[d] / seconds[d] / 1e12, 4) for d in flops if seconds[d] > 0}


def _memory(shape: dict, spec, gpu_memory_gb: float) -> tuple[float, int, bool]:
    """(peak GB at the recipe's micro-batch, the micro-batch the out-of-memory back-off ends at,
    whether it needs gradient checkpointing); micro-batch 0: nothing fits. NaN when the shape is
    unknown."""
    recipe = spec.recipe
    if recipe is None or shape.get("layers") is None:
        return math.nan, 0, False
    micro = recipe.micro_batch_size or recipe.batch_size
    ckpt = recipe.gradient_checkpointing

    def gb(m: int, c: bool) -> float:
        extra = shape["n_params"] * (BYTES[spec.dtype] + 8) / 1e9 if getattr(recipe, "method", "lora") == "full" else 0
        return training_memory_gb(shape, spec.dtype, m, recipe.max_length, c) + extra  # full: gradients + AdamW

    peak = gb(micro, ckpt)
    halvings = [micro >> i for i in range(micro.bit_length())]       # as the back-off tries them: 8, 4, 2, 1
    for c in ((ckpt,) if ckpt else (False, True)):
        for m in halvings:
            if gb(m, c) <= gpu_memory_gb:
                return peak, m, c
    return peak, 0, True


@dataclass
class Preflight:
    """What :func:`preflight` found: ``table`` (one row per (model, benchmark)), ``specs`` (the jobs
    to submit, split where a unit needs it), ``refused`` (one line per unit that cannot finish),
    the throughput it assumed and the time limit."""
    table: pd.DataFrame
    specs: list
    refused: list[str]
    tflops: float
    tflops_source: str
    limit_hours: float | None
    resources: dict = field(default_factory=dict)    # what to submit with (the scheduler's limits applied)
    notes: list[str] = field(default_factory=list)   # what the scheduler said, a line each

    @property
    def summary(self) -> dict:
        t = self.table
        return {"preflight_units": len(t), "preflight_gpu_hours": round(float(t["gpu_hours"].sum()), 2),
                "preflight_jobs": len(self.specs), "preflight_split_units": int((t["action"] == SPLIT).sum()),
                "preflight_refused": len(self.refused), "preflight_tflops": self.tflops,
                "preflight_tflops_source": self.tflops_source, "preflight_limit_hours": self.limit_hours}

    def lines(self) -> list[str]:
        """The console report: the grid's total, its longest unit, the split units, the refused ones."""
        t = self.table
        limit = (f"time limit {self.limit_hours:.3g} h a job ({SAFETY:.0%} of timeout_min)" if self.limit_hours
                 else "no time limit (resources has no timeout_min)")
        out = list(self.notes)
        out.append(f"preflight: {len(t)} units, {len(self.specs)} jobs, about {t['gpu_hours'].sum():,.1f} GPU-hours "
                   f"in all at {self.tflops:g} TFLOP/s ({self.tflops_source}); {limit}")
        if len(t):
            worst = t.loc[t["gpu_hours"].idxmax()]
            per_lr = f", {worst['gpu_hours_per_lr']:.3g} a learning rate" if worst["gpu_hours_per_lr"] > 0 else ""
            out.append(f"longest unit: {worst['model']} / {worst['benchmark']}, about {worst['gpu_hours']:.3g} "
                       f"GPU-hours{per_lr}")
        if t["peak_gb"].isna().any():
            out.append(f"memory unknown for {t.loc[t['peak_gb'].isna(), 'model'].nunique()} model(s) without a config "
                       "here (`make models` fetches them)")
        checkpointing = t[t["checkpointing"]]
        if len(checkpointing):
            out.append(f"{len(checkpointing)} units need gradient checkpointing to fit (the out-of-memory back-off "
                       f"switches it on; their time counts it): {_names(checkpointing)}")
        split = t[t["action"] == SPLIT]
        if len(split):
            out.append(f"{len(split)} units over the limit run as one job per learning rate, then one that chooses "
                       f"and tests: {_names(split)}")
        out += self.refused
        return out

    def check(self) -> None:
        """Raise :class:`PreflightError` listing the refused units (before any job is submitted)."""
        if self.refused:
            raise PreflightError(f"{len(self.refused)} unit(s) cannot finish within the time limit or fit the GPU:\n"
                                 + "\n".join(self.refused))


ONE_JOB, SPLIT, REFUSED = "one job", "one job per learning rate", "refused"


def _names(rows: pd.DataFrame) -> str:
    return slurm.first_few([f"{m} / {b}" for m, b in zip(rows["model"], rows["benchmark"])], 4)


def preflight(specs, selection: dict, resources: dict | None = None, tflops: float = 0.0,
              gpu_memory_gb: float = 80.0, executor: str = "") -> Preflight:
    """Before any job is submitted: per (model, benchmark) the GPU-hours (:func:`unit_flops` at the
    throughput of :func:`throughput`) and the peak training memory, and the jobs to submit.

    A job whose estimate fits :data:`SAFETY` of ``resources["timeout_min"]`` runs as it is. One that
    does not is split into one job per benchmark; a train-before-test unit still over the limit runs
    as one job per learning rate (:meth:`JobSpec.by_lr`) and then one that chooses and tests. A unit
    whose single learning rate (or test) is still over the limit, or that does not fit
    ``gpu_memory_gb`` even at micro-batch 1 with gradient checkpointing, is refused with one line
    saying what to change (:meth:`Preflight.check` raises with them). With ``executor="slurm"`` the
    scheduler is asked for the partition's time limit first
    (:func:`lib.pipeline.launch.slurm.scheduler_resources`)."""
    resources = resources or {}
    notes: list[str] = []
    if executor == "slurm":
        resources, notes = slurm.scheduler_resources(resources)
    limit = resources.get("timeout_min") / 60 * SAFETY if resources.get("timeout_min") else None
    dtype = specs[0].dtype if specs else "float32"
    rate, source = throughput(dtype, tflops)
    hours = 1 / (rate * 1e12) / 3600
    tasks = selection.get("tasks") or {}
    rows, jobs, refused = [], [], []
    for spec in specs:
        shape = shape_of(spec.source, spec.model)
        recipe = spec.recipe
        n_lrs = len(recipe.lrs) if recipe is not None else 0
        peak, micro, ckpt = _memory(shape, spec, gpu_memory_gb)
        units = []
        for bench in spec.benchmarks:
            f = unit_flops(shape["n_params"], tasks.get(bench, {}), recipe, spec.max_gen_toks,
                           ckpt or (recipe is not None and recipe.gradient_checkpointing), spec.num_fewshot,
                           spec.train_fraction)
            per_lr = (f["train"] + f["validation"]) * hours
            units.append({"protocol": spec.protocol, "model": spec.model, "benchmark": bench, "family": shape["family"],
                          "params_b": shape["n_params"] / 1e9, "dtype": spec.dtype,
                          "train_examples": (tasks.get(bench, {}).get("plan_train") or 0) if recipe else 0,
                          "gpu_hours": per_lr * n_lrs + f["test"] * hours, "gpu_hours_per_lr": per_lr,
                          "test_gpu_hours": f["test"] * hours, "peak_gb": peak, "micro_batch": micro,
                          "checkpointing": bool(ckpt and recipe is not None and not recipe.gradient_checkpointing)})
        whole = limit is None or sum(u["gpu_hours"] for u in units) <= limit
        for u in units:
            one = spec if whole else spec.only(u["benchmark"])
            why = _refusal(u, recipe, limit, gpu_memory_gb, micro)
            if why:
                u["action"] = REFUSED
                refused.append(f"refused: {u['model']} / {u['benchmark']}: {why}")
            elif whole or u["gpu_hours"] <= limit:
                u["action"] = ONE_JOB
                if one not in jobs:
                    jobs.append(one)
            else:
                u["action"] = SPLIT
                jobs += one.by_lr() + [one]
            rows.append(u)
    return Preflight(table=pd.DataFrame(rows, columns=PREFLIGHT_COLUMNS), specs=jobs, refused=refused, tflops=rate,
                     tflops_source=source, limit_hours=limit, resources=resources, notes=notes)


PREFLIGHT_COLUMNS = ["protocol", "model", "benchmark", "family", "params_b", "dtype", "train_examples", "gpu_hours",
                     "gpu_hours_per_lr", "test_gpu_hours", "peak_gb", "micro_batch", "checkpointing", "action"]


def _refusal(unit: dict, recipe, limit: float | None, gpu_memory_gb: float, micro: int) -> str | None:
    """Why a unit cannot run (one clause with what to change), or None."""
    if recipe is not None and not math.isnan(unit["peak_gb"]) and micro == 0:
        return (f"does not fit {gpu_memory_gb:g} GB even at micro-batch 1 with gradient checkpointing "
                f"(about {unit['peak_gb']:.0f} GB at the recipe's batch): use dtype bfloat16 or a larger GPU")
    if limit is None:
        return None
    longest = max(unit["gpu_hours_per_lr"], unit["test_gpu_hours"]) if recipe is not None else unit["gpu_hours"]
    if longest > limit:
        what = "one learning rate" if recipe is not None and unit["gpu_hours_per_lr"] >= unit["test_gpu_hours"] \
            else "its test"
        return (f"{what} needs about {longest:.3g} GPU-hours > {limit:.3g} h: raise timeout_min, lower cap_train, "
                "use dtype bfloat16, or give throughput_tflops a measured value")
    return None
