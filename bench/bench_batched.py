"""Training several runs of one model shape in one computation: `python bench/bench_batched.py`.

02 trains every (model, benchmark) at four learning rates on the same batches in the same order.
A tiny model's step is mostly per-operation overhead (``bench_compute_floor.py``), so stacking the
runs (``lib.pipeline.stacked``: one forward and backward for k runs, each run's rows through its
own weights) should pay that overhead once for k runs. This measures, for each size of the mini
zoo (one family, ``--family``, default llama; ``--families all`` for the three), one torch thread:

- tokens per CPU second of k runs trained one after another (the pipeline today) and stacked,
  k = 2, 3, 4 (the learning rates 1e-4, 3e-4, 1e-3, 3e-3 of the mini profile), at 02's shape:
  batches of 8 examples of 12-48 tokens, right-padded, the loss on the last 8 tokens of each
  (answers), every parameter trained (``method: full``), AdamW with weight decay 0.01, the linear
  decay and the gradient clipping of ``lib.pipeline.training.train_epochs``;
  ``tokens`` are every token of the padded batches, as in ``bench_training.py``;
- whether the stacked runs are bit-identical to the sequential ones: every step's loss of every
  run and every final weight, after ``--steps`` steps, for both ways a stacked linear layer can
  multiply (``loop``: one product per run with the sequential kernel; ``bmm``: one batched product).

Writes bench/results/batched.json and prints a table.
"""

from __future__ import annotations

import argparse
import copy
import os
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
RESULTS = ROOT / "bench" / "results" / "batched.json"

from bench.shapes import model as _model  # noqa: E402
from lib.pipeline.device import pin_arithmetic  # noqa: E402
from lib.util import atomic_write_json  # noqa: E402

pin_arithmetic()

LRS = (1e-4, 3e-4, 1e-3, 3e-3)
ROWS, MIN_LEN, MAX_LEN, ANSWER = 8, 12, 48, 8


def _batches(tok, n: int) -> list:
    """``n`` padded batches of (ids, labels, mask), seeded."""
    import torch

    from lib.pipeline.training import _pad

    gen = torch.Generator().manual_seed(0)
    out = []
    for _ in range(n):
        chunk = []
        for _ in range(ROWS):
            length = int(torch.randint(MIN_LEN, MAX_LEN + 1, (1,), generator=gen))
            ids = torch.randint(5, len(tok), (length,), generator=gen).tolist()
            chunk.append((ids, [-100] * (length - ANSWER) + ids[-ANSWER:]))
        out.append(_pad(chunk, tok.pad_token_id))
    return out


def _runs(base, k: int):
    import torch

    models = [copy.deepcopy(base) for _ in range(k)]
    opts, scheds = [], []
    for m, lr in zip(models, LRS[:k]):
        m.train()
        opt = torch.optim.AdamW([p for p in m.parameters() if p.requires_grad], lr=lr, weight_decay=0.01)
        opts.append(opt)
        scheds.append(torch.optim.lr_scheduler.LambdaLR(opt, lambda s: max(0.0, 1 - s / 1000)))
    return models, opts, scheds


def sequential(base, batches, k: int):
    """k runs one after another, as the pipeline trains a unit's learning rates: (CPU s, losses, models)."""
    from lib.pipeline.training import optimizer_step

    models, opts, scheds = _runs(base, k)
    losses = [[] for _ in range(k)]
    t0 = time.process_time()
    for i, (m, opt, sched) in enumerate(zip(models, opts, scheds)):
        for ids, labels, mask in batches:
            loss = m(input_ids=ids, attention_mask=mask, labels=labels, use_cache=False).loss
            losses[i].append(optimizer_step(loss, list(m.parameters()), opt, sched))
    return time.process_time() - t0, losses, models


def stacked(base, batches, k: int, linear: str):
    """The same k runs stacked: (CPU s, losses, models)."""
    from lib.pipeline.stacked import Stack
    from lib.pipeline.training import optimizer_step

    models, opts, scheds = _runs(base, k)
    t0 = time.process_time()
    stack = Stack(models, linear=linear)
    losses = [[] for _ in range(k)]
    for ids, labels, mask in batches:
        per_run = stack.losses(ids, labels, mask)
        stack.backward(per_run)
        for i, (m, opt, sched) in enumerate(zip(models, opts, scheds)):
            losses[i].append(optimizer_step(float(per_run[i].detach()), list(m.parameters()), opt, sched))
    stack.unstack()
    return time.process_time() - t0, losses, models


