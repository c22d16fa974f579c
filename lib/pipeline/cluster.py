"""What a run on a GPU cluster needs besides the job grid: model sizes and a memory / time estimate
per family (printed before submission), access to the hub's models and datasets checked and
fetched before any GPU job starts (``make models``), and the comparison of a first run with the
published scores (``paper_slice``).

``python -m lib.pipeline.cluster models PROFILE``   download and check every model and dataset
``python -m lib.pipeline.cluster compare PROFILE``  our direct-evaluation scores vs all_results.json

The estimates are rough by design (stated assumptions, no measurement on the cluster): they say
which families need micro-batches or gradient checkpointing on the GPUs at hand, and about how
many GPU-hours a stage takes.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import sys
from pathlib import Path

import pandas as pd

from .. import paths, store
from ..util import did_you_mean
from . import hub

BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
# sustained TFLOP/s assumed for the time estimate: an A100/H100-class GPU at about 40 % of peak
# (float32 matmuls without TF32, PyTorch's default; half precision on tensor cores)
TFLOPS = {"float32": 15.0, "bfloat16": 120.0, "float16": 120.0}
CHARS_PER_TOKEN = 4.0          # English text with a 30k-250k BPE vocabulary: 3.5-4.5 characters a token
CONTEXT_GB = 1.5               # CUDA context, allocator slack and the LoRA optimiser state
GATED_HELP = ("request access on each model's hub page with the account whose token this machine uses "
              "(HF_TOKEN, or `hf auth login`), then run `make models PROFILE={profile}` again")


class HubError(RuntimeError):
    """Models or datasets cannot be fetched (the message names them and what to do)."""


# ---------------------------------------------------------------------------------------------
# model sizes and estimates


@functools.lru_cache(maxsize=256)
def model_shape(source: str) -> dict:
    """Architecture numbers of a model from its config alone (no weights are loaded): family,
    parameters, layers, width, heads, vocabulary."""
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


def estimate(specs, selection: dict, gpu_memory_gb: float = 80.0, tflops: float | None = None) -> pd.DataFrame:
    """One row per job: model, family, parameters (billions), weights (GB), peak training memory
    in the worst case (every row ``max_length`` tokens) at the recipe's micro-batch, the largest
    micro-batch that fits ``gpu_memory_gb``, and the GPU-hours of the job at ``tflops`` (default:
    :data:`TFLOPS` for the dtype). FLOPs: 4 N per trained token (LoRA: no weight gradients of the
    base model), 2 N per scored token; tokens from notebook 01's characters per example."""
    rows = []
    tasks = selection.get("tasks") or {}
    for spec in specs:
        shape = model_shape(spec.source)
        recipe = spec.recipe                      # None for direct evaluation
        n = shape["n_params"]
        flops = 0.0
        for bench in spec.benchmarks:
            t = tasks.get(bench, {})
            max_length = recipe.max_length if recipe is not None else 1024
            tok = min(max_length, t.get("chars_per_example", 400) / CHARS_PER_TOKEN + 2)
            n_test = t.get("plan_test") or 0
            choices = 4 if t.get("kind") == "multiple_choice" else 1
            flops += 2 * n * tok * n_test * choices
            if recipe is not None:
                n_lrs, epochs = len(recipe.lrs), recipe.epochs
                flops += (6 if recipe.gradient_checkpointing else 4) * n * tok * (t.get("plan_train") or 0) \
                    * epochs * n_lrs
                per_val = 1 if recipe.select_on == "loss" else choices
                flops += 2 * n * tok * (t.get("plan_validation") or 0) * per_val * epochs * n_lrs
        row = {"model": spec.model, "family": shape["family"], "params_b": n / 1e9,
               "weights_gb": n * BYTES[spec.dtype] / 1e9, "benchmarks": len(spec.benchmarks),
               "gpu_hours": flops / ((tflops or TFLOPS[spec.dtype]) * 1e12) / 3600}
        if recipe is not None:
            micro = recipe.micro_batch_size or recipe.batch_size
            ckpt = recipe.gradient_checkpointing
            row["peak_gb"] = training_memory_gb(shape, spec.dtype, micro, recipe.max_length, ckpt)
            fits = [m for m in range(recipe.batch_size, 0, -1)
                    if training_memory_gb(shape, spec.dtype, m, recipe.max_length, ckpt) <= gpu_memory_gb]
            row["micro_batch_that_fits"] = fits[0] if fits else 0
        rows.append(row)
    return pd.DataFrame(rows)


