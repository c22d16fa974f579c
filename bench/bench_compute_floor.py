"""How fast could the mini world's training get? `python bench/bench_compute_floor.py [--run outputs/mini]`.

Issue 18 asked to pay for the bigger zoo with speed, on the premise that the per-step overhead of
tiny models dominates. This measures how much of a training step is irreducible matrix arithmetic
and so how far faster code could take `make all` on this machine:

- For every (family, size) of the zoo, built as the zoo builds it (``lib.miniworld.zoo``'s widths,
  depths and vocabularies): the CPU seconds of a step, best of ``--reps`` runs of ``--steps`` steps,
  one torch thread, at the pre-training shape (16 windows of 64 tokens, loss on every token) and at
  the fine-tuning shape (8 examples of 48 tokens, loss on the last 8: an answer; 02's examples have
  9-40 tokens on the benchmarks, about 60-75 on the two corpora, which take 38 % of its
  seconds); and, in a profiled
  run of the same steps, the CPU time of the matrix products (``aten::mm``, ``addmm``, ``bmm``,
  ``baddbmm``). Their share is what no removal of overhead (Python, dispatch, element-wise kernels,
  the optimiser) can take away at these shapes. Attention kernels count as overhead here, so the
  floor below is a lower bound. The profiler also counts the products' floating-point operations,
  so their speed at these shapes compares with one large product's (``peak_gflops``).
- With ``--run`` (a finished run's output folder, default ``outputs/mini``): the floor of that run's
  training, i.e. its measured training seconds (the zoo's ``pretrain.json`` files at the
  pre-training shape, its last phase batching 16 documents of up to 64 tokens too; 02's training
  epochs, ``train_seconds`` in each ``unit.json``'s curve, at the fine-tuning shape) times the
  floor's share of a step of their (family, size), over the two worker processes. 02's validation
  (forward passes after every epoch) is reported beside it, not counted as training.
- With ``--compile`` (the default): the step time of the largest llama under ``torch.compile`` (inductor, which
  fuses the element-wise kernels) against eager, after its compilation; needs a C++ compiler.
- With ``--make-all-s`` (that run's measured ``make all`` seconds): what ``make all`` would take with
  its training at the floor, and at 1.3x the floor, everything else at its measured seconds.
- With ``--levers`` (the default; ``--levers-only`` times just these, kept beside the last results):
  the levers left, each on one run's fine-tuning step: the vocabulary projection and loss only at
  the answer positions (eager; not the model's own arithmetic), and AdamW's multi-tensor
  ``foreach`` form (and whether it is bit-identical to the per-parameter loop torch uses on a CPU).

Writes bench/results/compute_floor.json and prints the numbers.
"""

from __future__ import annotations

import argparse
import copy
import glob
import json
import os
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
RESULTS = ROOT / "bench" / "results" / "compute_floor.json"

from bench.shapes import model as _model  # noqa: E402
from lib.pipeline.device import pin_arithmetic  # noqa: E402
from lib.util import atomic_write_json  # noqa: E402

pin_arithmetic()

GEMMS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm")
SHAPES = {"pretrain": (16, 64, 0), "finetune": (8, 48, 40)}   # rows, tokens, tokens without loss
WORKERS = 2                                                    # `executor: processes`, one per core


def _batch(tok, shape: str):
    import torch

    rows, tokens, unscored = SHAPES[shape]
    ids = torch.randint(5, len(tok), (rows, tokens), generator=torch.Generator().manual_seed(0))
    labels = ids.clone()
    labels[:, :unscored] = -100
    return ids, labels


def _stepper(model, ids, labels, foreach: bool | None = None):
    """One clipped AdamW step of ``model`` (``foreach`` chooses AdamW's implementation)."""
    import torch

    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-4, foreach=foreach)
    model.train()

    def step():
        loss = model(input_ids=ids, labels=labels).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
    return step


def _best_cpu(step, n_steps: int, reps: int) -> float:
    """Best CPU seconds per step over ``reps`` runs of ``n_steps`` (after one warm-up run)."""
    best = float("inf")
    for rep in range(reps + 1):
        t0 = time.process_time()
        for _ in range(n_steps):
            step()
        if rep:
            best = min(best, (time.process_time() - t0) / n_steps)
    return best


def _gemm_cpu(step, n_steps: int, reps: int = 2) -> tuple[float, float]:
    """Seconds and floating-point operations per step of the matrix products, the least of ``reps``
    profiled runs (the profiler times operations by the clock, so a moment the process is not
    scheduled inflates one run's products; best of several, as the step times are)."""
    from torch.profiler import ProfilerActivity, profile

    best, flops = float("inf"), 0.0
    for _ in range(reps):
        with profile(activities=[ProfilerActivity.CPU], with_flops=True) as prof:
            for _ in range(n_steps):
                step()
        events = [e for e in prof.key_averages() if e.key in GEMMS]
        seconds = sum(e.self_cpu_time_total for e in events) / 1e6 / n_steps
        if seconds < best:
            best, flops = seconds, sum(e.flops for e in events) / n_steps
    return best, flops


