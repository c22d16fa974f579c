"""The prepared check for the first GPU: `python3 bench/gpu_check.py --device cuda` (at most 8 minutes on
one GPU).

It runs stages 02 and 03 of the smoke world (its four tiny models, three tasks and one corpus) in
the paper's dtype (float32): direct evaluation (03), the smoke profile's recipe (LoRA on every
linear layer) and every parameter trained (``method: full``), one learning rate after another. Each
is compared with the CPU run of the same units under the placement calibration's rule
(:func:`lib.placement.calibration_check`, the tolerance it states): a direct-evaluation score within
2 of the CPU's standard errors (same documents, same weights: only arithmetic differs), a
train-before-test score within sqrt(2) z(1 - 0.05 / 2m) standard errors (another device's
fine-tuning is another draw of the fine-tuned model; m checks at once, Bonferroni). It prints the
largest score and validation-loss differences, training tokens per second and peak memory of each,
and writes ``outputs/gpu_check/runs/<device>/report.json`` (and into ``$OUT`` when that is set).

Everything the run needs travels in ``outputs/gpu_check/bundle`` (about 25 MB): the smoke world's
models, task files and notebook 01 selection, the CPU reference results, and wheels of the project's
pinned dependencies that the check imports, installed (pip, no index) into ``outputs/gpu_check/site``
where the machine lacks them or has another version; a compiled dependency missing there is named
in one line. The CPU side makes it (the dry run):

    make all PROFILE=smoke && .venv/bin/python bench/gpu_check.py --device cpu --wheels

which builds the bundle, runs the three configurations on the CPU, checks that the LoRA run
reproduces the smoke profile's own results exactly, and writes the reference. docs/cluster.md ("The
first GPU") says how to carry it to a GPU and run it.
"""

from __future__ import annotations

import argparse
import importlib.metadata as md
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
CHECK = ROOT / "outputs" / "gpu_check"
BUNDLE, SITE, RUNS = CHECK / "bundle", CHECK / "site", CHECK / "runs"
PROFILE = "smoke"
LIMIT_S = 8 * 60
CONFIGS = {"lora": {},                                                      # the smoke profile's recipe
           "full": {"method": "full"}}                                      # every parameter, one rate at a time
DIRECT = "direct"                                    # stage 03, the same for every configuration
# what stages 02 and 03 import (the rest follows from these): lib's layers below the analyses, and lm-eval's
# model, evaluator and metrics modules, which it loads only when a task is scored
ENTRY_MODULES = ("lib.pipeline.launch.jobs", "lib.pipeline.protocols", "lib.placement", "lm_eval.evaluator",
                 "lm_eval.models.huggingface", "lm_eval.api.metrics", "lm_eval.filters", "peft")
TARGET_PYTHON = "3.12"                               # the GPU image's python3 (/work/.library/device/KINDS.md)


def say(line: str) -> None:
    print(line, flush=True)


def fail(line: str) -> None:
    print(f"error: {line}", file=sys.stderr, flush=True)
    sys.exit(2)


# ---------------------------------------------------------------------------------------------
# dependencies: what the check imports, as wheels, installed where missing


def imported_distributions() -> dict[str, str]:
    """{distribution: version} of every installed distribution whose modules are loaded now."""
    owners = md.packages_distributions()
    found: dict[str, str] = {}
    for name in list(sys.modules):
        top = name.partition(".")[0]
        for dist in owners.get(top, []):
            if dist not in found:
                try:
                    found[dist] = md.version(dist)
                except md.PackageNotFoundError:
                    pass
    return dict(sorted(found.items(), key=lambda kv: kv[0].lower()))


def pure_python(dist: str) -> bool:
    """Whether the installed distribution ships no compiled code (its wheel is py3-none-any)."""
    files = md.distribution(dist).files or []
    return not any(str(f).endswith((".so", ".pyd", ".dylib")) for f in files)


def with_torch() -> set[str]:
    """torch and what it requires: a GPU image brings its own build of these."""
    import re

    names = {"torch"}
    for req in md.requires("torch") or []:
        if "extra ==" not in req:
            names.add(re.split(r"[ ;<>=!~\[]", req, maxsplit=1)[0])
    return {n.lower().replace("_", "-") for n in names}