def family_lines(table: pd.DataFrame, gpu_memory_gb: float = 80.0) -> list[str]:
    """One console line per family of :func:`estimate`'s table."""
    lines = []
    for fam, g in table.groupby("family", sort=True):
        text = (f"{fam}: {g['model'].nunique()} model(s), {g['params_b'].min():.3g}-{g['params_b'].max():.3g}B "
                f"parameters, weights up to {g['weights_gb'].max():.3g} GB, about {g['gpu_hours'].sum():.3g} "
                "GPU-hours")
        if "peak_gb" in g:
            worst = g.loc[g["peak_gb"].idxmax()]
            text += f"; training peak up to {worst['peak_gb']:.3g} GB ({worst['model']}, worst case)"
            if worst["peak_gb"] > gpu_memory_gb:
                fit = int(g["micro_batch_that_fits"].min())
                text += (f" > {gpu_memory_gb:g} GB: micro_batch_size {fit} fits" if fit else
                         f" > {gpu_memory_gb:g} GB even at micro-batch 1: set gradient_checkpointing")
        lines.append(text)
    return lines


# ---------------------------------------------------------------------------------------------
# the hub: access, downloads


def profile_needs(profile: str) -> tuple[list[str], list[str]]:
    """(models, tasks) a profile's stages 01-03 name."""
    from .. import params

    prof = params.load_profile(profile)
    models: list[str] = []
    for stage in ("02_finetune", "03_direct_eval"):
        if stage in prof.stages:
            models += [m for m in prof.params(stage)["models"] if m not in models]
    s1 = prof.params("01_select_benchmarks") if "01_select_benchmarks" in prof.stages else {}
    return models, list(s1.get("tasks", [])) + list(s1.get("corpora", []))


def _weight_patterns(files: list[str]) -> list[str]:
    """What a model needs: configs, tokenizer files, and its weights (safetensors when present)."""
    weights = ["*.safetensors"] if any(f.endswith(".safetensors") for f in files) else ["*.bin"]
    return ["*.json", "*.model", "*.txt", "*.tiktoken", "tokenizer*"] + weights


def check_models(models: list[str], download: bool = True) -> dict[str, list[str]]:
    """Try every hub model (a local folder is checked for its config); returns problems by kind:
    ``gated`` (no access), ``missing`` (no such repository), ``failed`` (other errors, with the
    reason) and ``ok``. With ``download`` the configs, tokenizer and weights are fetched into the
    hub cache (``HF_HOME``)."""
    from huggingface_hub import HfApi, hf_hub_download, snapshot_download
    from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError

    out: dict[str, list[str]] = {"ok": [], "gated": [], "missing": [], "failed": []}
    api = HfApi()
    for m in models:
        if Path(m).expanduser().is_dir():
            (out["ok"] if (Path(m).expanduser() / "config.json").exists() else out["failed"]).append(m)
            continue
        try:
            hf_hub_download(m, "config.json")                  # raises for gated / unknown repositories
            if download:
                files = [s.rfilename for s in api.model_info(m).siblings or []]
                snapshot_download(m, allow_patterns=_weight_patterns(files))
            out["ok"].append(m)
        except GatedRepoError:
            out["gated"].append(m)
        except RepositoryNotFoundError:
            out["missing"].append(m)
        except Exception as exc:  # noqa: BLE001 - network, disk, permissions: reported per model
            out["failed"].append(f"{m} ({type(exc).__name__}: {str(exc).strip().splitlines()[0][:200]})")
    return out


def models_error(problems: dict[str, list[str]], profile: str) -> str | None:
    """One line per kind of problem, or None when every model is there."""
    lines = []
    if problems.get("gated"):
        lines.append(f"gated models need access ({len(problems['gated'])}): {', '.join(problems['gated'])}; "
                     + GATED_HELP.format(profile=profile))
    if problems.get("missing"):
        lines.append(f"models not found on the hub: {', '.join(problems['missing'])} (check the ids in "
                     f"params/{profile}.yaml)")
    if problems.get("failed"):
        lines.append(f"models that could not be fetched: {'; '.join(problems['failed'])}")
    return "\n".join(lines) or None


def hub_cache() -> Path:
    """Where the hub puts model weights (``HF_HUB_CACHE``, else ``HF_HOME/hub``)."""
    from huggingface_hub import constants

    return Path(constants.HF_HUB_CACHE).expanduser().resolve()


