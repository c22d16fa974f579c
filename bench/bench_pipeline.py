"""Speed of the pipeline on this machine: `python bench/bench_pipeline.py` (also run by `make bench`).

Measures, and writes to bench/results/pipeline.json:
  - wall time of the whole smoke profile from a clean output folder (`python -m runner.run smoke`,
    i.e. `make all PROFILE=smoke`: prepare + every stage), per stage, and of a second, cached run;
  - pre-training tokens/s of the tiny models (from their build statistics);
  - LoRA fine-tuning tokens/s (all tokens of the padded batches, and target tokens) on the tiny
    model mw-llama-s (on mw_sentiment);
  - one learning-rate unit as stage 02 runs it (render the examples, train 3 epochs, validate
    after each with lm-eval) with lm-eval's template compilation as it comes and cached
    (lib.pipeline.evaluate.cache_templates), alternating, 3 times each;
  - the hand-written LoRA loop against transformers' Trainer on the same examples and models
    (CPU seconds of the process, so other work on the machine counts less), 3 times each;
  - evaluation examples/s through lm-eval per task kind (multiple choice, generative, perplexity).
Outputs go to .cache/bench-outputs (never outputs/). Use --skip-profile to time only the kernels
(needs a previous full run).
"""

from __future__ import annotations

import argparse
import functools
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
    subprocess.run([sys.executable, "-m", "runner.run", profile], cwd=ROOT, check=True, env=os.environ.copy(),
                   stdout=subprocess.DEVNULL)
    wall = time.time() - t0
    log = json.loads((OUT / profile / "run_log.json").read_text())
    return {"wall_seconds": wall, "stages": {k: round(v["seconds"], 1) for k, v in log["stages"].items()}}


RECIPE = dict(lrs=(3e-3,), epochs=3, batch_size=16, max_length=256, weight_decay=0.0, loss_on="target",
              end_of_text="generative", select_on="metric")      # departures from notebook 02's recipe


def _task(manager, sel, profile, name):
    from lib import paths
    from lib.pipeline import tasks as tk

    task, info = tk.inspect(manager, name, paths.store_dir(profile))
    plan = tk.plan_splits(task, info, tk.SplitRule.from_selection(sel))
    tk.install_splits(task, plan)
    return task, info, plan


def _validate(model, tok, task, info, ids) -> float:
    from lib.pipeline import evaluate as ev

    return ev.evaluate(ev.make_lm(model, tok, 32), task, info, "validation", ids).score


def _templates(cached: bool) -> None:
    """lm-eval's template compilation as it comes (``cached`` False) or compiled once."""
    from lib.pipeline import evaluate as ev

    if not hasattr(ev, "_real_cache_templates"):
        ev._real_cache_templates = ev.cache_templates
    real = ev._real_cache_templates
    real(enable=cached)
    ev.cache_templates = real if cached else (lambda enable=True: None)     # make_lm must not switch it on


def unit_before_after(model, tok, manager, sel, profile, reps: int = 3) -> dict:
    """Stage 02's unit of work (examples, 3 epochs, lm-eval validation after each) and a test-split
    evaluation, with lm-eval's template compilation as it comes and cached, alternating; wall seconds."""
    from lib.pipeline import evaluate as ev
    from lib.pipeline import finetune as ft

    recipe = ft.Recipe.default(**RECIPE)
    out = {}
    for bench in ("mw_sentiment", "mw_arith"):
        task, info, plan = _task(manager, sel, profile, bench)
        unit = {"as_lm_eval_comes": [], "templates_cached": []}
        test = {"as_lm_eval_comes": [], "templates_cached": []}
        for _ in range(reps):
            for mode, cached in (("as_lm_eval_comes", False), ("templates_cached", True)):
                _templates(cached)
                lm = ev.make_lm(model, tok, 32)
                t0 = time.time()
                examples = ft.training_examples(task, info, lm, recipe)
                validate = functools.partial(_validate, tok=tok, task=task, info=info, ids=plan.ids["validation"])
                ft.train_units(model, tok, lambda ex=examples: ex, recipe, [3e-3], lambda lr: OUT / "bench-unit",
                               validate, True)
                unit[mode].append(round(time.time() - t0, 2))
                t0 = time.time()
                ev.evaluate(lm, task, info, "test", plan.ids["test"])
                test[mode].append(round(time.time() - t0, 3))
        _templates(True)
        shutil.rmtree(OUT / "bench-unit", ignore_errors=True)
        ratio = lambda d: round(min(d["as_lm_eval_comes"]) / min(d["templates_cached"]), 2)  # noqa: E731
        out[bench] = {"unit_seconds": unit, "unit_speedup": ratio(unit), "test_eval_seconds": test,
                      "test_eval_speedup": ratio(test), "n_train": plan.sizes["train"],
                      "n_validation": plan.sizes["validation"], "n_test": plan.sizes["test"]}
    return out


