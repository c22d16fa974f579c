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
  decay and the gradient clipping of ``lib.pipeline.training.lora_epochs``;
  ``tokens`` are every token of the padded batches, as in ``bench_training.py``;
- whether the stacked runs are bit-identical to the sequential ones: every step's loss of every
  run and every final weight, after ``--steps`` steps, for both ways a stacked linear layer can
  multiply (``loop``: one product per run with the sequential kernel; ``bmm``: one batched product).

Writes bench/results/batched.json and prints a table.
"""

from __future__ import annotations

import argparse
import copy
import functools
import os
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
RESULTS = ROOT / "bench" / "results" / "batched.json"

from lib.pipeline.device import pin_arithmetic  # noqa: E402
from lib.util import atomic_write_json  # noqa: E402

pin_arithmetic()

LRS = (1e-4, 3e-4, 1e-3, 3e-3)
ROWS, MIN_LEN, MAX_LEN, ANSWER = 8, 12, 48, 8


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
        entry = {"sequential_tokens_per_cpu_s": k * tokens / best_seq}
        for mode in modes:
            entry[mode] = {"tokens_per_cpu_s": k * tokens / best[mode], "speed_up": best_seq / best[mode],
                           **check[mode]}
        row["k"][str(k)] = entry
        said = "; ".join(f"{m} {entry[m]['tokens_per_cpu_s']:,.0f} ({entry[m]['speed_up']:.2f}x, {_verdict(entry[m])})"
                         for m in modes)
        print(f"{family}-{size} k={k}: sequential {entry['sequential_tokens_per_cpu_s']:,.0f} tokens/CPU s; "
              f"stacked {said}", flush=True)
    return row


def main() -> int:
    from lib.miniworld import zoo

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--family", default="llama", help="llama, gpt2, gpt_neox or all")
    ap.add_argument("--sizes", nargs="*", default=list(zoo.SIZES))
    ap.add_argument("--steps", type=int, default=20, help="optimiser steps per run (and the bit-identity sample)")
    ap.add_argument("--reps", type=int, default=2, help="timings per configuration; the best counts")
    ap.add_argument("--ks", nargs="*", type=int, default=[2, 3, 4])
    ap.add_argument("--modes", nargs="*", default=["loop", "bmm"])
    args = ap.parse_args()
    families = list(zoo.VOCAB) if args.family == "all" else [args.family]
    load = os.getloadavg()
    result = {"machine": platform.platform(), "cpus": os.cpu_count(), "load_before": load, "torch_threads": 1,
              "steps": args.steps, "reps": args.reps, "lrs": list(LRS),
              "shape": {"rows": ROWS, "tokens": [MIN_LEN, MAX_LEN], "answer_tokens": ANSWER}, "runs": {}}
    previous = {}
    if RESULTS.exists():
        import json

        previous = json.loads(RESULTS.read_text()).get("runs", {})
    for family in families:
        for size in args.sizes:
            result["runs"][f"{family}-{size}"] = measure(family, size, args.steps, args.reps, args.ks, args.modes)
    result["runs"] = {**previous, **result["runs"]}              # other families measured before are kept
    result["load_after"] = os.getloadavg()
    atomic_write_json(RESULTS, result)
    print(f"written {RESULTS.relative_to(ROOT)}; load average {load[0]:.1f} -> {result['load_after'][0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
