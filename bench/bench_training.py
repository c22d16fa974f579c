"""Speed of the mini world's training, before and after issue 18 (world v5): `python bench/bench_training.py`.

Measures on this machine, one torch thread per process, the CPU time of each step (so other work
on the machine counts less), best of ``--reps`` repetitions, for the four capacity levels of the zoo
(llama, the family with the most parameters per level):

- pre-training: tokens per CPU second of a step of 16 windows of 64 tokens (the trunk's step);
- fine-tuning one benchmark: tokens per CPU second of a step of 16 examples of 48 tokens, as v4
  ran it (a LoRA adapter r16 on every linear layer, through peft) and as v5 runs it (every
  parameter trained, no adapter);
- the fixed cost of a job: the CPU seconds a fresh process spends importing torch, transformers,
  peft, lm-eval and submitit before its first step (``submitit_local`` pays it for every model,
  ``processes`` once per worker).

Writes bench/results/training.json and prints the numbers.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
RESULTS = ROOT / "bench" / "results" / "training.json"

from bench import shapes  # noqa: E402
from lib.pipeline.device import pin_arithmetic  # noqa: E402

pin_arithmetic()


def _tokenizer():
    return shapes.tokenizer("llama")


def _model(tok, size: str):
    return shapes.model("llama", size)[1]


def _time_steps(model, ids, labels, steps: int, reps: int) -> float:
    """Best CPU seconds per training step over ``reps`` runs of ``steps`` steps (after a warm-up)."""
    import torch

    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-4)
    model.train()
    best = float("inf")
    for rep in range(reps + 1):
        t0 = time.process_time()
        for _ in range(steps):
            loss = model(input_ids=ids, labels=labels).loss
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            opt.step()
            opt.zero_grad(set_to_none=True)
        if rep:                                    # the first run warms up
            best = min(best, (time.process_time() - t0) / steps)
    return best


def steps(reps: int, n_steps: int) -> dict:
    import torch
    from peft import LoraConfig, get_peft_model

    from lib.pipeline.device import setup_torch

    setup_torch()
    tok = _tokenizer()
    gen = torch.Generator().manual_seed(0)
    out = {}
    for size in ("xs", "s", "m", "l"):
        window = torch.randint(5, len(tok), (16, 64), generator=gen)
        pre = _time_steps(_model(tok, size), window, window, n_steps, reps)
        example = torch.randint(5, len(tok), (16, 48), generator=gen)
        labels = example.clone()
        labels[:, :40] = -100                      # the loss on the answer, as the mini recipe trains
        lora = get_peft_model(_model(tok, size), LoraConfig(r=16, lora_alpha=64, lora_dropout=0.1,
                                                            target_modules="all-linear", task_type="CAUSAL_LM"))
        t_lora = _time_steps(lora, example, labels, n_steps, reps)
        t_full = _time_steps(_model(tok, size), example, labels, n_steps, reps)
        out[size] = {"pretrain_tokens_per_cpu_s": 16 * 64 / pre,
                     "finetune_lora_tokens_per_cpu_s": 16 * 48 / t_lora,
                     "finetune_full_tokens_per_cpu_s": 16 * 48 / t_full,
                     "full_over_lora_speed": t_lora / t_full}
        print(f"{size}: pre-training {out[size]['pretrain_tokens_per_cpu_s']:,.0f} tokens/CPU s; fine-tuning "
              f"LoRA {out[size]['finetune_lora_tokens_per_cpu_s']:,.0f}, full "
              f"{out[size]['finetune_full_tokens_per_cpu_s']:,.0f} ({out[size]['full_over_lora_speed']:.2f}x)",
              flush=True)
    return out


def job_start(reps: int) -> dict:
    """CPU seconds of a fresh interpreter importing what a job imports, best of ``reps``."""
    code = ("import time, resource; import torch, transformers, peft, submitit, lm_eval.evaluator, "
            "lm_eval.models.huggingface; r = resource.getrusage(resource.RUSAGE_SELF); print(r.ru_utime + r.ru_stime)")
    times = []
    for _ in range(reps):
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                              env={**os.environ, "HF_HUB_OFFLINE": "1"})
        times.append(float(proc.stdout.strip().splitlines()[-1]))
    print(f"a job's imports: {min(times):.1f} CPU s (best of {reps})", flush=True)
    return {"import_cpu_s": min(times), "all": times}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--steps", type=int, default=20)
    args = ap.parse_args()
    load = os.getloadavg()
    result = {"machine": platform.platform(), "cpus": os.cpu_count(), "load_before": load,
              "torch_threads": 1, "steps": steps(args.reps, args.steps), "job_start": job_start(args.reps),
              "load_after": os.getloadavg()}
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=1) + "\n")
    print(f"written {RESULTS.relative_to(ROOT)} (load average {load[0]:.1f} before, "
          f"{result['load_after'][0]:.1f} after)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
