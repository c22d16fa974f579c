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
- With ``--run`` (a finished run's output folder, default ``outputs/mini``): the floor of that run's training, i.e. its
  measured training CPU seconds (the zoo's ``pretrain.json`` files at the pre-training shape, its
  last phase batching 16 documents of up to 64 tokens too; 02's ``unit.json`` files at the
  fine-tuning shape) times the matrix-product share of their (family, size), over the two worker
  processes.
- With ``--compile`` (the default): the step time of the largest llama under ``torch.compile`` (inductor, which
  fuses the element-wise kernels) against eager, after its compilation; needs a C++ compiler.

Writes bench/results/compute_floor.json and prints the numbers.
"""

from __future__ import annotations

import argparse
import functools
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

from lib.pipeline.device import pin_arithmetic  # noqa: E402
from lib.util import atomic_write_json  # noqa: E402

pin_arithmetic()

GEMMS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm")
SHAPES = {"pretrain": (16, 64, 0), "finetune": (8, 48, 40)}   # rows, tokens, tokens without loss
WORKERS = 2                                                    # `executor: processes`, one per core


@functools.cache
def _tokenizer(family: str):
    from lib.miniworld import zoo
    from lib.pipeline import tiny

    texts = [f"the bako{i} lives in the desert and eats fish . it drinks milk ." for i in range(2000)]
    return tiny.train_tokenizer(texts, zoo.VOCAB[family])


def _model(family: str, size: str):
    from lib.miniworld import zoo
    from lib.pipeline import tiny

    tok = _tokenizer(family)
    spec = zoo.SIZES[size]
    return tok, tiny.make_model(family, tok, d_model=spec["d_model"], n_layers=spec["n_layers"],
                                n_heads=spec["n_heads"])


def _batch(tok, shape: str):
    import torch

    rows, tokens, unscored = SHAPES[shape]
    ids = torch.randint(5, len(tok), (rows, tokens), generator=torch.Generator().manual_seed(0))
    labels = ids.clone()
    labels[:, :unscored] = -100
    return ids, labels


def _stepper(model, ids, labels):
    import torch

    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-4)
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


def _gemm_cpu(step, n_steps: int) -> tuple[float, float]:
    """CPU seconds and floating-point operations per step of the matrix products, from a profiled run."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], with_flops=True) as prof:
        for _ in range(n_steps):
            step()
    events = [e for e in prof.key_averages() if e.key in GEMMS]
    return (sum(e.self_cpu_time_total for e in events) / 1e6 / n_steps,
            sum(e.flops for e in events) / n_steps)


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
                gemm, flops = _gemm_cpu(step, n_steps)
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


def floor(run: Path, share: dict, peak: float) -> dict:
    """The run's training CPU seconds and their matrix-product floor, per part of the run: the
    matrix products at the speed measured at these shapes, and at ``peak`` GFLOP/s."""
    parts = {"zoo pre-training (trunks)": [], "zoo last phase (twins and bases)": [], "02 fine-tuning": []}
    for path in glob.glob(str(run / "work" / "models" / "*" / "pretrain.json")):
        name = Path(path).parent.name
        stats = json.loads(Path(path).read_text())
        key = "zoo pre-training (trunks)" if "steps" in stats else "zoo last phase (twins and bases)"
        parts[key].append((stats["seconds"], share[_family_size(name)]["pretrain"]))
    for path in glob.glob(str(run / "work" / "train_before_test" / "*" / "*" / "lr=*" / "unit.json")):
        name = Path(path).parents[2].name
        unit = json.loads(Path(path).read_text())
        parts["02 fine-tuning"].append((unit["seconds"], share[_family_size(name)]["finetune"]))
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
    t = out["all training"]
    print(f"all training: {t['wall_s']:,.0f} s over {WORKERS} workers; with every operation but the matrix "
          f"products free, {t['floor_wall_s']:,.0f} s ({t['largest_speed_up']:.2f}x faster), and with them "
          f"at the peak rate too, {t['floor_wall_s_at_peak']:,.0f} s ({t['largest_speed_up_at_peak']:.2f}x)")
    return out


def compiled(n_steps: int, reps: int) -> dict:
    import torch

    from lib.pipeline.device import setup_torch

    setup_torch()
    out = {}
    for mode in ("eager", "compile"):
        tok, model = _model("llama", "l")
        ids, labels = _batch(tok, "finetune")
        step = _stepper(torch.compile(model) if mode == "compile" else model, ids, labels)
        t0 = time.time()
        step()                                     # compiles, under torch.compile
        out[f"{mode}_first_step_s"] = time.time() - t0
        out[f"{mode}_step_cpu_s"] = _best_cpu(step, n_steps, reps)
    out["compile_speed_up"] = out["eager_step_cpu_s"] / out["compile_step_cpu_s"]
    print(f"llama-l fine-tuning step: eager {out['eager_step_cpu_s'] * 1e3:.1f} ms, torch.compile "
          f"{out['compile_step_cpu_s'] * 1e3:.1f} ms ({out['compile_speed_up']:.2f}x; compiling took "
          f"{out['compile_first_step_s']:.0f} s)")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--run", type=Path, default=ROOT / "outputs" / "mini",
                    help="a finished run's output folder (default outputs/mini; skipped if it has no 02 units)")
    ap.add_argument("--compile", action=argparse.BooleanOptionalAction, default=True,
                    help="also time torch.compile (about 30 s; needs a C++ compiler)")
    args = ap.parse_args()
    load = os.getloadavg()
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
    if args.compile:
        result["compile"] = compiled(args.steps, args.reps)
    result["load_after"] = os.getloadavg()
    atomic_write_json(RESULTS, result)
    print(f"written {RESULTS.relative_to(ROOT)}; load average {load[0]:.1f} -> {result['load_after'][0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