def download_wheels(dists: dict[str, str], into: Path, compiled: tuple[str, ...] = ()) -> dict[str, dict]:
    """Wheels of ``dists`` (the versions installed here, which are requirements.lock's) into ``into``: every
    pure-Python one, and the compiled ones named in ``compiled`` built for the GPU image's Python
    (:data:`TARGET_PYTHON`, manylinux x86-64); the others the GPU machine is expected to have (its image
    holds numpy, pandas, scipy, pyarrow, tokenizers, safetensors, ...), and torch with what it requires
    comes with it. Returns {distribution: {version, pure, wheel or error}}."""
    into.mkdir(parents=True, exist_ok=True)
    skip = with_torch() | {"train-before-test"}
    out = {}
    for dist, version in dists.items():
        pure = pure_python(dist)
        if dist.lower().replace("_", "-") in skip or dist.startswith("nvidia-") or (not pure and dist not in compiled):
            continue
        cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:", "-d", str(into),
               "--python-version", TARGET_PYTHON, f"{dist}=={version}"]       # (multiprocess has one per Python)
        if not pure:
            cmd += ["--implementation", "cp"]
            cmd += [a for tag in ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64")
                    for a in ("--platform", tag)]
        done = subprocess.run(cmd, capture_output=True, text=True)
        out[dist] = {"version": version, "pure": pure}
        if done.returncode:
            out[dist]["error"] = (done.stderr.strip().splitlines() or ["pip failed"])[-1][:200]
    return out


def installed_version(dist: str) -> str | None:
    try:
        return md.version(dist)
    except md.PackageNotFoundError:
        return None


def install_missing(manifest: dict[str, dict], have=installed_version) -> list[str]:
    """Install into :data:`SITE` the bundled wheels of distributions this machine lacks or has in another
    version (a compiled one only where it lacks it: the machine's own build wins; ``have`` gives the
    version installed, None for none), put SITE first on the path and import what stages 02 and 03
    import (:data:`ENTRY_MODULES`); stops with one line naming a module that still cannot be imported.
    Returns the wheels installed."""
    import importlib

    wheels = BUNDLE / "wheels"
    want = []
    for dist, rec in manifest.items():
        here = have(dist)
        if "error" in rec or here == rec["version"] or (here is not None and not rec["pure"]):
            continue
        stem = f"{dist.lower().replace('-', '_')}-{rec['version']}-"
        found = sorted(p for p in wheels.glob("*.whl") if p.name.lower().startswith(stem))
        if found:
            want.append(found[0])
    if want:
        SITE.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-index", "--no-deps", "--no-compile",
                        "--upgrade", "--target", str(SITE), *map(str, want)], check=True)
    if SITE.is_dir():
        sys.path.insert(0, str(SITE))
    for module in ENTRY_MODULES:
        try:
            importlib.import_module(module)
        except ImportError as exc:
            fail(f"{module} cannot be imported here ({exc}); bundle its missing dependency on the CPU side: "
                 f"`python bench/gpu_check.py --device cpu --wheels --compiled <distribution>`")
    return [p.name for p in want]


# ---------------------------------------------------------------------------------------------
# the bundle: the smoke world's models, tasks and selection