def peak_gflops(reps: int) -> float:
    """GFLOP/s of one large float32 matrix product (1024 x 1024 x 1024) on one thread, best of
    ``reps``: what the matrix kernels reach when the shapes are no obstacle."""
    import torch

    from lib.pipeline.device import setup_torch

    setup_torch()
    a, b = torch.randn(1024, 1024), torch.randn(1024, 1024)
    best = float("inf")
    for rep in range(reps + 1):
        t0 = time.process_time()
        for _ in range(5):
            a @ b
        if rep:
            best = min(best, (time.process_time() - t0) / 5)
    return 2 * 1024 ** 3 / best / 1e9


def shares(n_steps: int, reps: int) -> dict:
    from lib.miniworld import zoo
    from lib.pipeline.device import setup_torch

    setup_torch()
    out = {}
    for family in zoo.VOCAB:
        for size in zoo.SIZES:
            tok, model = _model(family, size)
            row = {"n_params": sum(p.numel() for p in model.parameters())}
            for shape in SHAPES:
                step = _stepper(model, *_batch(tok, shape))
                seconds = _best_cpu(step, n_steps, reps)
                gemm, flops = _gemm_cpu(step, n_steps, reps)
                row[shape] = {"step_cpu_s": seconds, "gemm_cpu_s": gemm, "gemm_share": min(1.0, gemm / seconds),
                              "gemm_gflops": flops / gemm / 1e9}
            out[f"{family}-{size}"] = row
            print(f"{family}-{size}: matrix products {row['pretrain']['gemm_share']:.0%} of a pre-training step "
                  f"({row['pretrain']['step_cpu_s'] * 1e3:.1f} ms, {row['pretrain']['gemm_gflops']:.0f} GFLOP/s), "
                  f"{row['finetune']['gemm_share']:.0%} of a fine-tuning step "
                  f"({row['finetune']['step_cpu_s'] * 1e3:.1f} ms, {row['finetune']['gemm_gflops']:.0f} GFLOP/s)",
                  flush=True)
    return out


def _family_size(name: str) -> str:
    """'mw-gpt_neox-m-sham' or 'trunk-llama-l' -> 'gpt_neox-m' / 'llama-l'."""
    parts = name.split("-")
    return f"{parts[1]}-{parts[2]}"


def _units(run: Path) -> dict[Path, list[dict]]:
    """02's finished units of ``run``, grouped by (model, benchmark) folder."""
    out: dict[Path, list[dict]] = {}
    for path in sorted(glob.glob(str(run / "work" / "train_before_test" / "*" / "*" / "lr=*" / "unit.json"))):
        out.setdefault(Path(path).parents[1], []).append(json.loads(Path(path).read_text()))
    return out


def floor(run: Path, share: dict, peak: float) -> dict:
    """The run's training CPU seconds and their matrix-product floor, per part of the run: the
    matrix products at the speed measured at these shapes, and at ``peak`` GFLOP/s."""
    parts = {"zoo pre-training (trunks)": [], "zoo last phase (twins and bases)": [], "02 fine-tuning": []}
    for path in glob.glob(str(run / "work" / "models" / "*" / "pretrain.json")):
        name = Path(path).parent.name
        stats = json.loads(Path(path).read_text())
        key = "zoo pre-training (trunks)" if "steps" in stats else "zoo last phase (twins and bases)"
        parts[key].append((stats["seconds"], share[_family_size(name)]["pretrain"]))
    validation = 0.0
    for unit_dir, units in _units(run).items():
        row = share[_family_size(unit_dir.parent.name)]["finetune"]
        for unit in units:
            train_s = sum(p["train_seconds"] for p in unit["curve"])
            validation += unit["seconds"] - train_s
            parts["02 fine-tuning"].append((train_s, row))
    print(f"02: {len(parts['02 fine-tuning'])} units; their validation {validation:,.0f} s besides (not training)",
          flush=True)
    out = {}
    for key, rows in parts.items():
        cpu = sum(s for s, _ in rows)
        gemm = sum(s * r["gemm_share"] for s, r in rows)
        at_peak = sum(s * r["gemm_share"] * r["gemm_gflops"] / peak for s, r in rows)
        out[key] = {"units": len(rows), "cpu_s": cpu, "gemm_cpu_s": gemm, "gemm_cpu_s_at_peak": at_peak,
                    "wall_s": cpu / WORKERS, "floor_wall_s": gemm / WORKERS, "floor_wall_s_at_peak": at_peak / WORKERS}
        print(f"{key}: {len(rows)} units, {cpu:,.0f} CPU s ({cpu / WORKERS:,.0f} s over {WORKERS} workers); "
              f"matrix products {gemm:,.0f} CPU s: floor {gemm / WORKERS:,.0f} s, at the peak rate "
              f"{at_peak / WORKERS:,.0f} s", flush=True)
    total = {k: sum(v[k] for v in out.values()) for k in ("cpu_s", "gemm_cpu_s", "gemm_cpu_s_at_peak")}
    out["all training"] = {**total, "wall_s": total["cpu_s"] / WORKERS,
                           "floor_wall_s": total["gemm_cpu_s"] / WORKERS,
                           "floor_wall_s_at_peak": total["gemm_cpu_s_at_peak"] / WORKERS,
                           "largest_speed_up": total["cpu_s"] / total["gemm_cpu_s"],
                           "largest_speed_up_at_peak": total["cpu_s"] / total["gemm_cpu_s_at_peak"]}
    out["02 fine-tuning"].update(validation_s=validation)
    t = out["all training"]
    print(f"all training: {t['wall_s']:,.0f} s over {WORKERS} workers; with every operation but the matrix "
          f"products free, {t['floor_wall_s']:,.0f} s ({t['largest_speed_up']:.2f}x faster), and with them "
          f"at the peak rate too, {t['floor_wall_s_at_peak']:,.0f} s ({t['largest_speed_up_at_peak']:.2f}x)")
    return out