def _identical(a_models, b_models) -> bool:
    import torch

    return all(torch.equal(x, y) for a, b in zip(a_models, b_models)
               for x, y in zip(a.state_dict().values(), b.state_dict().values()))


def _max_diff(a_models, b_models) -> float:
    return max(float((x - y).abs().max()) for a, b in zip(a_models, b_models)
               for x, y in zip(a.state_dict().values(), b.state_dict().values()))


def _verdict(check: dict) -> str:
    if check["losses_identical"] and check["weights_identical"]:
        return "bit-identical"
    return f"differs: weights by up to {check['max_weight_diff']:.1e}, losses by {check['max_loss_diff']:.1e}"


def measure(family: str, size: str, steps: int, reps: int, ks: list[int], modes: list[str]) -> dict:
    from lib.pipeline.device import setup_torch

    setup_torch()
    tok, base = _model(family, size)
    batches = _batches(tok, steps)
    tokens = sum(int(ids.numel()) for ids, _, _ in batches)
    row = {"n_params": sum(p.numel() for p in base.parameters()), "tokens_per_run": tokens, "k": {}}
    for k in ks:
        best_seq, best = float("inf"), {m: float("inf") for m in modes}
        check = {}
        for rep in range(reps):
            cpu, seq_losses, seq_models = sequential(base, batches, k)
            best_seq = min(best_seq, cpu)
            for mode in modes:
                cpu, losses, models = stacked(base, batches, k, mode)
                best[mode] = min(best[mode], cpu)
                if rep == 0:
                    check[mode] = {"losses_identical": losses == seq_losses,
                                   "weights_identical": _identical(models, seq_models),
                                   "max_loss_diff": max(abs(a - b) for x, y in zip(losses, seq_losses)
                                                        for a, b in zip(x, y)),
                                   "max_weight_diff": _max_diff(models, seq_models)}
        entry = {"sequential_tokens_per_cpu_s": k * tokens / best_seq, "load": os.getloadavg()[0],
                 "when": time.strftime("%Y-%m-%d %H:%M")}
        for mode in modes:
            entry[mode] = {"tokens_per_cpu_s": k * tokens / best[mode], "speed_up": best_seq / best[mode],
                           **check[mode]}
        row["k"][str(k)] = entry
        said = "; ".join(f"{m} {entry[m]['tokens_per_cpu_s']:,.0f} ({entry[m]['speed_up']:.2f}x, {_verdict(entry[m])})"
                         for m in modes)
        print(f"{family}-{size} k={k}: sequential {entry['sequential_tokens_per_cpu_s']:,.0f} tokens/CPU s; "
              f"stacked {said}", flush=True)
    return row


def units(models: list[str], world: Path, tasks: list[str], tmp: Path, save=None) -> dict:
    """Whole 02 units on pre-trained models of the mini zoo and the world's tasks, with the mini
    profile's recipe (params/mini.yaml), once one rate after another and once stacked: wall seconds
    of the four learning rates (training and validation, through ``lib.pipeline.launch.jobs`` in this
    process) and whether the two ends (choice, test score, curves, chosen weights) are identical."""
    from lib import params, store
    from lib.pipeline import finetune as ft
    from lib.pipeline import tasks as tk
    from lib.pipeline.launch import jobs
    from lib.util import sha256_file

    prof = params.load_profile("mini")
    recipe = ft.Recipe.from_params(prof.params("02_finetune"))
    sel = prof.params("01_select_benchmarks")
    rule = tk.SplitRule(caps={"train": sel["cap_train"], "validation": sel["cap_validation"], "test": sel["cap_test"]},
                        seed=sel["split_seed"], procedure=sel["split_procedure"], val_fraction=sel["val_fraction"],
                        shared_test=sel["shared_test"])
    rows = tk.select(tasks, [world / "tasks"], False, sel["min_train"], rule=rule)
    selection = tk.selection_summary(rows, [world / "tasks"], False, sel["min_train"], rule, task_timeout=120.0)
    out = {}
    for model in models:
        row = {}
        for mode, stack in (("one rate after another", False), ("stacked", True)):
            folder = tmp / Path(model).name / ("stacked" if stack else "sequential")
            specs = jobs.plan(store.TBT, [model], selection, store_root=folder / "store", work_root=folder / "work",
                              recipe=ft.Recipe.default(**{**recipe.to_dict(), "stack_lrs": stack}), bootstrap_iters=0,
                              eval_batch_size=32, max_gen_toks=0)
            t0 = time.time()
            jobs.launch(specs, executor="local", progress_every=3600)
            seconds = time.time() - t0
            ends = {}
            for task in tasks:
                res = store.read(store.path_for(folder / "store", store.TBT, task, Path(model).name))
                chosen = folder / "work" / res.provenance["adapter"]
                ends[task] = [res.score, res.provenance["lr"], res.provenance["epoch"], res.provenance["val_curves"],
                              sorted(sha256_file(p) for p in chosen.glob("*.safetensors"))]
            row[mode] = {"seconds": seconds, "ends": ends}
        row["speed_up"] = row["one rate after another"]["seconds"] / row["stacked"]["seconds"]
        row["identical"] = row["one rate after another"]["ends"] == row["stacked"]["ends"]
        for mode in ("one rate after another", "stacked"):
            row[mode] = {"seconds": row[mode]["seconds"]}
        out[Path(model).name] = row
        if save:
            save(out)                           # what is measured so far survives an interrupted run
        print(f"{Path(model).name}, {len(tasks)} tasks x {len(recipe.lrs)} learning rates: one rate after another "
              f"{row['one rate after another']['seconds']:.1f} s, stacked {row['stacked']['seconds']:.1f} s "
              f"({row['speed_up']:.2f}x); results {'identical' if row['identical'] else 'DIFFER'}", flush=True)
    return out


