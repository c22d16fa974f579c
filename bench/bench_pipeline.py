"""Speed of the pipeline on this machine: `python bench/bench_pipeline.py` (also run by `make bench`).

Measures, and writes to bench/results/pipeline.json:
  - wall time of the whole smoke profile from a clean output folder (`python -m lib.run smoke`,
    i.e. `make all PROFILE=smoke`: prepare + every stage), per stage, and of a second, cached run;
  - pre-training tokens/s of the tiny models (from their build statistics);
  - LoRA fine-tuning tokens/s (all tokens of the padded batches, and target tokens) on the tiny
    model mw-llama-s (on mw_sentiment);
  - evaluation examples/s through lm-eval per task kind (multiple choice, generative, perplexity).
Outputs go to .cache/bench-outputs (never outputs/). Use --skip-profile to time only the kernels
(needs a previous full run).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / ".cache" / "bench-outputs"
os.environ["TBT_OUTPUTS"] = str(OUT)
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("HF_HOME", str(ROOT / ".cache" / "hf"))
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(ROOT))


def run_profile(profile: str) -> dict:
    t0 = time.time()
    subprocess.run([sys.executable, "-m", "lib.run", profile], cwd=ROOT, check=True, env=os.environ.copy(),
                   stdout=subprocess.DEVNULL)
    wall = time.time() - t0
    log = json.loads((OUT / profile / "run_log.json").read_text())
    return {"wall_seconds": wall, "stages": {k: round(v["seconds"], 1) for k, v in log["stages"].items()}}


def kernels(profile: str = "smoke") -> dict:
    from lib import paths
    from lib.miniworld import zoo
    from lib.pipeline import evaluate as ev
    from lib.pipeline import finetune as ft
    from lib.pipeline import tasks as tk
    from lib.pipeline import tiny

    out: dict = {}
    models = ev.default_models(paths.store_dir(profile))
    out["pretrain_tokens_per_second"] = {
        m: round(tiny.built(zoo.model_dir(zoo.models_dir(profile), m))["tokens_per_second"]) for m in models}
    sel = json.loads((paths.stage_dir(profile, "01_select_benchmarks") / "summary.json").read_text())
    manager = tk.task_manager(sel["include_paths"], sel["include_defaults"])
    name = "mw-llama-s"
    model, tok = ev.load_model(str(zoo.model_dir(zoo.models_dir(profile), name)))
    lm = ev.make_lm(model, tok, 32)

    task, info = tk.inspect(manager, "mw_sentiment", paths.store_dir(profile))
    plan = tk.plan_splits(task, info, sel["caps"], sel["split_seed"])
    tk.install_splits(task, plan)
    examples = ft.training_examples(task, info, lm, 256)
    recipe = ft.Recipe(lrs=(3e-3,), epochs=2, lora_r=8, lora_alpha=32, lora_dropout=0.1, batch_size=16,
                       max_length=256, weight_decay=0.0, seed=0)
    tmp = OUT / "bench-unit"
    t0 = time.time()
    ft.train_unit(model, tok, examples, recipe, 3e-3, tmp, lambda m: 0.0, True)
    dt = time.time() - t0
    shutil.rmtree(tmp, ignore_errors=True)
    n_tokens = sum(len(i) for i, _ in examples) * recipe.epochs
    n_target = sum(sum(1 for y in lab if y != -100) for _, lab in examples) * recipe.epochs
    out["finetune"] = {"model": name, "task": "mw_sentiment", "examples": len(examples),
                       "epochs": recipe.epochs, "seconds": round(dt, 2),
                       "tokens_per_second": round(n_tokens / dt), "target_tokens_per_second": round(n_target / dt)}
    out["eval_examples_per_second"] = {}
    lm = ev.make_lm(model, tok, 32)
    for bench in ("mw_sentiment", "mw_arith", "mw_wiki"):
        task, info = tk.inspect(manager, bench, paths.store_dir(profile))
        plan = tk.plan_splits(task, info, sel["caps"], sel["split_seed"])
        tk.install_splits(task, plan)
        ev.evaluate(lm, task, info, "validation", plan.ids["validation"])          # warm-up
        o = ev.evaluate(lm, task, info, "test", plan.ids["test"])
        out["eval_examples_per_second"][f"{bench} ({info.kind})"] = round(o.n / o.seconds, 1)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--skip-profile", action="store_true", help="only the kernels (needs an earlier full run)")
    args = ap.parse_args()
    result: dict = {"machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                                "python": platform.python_version(),
                                "torch_threads": os.environ.get("TBT_TORCH_THREADS", "1")}}
    if not args.skip_profile:
        shutil.rmtree(OUT / "smoke", ignore_errors=True)
        result["smoke_profile_clean"] = run_profile("smoke")
        result["smoke_profile_cached"] = run_profile("smoke")
    result.update(kernels())
    path = ROOT / "bench" / "results" / "pipeline.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