def _eager_and_compiled(make_step, what: str, n_steps: int, reps: int) -> dict:
    """``make_step(compiled)`` eager and under ``torch.compile``: the first step (which compiles)
    and the best CPU seconds of a step after it, each way."""
    out = {}
    for mode in ("eager", "compile"):
        step = make_step(mode == "compile")
        t0 = time.time()
        step()                                     # compiles, under torch.compile
        out[f"{mode}_first_step_s"] = time.time() - t0
        out[f"{mode}_step_cpu_s"] = _best_cpu(step, n_steps, reps)
    out["compile_speed_up"] = out["eager_step_cpu_s"] / out["compile_step_cpu_s"]
    print(f"{what}: eager {out['eager_step_cpu_s'] * 1e3:.1f} ms, torch.compile "
          f"{out['compile_step_cpu_s'] * 1e3:.1f} ms ({out['compile_speed_up']:.2f}x; compiling took "
          f"{out['compile_first_step_s']:.0f} s)", flush=True)
    return out


def compiled(n_steps: int, reps: int) -> dict:
    import torch

    from lib.pipeline.device import setup_torch

    setup_torch()
    tok, model = _model("llama", "l")
    ids, labels = _batch(tok, "finetune")
    return _eager_and_compiled(lambda on: _stepper(torch.compile(model) if on else copy.deepcopy(model), ids, labels),
                               "llama-l fine-tuning step", n_steps, reps)


def _answer_only_stepper(model, ids, labels):
    """The fine-tuning step with the vocabulary projection and loss computed only where the loss
    falls (the last positions), not on every position: the "logits only at the answers" lever.
    Its arithmetic is not the model's own loss (another reduction over fewer rows)."""
    import torch

    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-4)
    model.train()
    scored = int((labels[0] != -100).sum())
    head = model.get_output_embeddings()

    def step():
        hidden = model.base_model(input_ids=ids, use_cache=False)[0]
        logits = head(hidden[:, -scored - 1:-1])                     # position t predicts token t+1
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                                 labels[:, -scored:].reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
    return step


def _foreach_identical(model, ids, labels, n_steps: int) -> tuple[bool, float, float]:
    """AdamW's multi-tensor (``foreach``) implementation against the per-parameter loop torch uses
    on a CPU by default, on one run: (every weight bit-identical after ``n_steps``, seconds per
    step loop, seconds per step foreach)."""
    import torch

    out, seconds = [], []
    for foreach in (False, True):
        run = copy.deepcopy(model)
        step = _stepper(run, ids, labels, foreach=foreach)
        for _ in range(2):
            step()
        t0 = time.process_time()
        for _ in range(n_steps):
            step()
        seconds.append((time.process_time() - t0) / n_steps)
        out.append(torch.cat([p.detach().flatten() for p in run.parameters()]))
    return torch.equal(*out), seconds[0], seconds[1]