def loop_vs_trainer(reps: int = 3) -> dict:
    """The hand-written LoRA loop and transformers' Trainer on the same 450 synthetic examples
    (20-120 tokens, answers of 1-4 tokens), batch 16, 3 epochs, on randomly initialised tiny
    models; CPU seconds of this process, alternating, ``reps`` times each."""
    import random
    import tempfile

    import torch
    from transformers import Trainer, TrainingArguments

    from lib.pipeline import finetune as ft
    from lib.pipeline import tiny, training

    texts = [f"creature {i} lives by the {['forest', 'river', 'hill'][i % 3]} and eats {i % 7} fruits ."
             for i in range(400)]
    tok = tiny.train_tokenizer(texts, 400)
    rng = random.Random(0)
    examples = []
    for _ in range(450):
        n, k = rng.randint(20, 120), rng.randint(1, 4)
        ids = [rng.randrange(5, 400) for _ in range(n)]
        examples.append((ids, [-100] * (n - k) + ids[n - k:]))
    recipe = ft.Recipe.default(**RECIPE)
    tokens = sum(len(i) for i, _ in examples) * recipe.epochs

    def hand(model):
        with ft.lora(model, recipe) as m:
            t0 = time.process_time()
            for _ in training.train_epochs(m, examples, epochs=3, batch_size=16, lr=3e-3, weight_decay=0.0, seed=0,
                                          pad_id=tok.pad_token_id):
                pass
            return time.process_time() - t0

    def collate(rows):
        ids, labels, mask = training._pad([(r["input_ids"], r["labels"]) for r in rows], tok.pad_token_id)
        return {"input_ids": ids, "labels": labels, "attention_mask": mask}

    def trainer(model):
        data = [{"input_ids": i, "labels": y} for i, y in examples]
        with ft.lora(model, recipe) as m, tempfile.TemporaryDirectory() as d:
            t0 = time.process_time()
            args = TrainingArguments(output_dir=d, per_device_train_batch_size=16, num_train_epochs=3,
                                     learning_rate=3e-3, weight_decay=0.0, lr_scheduler_type="linear", warmup_steps=0,
                                     max_grad_norm=1.0, save_strategy="no", eval_strategy="no",
                                     logging_strategy="no", report_to=[], use_cpu=True, seed=0, disable_tqdm=True,
                                     dataloader_num_workers=0, remove_unused_columns=False)
            Trainer(model=m, args=args, train_dataset=data, data_collator=collate).train()
            return time.process_time() - t0

    out = {"threads": torch.get_num_threads(), "examples": len(examples), "tokens": tokens}
    for family, size in (("llama", dict(d_model=64, n_layers=2, n_heads=4)),
                         ("gpt2", dict(d_model=128, n_layers=3, n_heads=4)),
                         ("llama", dict(d_model=192, n_layers=4, n_heads=6))):
        model = tiny.make_model(family, tok, max_len=256, **size)
        cpu = {"hand_loop": [], "trainer": []}
        for _ in range(reps):
            cpu["hand_loop"].append(round(hand(model), 2))
            cpu["trainer"].append(round(trainer(model), 2))
        key = f"{family} {tiny.n_parameters(model) / 1e6:.2f}M"
        out[key] = {"cpu_seconds": cpu, "tokens_per_cpu_second": {k: round(tokens / min(v)) for k, v in cpu.items()},
                    "trainer_over_loop": round(min(cpu["trainer"]) / min(cpu["hand_loop"]), 3)}
    return out


def kernels(profile: str = "smoke", trainer: bool = True) -> dict:
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

    task, info, plan = _task(manager, sel, profile, "mw_sentiment")
    recipe = ft.Recipe.default(**{**RECIPE, "epochs": 2})
    examples = ft.training_examples(task, info, lm, recipe)
    tmp = OUT / "bench-unit"
    t0 = time.time()
    ft.train_units(model, tok, lambda: examples, recipe, [3e-3], lambda lr: tmp, lambda m: 0.0, True)
    dt = time.time() - t0
    shutil.rmtree(tmp, ignore_errors=True)
    n_tokens = sum(len(i) for i, _ in examples) * recipe.epochs
    n_target = sum(sum(1 for y in lab if y != -100) for _, lab in examples) * recipe.epochs
    out["finetune"] = {"model": name, "task": "mw_sentiment", "examples": len(examples),
                       "epochs": recipe.epochs, "seconds": round(dt, 2),
                       "tokens_per_second": round(n_tokens / dt), "target_tokens_per_second": round(n_target / dt)}
    out["unit_before_after"] = unit_before_after(model, tok, manager, sel, profile)
    if trainer:
        out["loop_vs_trainer"] = loop_vs_trainer()
    out["eval_examples_per_second"] = {}
    lm = ev.make_lm(model, tok, 32)
    for bench in ("mw_sentiment", "mw_arith", "mw_wiki"):
        task, info, plan = _task(manager, sel, profile, bench)
        ev.evaluate(lm, task, info, "validation", plan.ids["validation"])          # warm-up
        o = ev.evaluate(lm, task, info, "test", plan.ids["test"])
        out["eval_examples_per_second"][f"{bench} ({info.kind})"] = round(o.n / o.seconds, 1)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--skip-profile", action="store_true", help="only the kernels (needs an earlier full run)")
    ap.add_argument("--skip-trainer", action="store_true", help="leave out the loop-vs-Trainer comparison")
    args = ap.parse_args()
    result: dict = {"machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                                "python": platform.python_version(),
                                "torch_threads": os.environ.get("TBT_TORCH_THREADS", "1")}}
    if not args.skip_profile:
        shutil.rmtree(OUT / "smoke", ignore_errors=True)
        result["smoke_profile_clean"] = run_profile("smoke")
        result["smoke_profile_cached"] = run_profile("smoke")
    result.update(kernels(trainer=not args.skip_trainer))
    path = ROOT / "bench" / "results" / "pipeline.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
