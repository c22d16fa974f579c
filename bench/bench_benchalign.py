"""Speed and memory of BenchAlign fits: the real leaderboard data and a paper-scale synthetic fit.

    .venv/bin/python bench/bench_benchalign.py [--steps 500] [--threads 1] [--skip-real] [--folds 5] [--out F]

1. Real data (needs $HARMONY_DATA): load MuSR + MATH-hard items with the IFEval target (428 models x
   1,650 items); BenchAlign's cross-validated protocol on the source models (<13B, 266 models; 5 folds x
   5 seeds + the refit, run side by side: 26 columns) and the full comparison of notebook 07 (every
   method, 5 seeds).
2. Paper scale: a synthetic two-skill 2PL world of 4,364 models x 21,606 items (0/1), the target a noisy
   function of one of two skills. (a) ``--steps`` (500) full-batch RankNet steps of one fit on 80% of the
   models, validated on the rest every 10 steps; (b) the same number of steps of the protocol on all of
   them: ``--folds`` fold columns and the refit column side by side. Loss, gradient and Adam update are
   exact and full-batch; memory stays O(K M + block K C): no K^2 x M tensor.

Writes bench/results/benchalign.json and prints the numbers (peak memory = max resident set size;
``cpu_s`` = CPU time of the process, which other work on a shared machine inflates less than wall time).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import sys
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from lib import paths  # noqa: E402
from lib.benchalign import data, methods, rank, studies  # noqa: E402
from lib.util import atomic_write_json


def peak_rss_gib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20      # kB -> GiB (Linux)


def bench_real() -> dict:
    t0 = time.perf_counter()
    d = data.load_oll(["musr", "openllm_math"], "ifeval")
    t_load = time.perf_counter() - t0
    sp = methods.split_by_size(d, 13.0, {"30B+": 30.0, "70B+": 70.0})
    cfg = methods.Config()
    t0 = time.perf_counter()
    fits = methods.cv_fits(d, [rank.Task(sp.source, s) for s in range(5)], cfg)
    t_fit = time.perf_counter() - t0
    res = methods.evaluate(np.mean([f.scores(d.X) for f in fits], axis=0), d.target, sp.groups)
    t0 = time.perf_counter()
    studies.compare(d, sp, methods.METHODS, seeds=5, cfg=cfg)
    t_compare = time.perf_counter() - t0
    steps = fits[0].steps_run
    return {"shape": list(d.X.shape), "source_models": int(len(sp.source)), "load_s": round(t_load, 3),
            "protocol_columns": 5 * cfg.folds + 1, "protocol_s": round(t_fit, 2), "protocol_steps": steps,
            "chosen_steps": [f.step for f in fits], "ms_per_step": round(1000 * t_fit / max(steps, 1), 2),
            "test_mean_of_seed_scores": {g: {k: round(v, 3) for k, v in r.items()} for g, r in res.items()},
            "compare_all_methods_five_seeds_s": round(t_compare, 1), "peak_rss_gib": round(peak_rss_gib(), 2)}


def synthetic(K: int, M: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """0/1 responses of a two-skill 2PL world (float32, built in chunks): 30% of the items measure
    the skill the target ranks by, 70% a nuisance skill, so plain accuracy ranks only moderately."""
    rng = np.random.default_rng(seed)
    skill = rng.normal(size=(K, 2)).astype(np.float32)
    which = (rng.random(M) < 0.3).astype(int)            # 1: item measures the target skill
    a = rng.lognormal(0.0, 0.3, size=M).astype(np.float32)
    b = rng.normal(size=M).astype(np.float32)
    X = np.empty((K, M), dtype=np.float32)
    for lo in range(0, K, 512):
        hi = min(K, lo + 512)
        theta = np.where(which[None, :] == 1, skill[lo:hi, :1], skill[lo:hi, 1:])
        p = 1.0 / (1.0 + np.exp(-a[None, :] * (theta - b[None, :])))
        X[lo:hi] = rng.random((hi - lo, M), dtype=np.float32) < p
    y = skill[:, 0] + 0.3 * rng.normal(size=K).astype(np.float32)
    return X, y


def bench_paper_scale(K: int, M: int, steps: int, folds: int) -> dict:
    t0 = time.perf_counter()
    X, y = synthetic(K, M)
    t_gen = time.perf_counter() - t0
    rss_data = peak_rss_gib()
    n_val = K // 5
    train = np.zeros((K, 1), dtype=bool)
    train[n_val:] = True
    t0, c0 = time.perf_counter(), time.process_time()
    for cp in rank.descend(X, y, train, ~train, eval_every=10):
        if cp.step >= steps:
            break
    t_one, c_one = time.perf_counter() - t0, time.process_time() - c0
    s = X[:n_val] @ cp.weights()[0]
    one = {"steps": steps, "fit_s": round(t_one, 1), "cpu_s": round(c_one, 1),
           "ms_per_step": round(1000 * t_one / steps, 1),
           "val_spearman": round(rank.spearman(s, y[:n_val]), 4),
           "val_spearman_uniform": round(rank.spearman(X[:n_val].mean(axis=1), y[:n_val]), 4),
           "pairs_per_step": int((y[n_val:, None] > y[None, n_val:]).sum()),
           "peak_rss_gib": round(peak_rss_gib(), 2)}
    t0, c0 = time.perf_counter(), time.process_time()
    fit = rank.fit(X, y, folds=folds, max_steps=steps, patience=steps)
    t_cv, c_cv = time.perf_counter() - t0, time.process_time() - c0
    cv = {"columns": folds + 1, "steps": fit.steps_run, "fit_s": round(t_cv, 1), "cpu_s": round(c_cv, 1),
          "ms_per_step": round(1000 * t_cv / max(fit.steps_run, 1), 1), "chosen_step": fit.step,
          "peak_rss_gib": round(peak_rss_gib(), 2)}
    return {"shape": [K, M], "generate_s": round(t_gen, 1), "one_fit": one, "protocol": cv,
            "x_gib": round(X.nbytes / 2**30, 2), "k2m_tensor_would_be_gib": round(K * K * M * 4 / 2**30),
            "peak_rss_after_data_gib": round(rss_data, 2)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=500, help="full-batch steps of the paper-scale fit")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (1 is fastest on a busy 2-core machine)")
    ap.add_argument("--models", type=int, default=4364)
    ap.add_argument("--items", type=int, default=21606)
    ap.add_argument("--folds", type=int, default=5, help="folds of the paper-scale protocol run")
    ap.add_argument("--skip-real", action="store_true")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "benchalign.json"), help="results file")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    out = {"machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                       "torch": torch.__version__}, "threads": args.threads,
           "load_average_at_start": [round(x, 2) for x in os.getloadavg()]}
    if not args.skip_real:
        if paths.has_data(data.OLL_DIR):
            out["real"] = bench_real()
            print("real data:", json.dumps(out["real"]), flush=True)
        else:
            out["real"] = {"skipped": "published data not found (set HARMONY_DATA)"}
    out["paper_scale"] = bench_paper_scale(args.models, args.items, args.steps, args.folds)
    print("paper scale:", json.dumps(out["paper_scale"]), flush=True)
    atomic_write_json(Path(args.out), out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