def levers(n_steps: int, reps: int) -> dict:
    """What the remaining candidate levers buy on one run's fine-tuning step, per (family, size) of
    llama and the largest of each family: logits only at the answers (eager), and AdamW ``foreach``
    (and whether it is bit-identical). ``torch.compile`` is :func:`compiled`'s."""
    from lib.pipeline.device import setup_torch

    setup_torch()
    out = {}
    for name in ("llama-xs", "llama-s", "llama-m", "llama-l", "gpt2-l", "gpt_neox-l"):
        family, size = name.split("-")
        tok, model = _model(family, size)
        ids, labels = _batch(tok, "finetune")
        full = _best_cpu(_stepper(copy.deepcopy(model), ids, labels), n_steps, reps)
        answers = _best_cpu(_answer_only_stepper(copy.deepcopy(model), ids, labels), n_steps, reps)
        same, loop_s, foreach_s = _foreach_identical(model, ids, labels, n_steps)
        out[name] = {"step_cpu_s": full, "answer_only_step_cpu_s": answers, "answer_only_speed_up": full / answers,
                     "adamw_loop_s": loop_s, "adamw_foreach_s": foreach_s,
                     "foreach_speed_up": loop_s / foreach_s, "foreach_bit_identical": same}
        print(f"{name}: logits only at the answers {full * 1e3:.1f} -> {answers * 1e3:.1f} ms "
              f"({full / answers:.2f}x); AdamW foreach {loop_s * 1e3:.1f} -> {foreach_s * 1e3:.1f} ms "
              f"({loop_s / foreach_s:.2f}x, bit-identical: {same})", flush=True)
    return out


def make_all_at_floor(make_all_s: float, training: dict) -> dict:
    """``make all``'s measured seconds with its training replaced by the floor, and by 1.3x the floor
    (the issue's target): everything that is not training kept at its measured seconds."""
    rest = make_all_s - training["wall_s"]
    out = {"make_all_s": make_all_s, "not_training_s": rest,
           "at_floor_s": rest + training["floor_wall_s"], "at_1.3x_floor_s": rest + 1.3 * training["floor_wall_s"]}
    print(f"make all took {make_all_s:,.0f} s, {rest:,.0f} s of it not training: with the training at its floor "
          f"{out['at_floor_s']:,.0f} s ({out['at_floor_s'] / 60:.1f} min), at 1.3x the floor "
          f"{out['at_1.3x_floor_s']:,.0f} s ({out['at_1.3x_floor_s'] / 60:.1f} min)")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--run", type=Path, default=ROOT / "outputs" / "mini",
                    help="a finished run's output folder (default outputs/mini; skipped if it has no 02 units)")
    ap.add_argument("--compile", action=argparse.BooleanOptionalAction, default=True,
                    help="also time torch.compile (about 30 s; needs a C++ compiler)")
    ap.add_argument("--levers", action=argparse.BooleanOptionalAction, default=True,
                    help="also time the remaining levers: logits only at the answers and AdamW foreach")
    ap.add_argument("--make-all-s", type=float, default=None,
                    help="the run's measured `make all` seconds: also say what it would take with the training "
                         "at its floor")
    ap.add_argument("--levers-only", action="store_true",
                    help="time only the levers, kept beside the last results")
    args = ap.parse_args()
    load = os.getloadavg()
    last = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    if args.levers_only:
        result = last                                                        # everything else as it was
    else:
        result = {"machine": platform.platform(), "cpus": os.cpu_count(), "load_before": load, "torch_threads": 1,
                  "shapes": {k: {"rows": r, "tokens": t, "tokens_without_loss": u} for k, (r, t, u) in SHAPES.items()},
                  "peak_gflops": peak_gflops(args.reps)}
        print(f"one large matrix product (1024^3): {result['peak_gflops']:.0f} GFLOP/s", flush=True)
        result["shares"] = shares(args.steps, args.reps)
        if not list((args.run / "work" / "train_before_test").glob("*/*/lr=*/unit.json")):
            print(f"no floor: {args.run} has no finished 02 units (`make all` makes them)")
        else:
            result["run"] = str(args.run)
            result["floor"] = floor(args.run, result["shares"], result["peak_gflops"])
            if args.make_all_s:
                result["make_all"] = make_all_at_floor(args.make_all_s, result["floor"]["all training"])
        if args.compile:
            result["compile"] = compiled(args.steps, args.reps)
        elif "compile" in last:
            result["compile"] = last["compile"]                              # kept from the last run with it
    if args.levers or args.levers_only:
        result["levers"] = levers(args.steps, args.reps)
        result["levers"]["load_before"] = load
    elif "levers" in last:
        result["levers"] = last["levers"]
    (result["levers"] if args.levers_only else result)["load_after"] = os.getloadavg()
    atomic_write_json(RESULTS, result)
    after = (result["levers"] if args.levers_only else result)["load_after"]
    print(f"written {RESULTS.relative_to(ROOT)}; load average {load[0]:.1f} -> {after[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