def build_bundle() -> dict:
    """Copy what the check needs from ``outputs/smoke`` into :data:`BUNDLE` (models, task folders, 01's
    selection, the store's metadata, the resolved parameters of 02 and 03); returns its manifest. Run in
    a process of its own (``--bundle``): reading the parameters imports papermill and Jupyter's client,
    which the check itself needs not (so they are not bundled as its wheels)."""
    from lib import outputs, params, paths, store

    if not (paths.stage_dir(PROFILE, "03_direct_eval") / "summary.json").exists():
        fail("the smoke profile has not run here: `make all PROFILE=smoke` first")
    selection = outputs.read_selection(PROFILE)
    meta = store.read_meta(paths.store_dir(PROFILE), "models")
    shutil.rmtree(BUNDLE / "models", ignore_errors=True)
    shutil.rmtree(BUNDLE / "tasks", ignore_errors=True)
    models = {}
    for name, rec in meta.items():
        src = paths.located(rec["path"])
        shutil.copytree(src, BUNDLE / "models" / name)
        models[name] = {**rec, "path": paths.portable(BUNDLE / "models" / name)}
    for folder in selection["include_paths"]:
        for task in selection["selected"]:
            src = paths.located(folder) / task
            if src.is_dir():
                shutil.copytree(src, BUNDLE / "tasks" / task)
    prof = params.load_profile(PROFILE)
    manifest = {"models": models, "benchmarks": store.read_meta(paths.store_dir(PROFILE), "benchmarks"),
                "selection": selection, "params": {s: prof.params(s) for s in ("02_finetune", "03_direct_eval")}}
    (BUNDLE / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    return manifest


def place_tasks() -> Path:
    """The bundle's task YAML pointed at the bundle's files where it lies now (lm-eval needs absolute
    paths); returns the task folder."""
    import yaml

    root = BUNDLE / "tasks"
    for path in root.glob("*/*.yaml"):
        cfg = yaml.safe_load(path.read_text())
        files = (cfg.get("dataset_kwargs") or {}).get("data_files")
        if files:
            cfg["dataset_kwargs"]["data_files"] = {k: str(path.parent / Path(v).name) for k, v in files.items()}
            path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return root


# ---------------------------------------------------------------------------------------------
# one run


def run_units(config: str, device: str, manifest: dict, tasks_dir: Path) -> dict:
    """Stage 02 of ``config`` (or 03, ``config`` :data:`DIRECT`) on ``device`` in a fresh store; returns its
    results (protocol, model, benchmark, score, stderr, n, val curves, train seconds), wall seconds,
    training tokens and peak memory."""
    import torch

    from lib import store
    from lib.pipeline import finetune as ft
    from lib.pipeline.launch import jobs

    p = manifest["params"]["03_direct_eval" if config == DIRECT else "02_finetune"]
    root = RUNS / device / config
    shutil.rmtree(root, ignore_errors=True)
    store.write_meta(root / "store", "models", manifest["models"])
    store.write_meta(root / "store", "benchmarks", manifest["benchmarks"])
    selection = {**manifest["selection"], "include_paths": [str(tasks_dir)]}
    recipe = None if config == DIRECT else ft.Recipe.from_params({**p, **CONFIGS[config]})
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    t0 = time.time()
    specs = jobs.plan(store.DIRECT if recipe is None else store.TBT, list(manifest["models"]), selection,
                      store_root=root / "store", work_root=root / "work", recipe=recipe,
                      chat_template=p["chat_template"], eval_batch_size=p["eval_batch_size"],
                      bootstrap_iters=p["bootstrap_iters"], dtype=p["dtype"], add_bos_token=p["add_bos_token"],
                      max_gen_toks=p["max_gen_toks"])
    jobs.launch(specs, executor="local", log_folder=root / "work" / "submitit", progress_every=60.0)
    seconds = time.time() - t0
    frame = store.load(root / "store")
    rows = [{"protocol": r.protocol, "model": r.model, "benchmark": r.benchmark, "score": r.score, "stderr": r.stderr,
             "n": r.n, "curves": r.provenance.get("val_curves"), "train_seconds": r.provenance.get("train_seconds"),
             "dtype": r.provenance.get("dtype"), "documents": (r.provenance.get("dataset") or {}).get("documents")}
            for r in frame.itertuples()]
    peak = (torch.cuda.max_memory_allocated() / 2 ** 30 if device == "cuda" else _peak_rss_gib())
    out = {"results": rows, "seconds": seconds, "peak_gib": peak,
           "peak_is": "torch.cuda.max_memory_allocated" if device == "cuda" else "the process's peak RSS so far"}
    if recipe is not None:
        out["train_tokens"] = _training_tokens(specs[0], recipe, tasks_dir, manifest)
        train_s = sum(r["train_seconds"] or 0 for r in rows)
        out["tokens_per_s"] = out["train_tokens"] / train_s if train_s else None
    return out


def _peak_rss_gib() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2 ** 20     # kB on Linux


def _training_tokens(spec, recipe, tasks_dir: Path, manifest: dict) -> int:
    """Tokens the units of a configuration train on: each (model, benchmark)'s training examples as 02
    renders them, times the epochs and the learning rates (every epoch runs: patience 0)."""
    from lib import paths
    from lib.pipeline import evaluate as ev
    from lib.pipeline import finetune as ft
    from lib.pipeline import tasks as tk

    manager = tk.task_manager([tasks_dir])
    rule = tk.SplitRule.from_dict(spec.splits)
    total = 0
    for rec in manifest["models"].values():
        model, tok = ev.load_model(str(paths.located(rec["path"])), device="cpu")
        lm = ev.make_lm(model, tok, 1)
        for bench in manifest["selection"]["selected"]:
            task, info = tk.inspect(manager, bench)
            plan = tk.plan_splits(task, info, rule)
            tk.install_splits(task, plan)
            total += sum(len(ids) for ids, _ in ft.training_examples(task, info, lm, recipe, role="train"))
    return total * recipe.epochs * len(recipe.lrs)


# ---------------------------------------------------------------------------------------------
# comparisons


def _frame(rows: list[dict]):
    import pandas as pd

    from lib import store

    df = pd.DataFrame(rows)
    df["metric"], df["higher_is_better"], df["provenance"] = "score", True, [{} for _ in range(len(df))]
    return df[store.COLUMNS]


def compare(ours: list[dict], reference: list[dict], models: list[str], benchmarks: list[str]) -> dict:
    """The calibration rule of ``ours`` against ``reference`` (results of the same units), the largest
    score difference, and the largest relative difference of the validation curves."""
    from lib import placement

    check = placement.calibration_check(_frame(ours), _frame(reference), models, benchmarks)
    ref = {(r["protocol"], r["model"], r["benchmark"]): r for r in reference}
    score_diff, curve_diff, docs_differ = 0.0, 0.0, []
    for r in ours:
        key = (r["protocol"], r["model"], r["benchmark"])
        other = ref.get(key)
        if other is None:
            continue
        score_diff = max(score_diff, abs(r["score"] - other["score"]))
        for lr, curve in (r["curves"] or {}).items():
            for a, b in zip(curve, (other["curves"] or {}).get(lr, [])):
                curve_diff = max(curve_diff, abs(a - b) / max(abs(b), 1e-12))
        if r.get("documents") and other.get("documents") and r["documents"] != other["documents"]:
            docs_differ.append("/".join(key[1:]))
    return {"comparable": bool(check["comparable"]), "lines": check["lines"], "bounds": check["bounds"],
            "n_checks": check["n_checks"], "max_score_diff": score_diff, "max_val_loss_rel_diff": curve_diff,
            "identical": score_diff == 0.0 and curve_diff == 0.0, "documents_differ": docs_differ}


def smoke_results() -> list[dict]:
    """The smoke profile's own results (its 02 and 03), in :func:`run_units`' form."""
    from lib import paths, store

    frame = store.load(paths.store_dir(PROFILE))
    return [{"protocol": r.protocol, "model": r.model, "benchmark": r.benchmark, "score": r.score,
             "stderr": r.stderr, "n": r.n, "curves": r.provenance.get("val_curves")} for r in frame.itertuples()]


# ---------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", choices=("cpu", "cuda"), required=True)
    ap.add_argument("--wheels", action="store_true", help="(cpu) bundle wheels of the pure-Python dependencies the "
                                                          "check imports (needs the package registry)")
    ap.add_argument("--compiled", nargs="*", default=[], help="(cpu, with --wheels) compiled distributions to "
                                                              f"bundle too, built for Python {TARGET_PYTHON}")
    ap.add_argument("--bundle", action="store_true", help=argparse.SUPPRESS)     # the CPU side's first process
    args = ap.parse_args(argv)
    if args.bundle:
        build_bundle()
        return 0
    t_start = time.time()
    if args.device == "cpu":
        os.environ["CUDA_VISIBLE_DEVICES"] = ""             # the CPU even where a GPU is
    from lib.pipeline.device import pin_arithmetic

    pin_arithmetic()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    os.environ.setdefault("HF_HOME", str(CHECK / "hf"))
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("MPLCONFIGDIR", str(CHECK / "matplotlib"))
    reference_path = BUNDLE / "cpu_reference.json"
    if args.device == "cuda":
        if not (BUNDLE / "manifest.json").exists() or not reference_path.exists():
            fail(f"no bundle at {BUNDLE}: make it on the CPU side (`python bench/gpu_check.py --device cpu --wheels`) "
                 "and carry outputs/gpu_check/bundle")
        wheel_manifest = json.loads((BUNDLE / "wheels.json").read_text()) if (BUNDLE / "wheels.json").exists() else {}
        installed = install_missing(wheel_manifest)
        say(f"[gpu_check] installed from the bundle: {', '.join(installed) if installed else 'nothing (all present)'}")
    else:
        subprocess.run([sys.executable, __file__, "--device", "cpu", "--bundle"], check=True)
    manifest = json.loads((BUNDLE / "manifest.json").read_text())
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        fail("torch sees no CUDA device here")
    from lib.pipeline.device import setup_torch

    setup_torch()                                       # the pipeline's thread count, as the jobs set it
    where = torch.cuda.get_device_name(0) if args.device == "cuda" else f"CPU ({torch.get_num_threads()} thread)"
    say(f"[gpu_check] {args.device}: {where}; torch {torch.__version__}; {len(manifest['models'])} models, "
        f"{len(manifest['selection']['selected'])} tasks; configurations: {DIRECT} (03), {', '.join(CONFIGS)} (02)")
    tasks_dir = place_tasks()
    runs = {}
    for config in (DIRECT, *CONFIGS):
        runs[config] = run_units(config, args.device, manifest, tasks_dir)
        r = runs[config]
        rate = f", {r['tokens_per_s']:,.0f} training tokens/s" if r.get("tokens_per_s") else ""
        say(f"[gpu_check] {config}: {len(r['results'])} results in {r['seconds']:.0f}s{rate}, peak memory "
            f"{r['peak_gib']:.2f} GiB ({r['peak_is']})")
    models, benchmarks = list(manifest["models"]), list(manifest["selection"]["selected"])
    report = {"device": args.device, "where": where, "torch": torch.__version__, "dtype": "float32",
              "runs": {k: {kk: vv for kk, vv in v.items() if kk != "results"} for k, v in runs.items()},
              "comparisons": {}}
    comparisons = report["comparisons"]
    if args.device == "cpu":
        mine = runs[DIRECT]["results"] + runs["lora"]["results"]
        comparisons["lora + direct vs the smoke profile's own results"] = compare(mine, smoke_results(), models,
                                                                                   benchmarks)
        reference = {k: v["results"] for k, v in runs.items()}
        reference_path.write_text(json.dumps({"torch": torch.__version__, "where": where, "runs": reference}) + "\n")
        if args.wheels:
            shutil.rmtree(BUNDLE / "wheels", ignore_errors=True)
            wheels = download_wheels(imported_distributions(), BUNDLE / "wheels", tuple(args.compiled))
            (BUNDLE / "wheels.json").write_text(json.dumps(wheels, indent=1) + "\n")
            failed = {d: w["error"] for d, w in wheels.items() if "error" in w}
            size = sum(p.stat().st_size for p in (BUNDLE / "wheels").glob("*.whl")) / 2 ** 20
            say(f"[gpu_check] bundled {len(wheels) - len(failed)} wheels ({size:.1f} MiB)"
                + (f"; none found for {failed}" if failed else ""))
    else:
        reference = json.loads(reference_path.read_text())["runs"]
        for config in runs:
            comparisons[f"{config}, cuda vs cpu"] = compare(runs[config]["results"], reference[config], models,
                                                            benchmarks)
    report["seconds"] = time.time() - t_start
    report["within_limit"] = report["seconds"] <= LIMIT_S
    for name, c in comparisons.items():
        verdict = "identical" if c["identical"] else ("within tolerance" if c["comparable"] else "OUTSIDE tolerance")
        say(f"[gpu_check] {name}: {verdict}; largest score difference {c['max_score_diff']:.4g}, largest relative "
            f"validation-loss difference {c['max_val_loss_rel_diff']:.3g} ({c['n_checks']} scores checked; tolerance: "
            f"direct |z| <= {c['bounds']['direct_eval']:g}, train-before-test |z| <= "
            f"{c['bounds']['train_before_test']:.2f} reference standard errors)")
        for line in c["lines"][1:]:
            say(f"[gpu_check]   {line.strip()}")
        if c["documents_differ"]:
            say(f"[gpu_check]   the documents differ (the bundle's tasks are not the reference's): "
                f"{', '.join(c['documents_differ'])}")
    out = RUNS / args.device / "report.json"
    out.write_text(json.dumps(report, indent=1, default=str) + "\n")
    if os.environ.get("OUT"):
        shutil.copy(out, Path(os.environ["OUT"]) / f"gpu_check_{args.device}.json")
    must = [c for n, c in comparisons.items() if "cuda vs cpu" in n or "smoke profile" in n]
    ok = all(c["comparable"] for c in must) and (args.device == "cuda" or all(c["identical"] for c in must))
    say(f"[gpu_check] {'passed' if ok else 'FAILED'} in {report['seconds']:.0f}s (limit {LIMIT_S}s"
        f"{'' if report['within_limit'] else ', OVER IT'}); {out.relative_to(ROOT)}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