def fetch(profile: str, download: bool = True, timeout: float = 600.0, allow_repo_cache: bool = False) -> None:
    """``make models PROFILE=...``: fetch and check every model and dataset the profile needs,
    before any GPU job starts; raises :class:`HubError` naming what is missing. Weights are not
    downloaded into the repository's own cache (the paper's 61 models take about 0.7 TB) unless
    ``allow_repo_cache``."""
    from .. import params
    from . import tasks as tk

    models, task_names = profile_needs(profile)
    cache = hub_cache()
    hub_models = [m for m in models if not Path(m).expanduser().is_dir()]
    if download and not allow_repo_cache and cache.is_relative_to(paths.ROOT) and hub_models:
        raise HubError(f"the hub cache {cache} lies inside the repository: set HF_HOME (or HF_HUB_CACHE) to "
                       "your shared model cache first, e.g. `export HF_HOME=$HOME/.cache/huggingface`, or pass "
                       "--allow-repo-cache")
    command = f"make models PROFILE={profile}"
    if hub_models and hub.offline():               # the cache is all there is: say at once what it lacks
        missing = [m for m in hub_models if not hub.cached(m)]
        if missing:
            raise HubError(f"HF_HUB_OFFLINE is set and the hub cache {cache} lacks {len(missing)} of {len(hub_models)} "
                           f"models ({', '.join(missing[:3])}{', ...' if len(missing) > 3 else ''}): "
                           f"{hub.fix(command)}")
    elif hub_models or task_names:                 # one quick request instead of five retries per file
        try:
            hub.require(f"profile {profile!r}", command)
        except hub.HubUnreachable as exc:
            raise HubError(str(exc)) from None
    print(f"[{profile}] {len(models)} models and {len(task_names)} tasks; hub cache: {cache}", flush=True)
    problems = check_models(models, download=download)
    print(f"[{profile}] models: {len(problems['ok'])} of {len(models)} ready", flush=True)
    s1 = params.load_profile(profile).params("01_select_benchmarks")
    include = tk.resolve_include_paths(s1["include_paths"], paths.work_dir(profile))
    rows = tk.select(task_names, include, s1["include_defaults"], min_train=0, timeout=timeout) if task_names else []
    unreachable = [f"{r['task']} ({r['note']})" for r in rows if r.get("count_source") != "dataset"]
    print(f"[{profile}] datasets: {len(rows) - len(unreachable)} of {len(rows)} loaded", flush=True)
    error = models_error(problems, profile)
    if unreachable:
        error = (error + "\n" if error else "") + f"datasets that cannot be loaded: {'; '.join(unreachable)}"
    if error:
        raise HubError(error)


# ---------------------------------------------------------------------------------------------
# a first run against the published scores


def published_scores(models: list[str], benchmarks: list[str], protocol: str = store.DIRECT) -> pd.DataFrame:
    """The published score and standard error of each (model, benchmark) under ``protocol``,
    from lm-harmony's all_results.json (``HARMONY_DATA`` or ``make data``)."""
    data = json.loads((paths.data_dir("lm-harmony/all_results.json") / "lm-harmony" / "all_results.json").read_text())
    rows = []
    for b in benchmarks:
        if b not in data[protocol]:
            raise KeyError(f"benchmark {b!r} is not in all_results.json{did_you_mean(b, data[protocol])}")
        for m in models:
            if m not in data[protocol][b]:
                raise KeyError(f"model {m!r} has no published {protocol} score on {b!r}")
            rows.append({"model": m, "benchmark": b, "published": data[protocol][b][m],
                         "published_stderr": data[f"{protocol}_stderr"][b][m]})
    return pd.DataFrame(rows)


def compare(store_root: str | Path, models: list[str], benchmarks: list[str], protocol: str = store.DIRECT,
            ) -> pd.DataFrame:
    """Our scores next to the published ones: ``diff`` (ours - published) and ``z`` (diff over the
    published standard error); ``within`` is |z| <= 2."""
    table = published_scores(models, benchmarks, protocol)
    ours = store.load(store_root, protocol)
    ours = {(r.model, r.benchmark): r.score for r in ours.itertuples()}
    table["ours"] = [ours.get((m, b), math.nan) for m, b in zip(table["model"], table["benchmark"])]
    table["diff"] = table["ours"] - table["published"]
    table["z"] = table["diff"] / table["published_stderr"]
    table["within"] = table["z"].abs() <= 2
    return table


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m lib.pipeline.cluster", description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("models", help="download and check every model and dataset of a profile")
    m.add_argument("profile")
    m.add_argument("--check-only", action="store_true", help="check access without downloading weights")
    m.add_argument("--allow-repo-cache", action="store_true", help="download into the repository's .cache/hf")
    c = sub.add_parser("compare", help="our direct-evaluation scores next to the published ones")
    c.add_argument("profile")
    args = ap.parse_args(argv)
    if args.cmd == "models":
        try:
            fetch(args.profile, download=not args.check_only, allow_repo_cache=args.allow_repo_cache)
        except HubError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        print(f"[{args.profile}] every model and dataset is ready", flush=True)
        return 0
    models, tasks = profile_needs(args.profile)
    table = compare(paths.store_dir(args.profile), models, tasks)
    print(table.to_string(index=False))
    return 0 if table["within"].all() else 1


if __name__ == "__main__":
    sys.exit(main())