def main() -> int:
    from lib.miniworld import zoo

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--family", default="llama", help="llama, gpt2, gpt_neox or all")
    ap.add_argument("--sizes", nargs="*", default=list(zoo.SIZES))
    ap.add_argument("--steps", type=int, default=20, help="optimiser steps per run (and the bit-identity sample)")
    ap.add_argument("--reps", type=int, default=2, help="timings per configuration; the best counts")
    ap.add_argument("--ks", nargs="*", type=int, default=[2, 3, 4])
    ap.add_argument("--modes", nargs="*", default=["loop", "bmm"])
    ap.add_argument("--units", nargs="*", default=[],
                    help="pre-trained model folders of the mini zoo: also time whole 02 units on them (--world)")
    ap.add_argument("--world", type=Path, default=ROOT / "outputs" / "mini" / "work" / "world",
                    help="a built mini world (its tasks/), for --units")
    ap.add_argument("--unit-tasks", nargs="*", default=["mw_facts", "mw_quiz"])
    ap.add_argument("--no-steps", action="store_true", help="skip the step measurements (with --units)")
    ap.add_argument("--out", type=Path, default=RESULTS,
                    help="where the results go (default bench/results/batched.json; two benchmarks run side by "
                         "side, as 02's two workers do, need two files)")
    args = ap.parse_args()
    out_path = args.out.resolve()
    families = list(zoo.VOCAB) if args.family == "all" else [args.family]
    load = os.getloadavg()
    result = {"machine": platform.platform(), "cpus": os.cpu_count(), "load_before": load, "torch_threads": 1,
              "steps": args.steps, "reps": args.reps, "lrs": list(LRS),
              "shape": {"rows": ROWS, "tokens": [MIN_LEN, MAX_LEN], "answer_tokens": ANSWER}, "runs": {}}
    previous = {}
    if out_path.exists():
        import json

        previous = json.loads(out_path.read_text())
    for family in [] if args.no_steps else families:
        for size in args.sizes:
            result["runs"][f"{family}-{size}"] = measure(family, size, args.steps, args.reps, args.ks, args.modes)
    runs = previous.get("runs", {})                # what was measured before is kept, unless measured again
    for name, row in result["runs"].items():
        old = runs.get(name, {}).get("k", {})
        row["k"] = {**old, **{k: {**old.get(k, {}), **entry} for k, entry in row["k"].items()}}
        runs[name] = row
    result["runs"] = runs
    if args.units:
        import tempfile

        def save(done: dict) -> None:
            result.update(units={**previous.get("units", {}), **done}, unit_tasks=args.unit_tasks,
                          load_after=os.getloadavg())
            atomic_write_json(out_path, result)

        with tempfile.TemporaryDirectory() as tmp:
            save(units(args.units, args.world, args.unit_tasks, Path(tmp), save))
    elif "units" in previous:
        result["units"], result["unit_tasks"] = previous["units"], previous.get("unit_tasks")
    result["load_after"] = os.getloadavg()
    atomic_write_json(out_path, result)
    print(f"written {out_path}; load average {load[0]:.1f} -> {result['load_after'][0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
