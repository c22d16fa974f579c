"""Speed of the analysis half on the published data: `python bench/bench_analysis.py`.

1. Notebooks: `python -m runner.run published --force --stages 04 05 06` REPEATS times, each in a scratch
   outputs folder (fresh store, so the import is included); wall time of each run and of each
   notebook (papermill, kernel start included, from run_log.json) at the notebooks' default of
   1,000 bootstrap draws. Target (issues 2 and 11): each notebook < 20 s.
2. Report functions in this process (no kernel, no figures), REPEATS + 1 times: agreement_report,
   perplexity_report and pca_report with 1,000 draws, and the same with 1 draw (the cost of
   everything but the resampling).
3. The vectorised Kendall tau against a Python double loop: tau-b of the 276 benchmark pairs of the
   published train-before-test matrix over 1,000 bootstrap draws of its 61 models, by
   `lib.analysis.uncertainty.weighted_tau` and by scipy.stats.kendalltau per (draw, pair) (timed on
   LOOP_DRAWS draws and scaled to 1,000; the two agree to 1e-12 on those draws).
4. With BENCH_FULL=1 (default), the whole published profile once (07 BenchAlign included).
5. With BENCH_BASELINE=<git ref> (e.g. the commit before issue 11), the notebooks 04-06 of that
   ref (its lib/, notebooks/ and params/ from `git archive`, put first on PYTHONPATH) run in
   turn with the current ones, REPEATS times each, so the cost of this issue's additions is a
   ratio measured under the same load.

Writes bench/results/analysis.json and prints the numbers. Needs HARMONY_DATA (or `make data`).
The machine is shared: `load_avg_1min_before` is recorded with every run; compare numbers taken in
one run of this script.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REPEATS = int(os.environ.get("BENCH_REPEATS", "2"))
FULL = os.environ.get("BENCH_FULL", "1") == "1"
BASELINE = os.environ.get("BENCH_BASELINE", "")
LOOP_DRAWS = int(os.environ.get("BENCH_LOOP_DRAWS", "20"))
N_BOOT = 1000
STAGES = ("04_rank_agreement", "05_perplexity", "06_pca")
TARGETS = {"notebook_s": 20.0, "published_run_s": 120.0}   # seconds


def notebooks(stages: list[str] | None, env: dict, code: Path = ROOT) -> dict:
    """One `runner.run published --force` in a scratch outputs folder, of the checkout at ``code``."""
    from lib import store

    with tempfile.TemporaryDirectory(prefix="bench-analysis-") as out:
        env["TBT_OUTPUTS"] = out
        if code != ROOT:                  # the kernel inherits PYTHONPATH: that checkout's lib comes first
            env["PYTHONPATH"] = str(code)
            env["TBT_PARAMS"] = str(code / "params")
        load_before = os.getloadavg()[0]
        cmd = [sys.executable, "-m", "runner.run", "published", "--force"] + (["--stages", *stages] if stages else [])
        t0 = time.perf_counter()
        subprocess.run(cmd, cwd=code, env=env, check=True, stdout=subprocess.DEVNULL)
        total = time.perf_counter() - t0
        log = json.loads((Path(out) / "published" / "run_log.json").read_text())
        imported = json.loads((Path(out) / "published" / "store" / "_meta" / "published_import.json").read_text())
        t1 = time.perf_counter()
        n = len(store.load(Path(out) / "published" / "store"))
        load_s = time.perf_counter() - t1
    return {"run_s": total, "import_s": imported["seconds"], "store_load_s": load_s, "results": n,
            "load_avg_1min_before": load_before, **{f"{s}_s": v["seconds"] for s, v in log["stages"].items()}}


def reports(root: Path) -> dict:
    """Seconds of each report function with N_BOOT draws and with one draw, in this process."""
    from lib import store
    from lib.analysis import agreement, perplexity, structure

    df = store.load(root)
    calls = {"agreement_report": lambda n: agreement.agreement_report(df, root, n_boot=n, work=root.parent / "work"),
             "perplexity_report": lambda n: perplexity.perplexity_report(df, root, n_boot=n),
             "pca_report": lambda n: structure.pca_report(df, root, n_boot=n)}
    out = {"load_avg_1min_before": os.getloadavg()[0]}
    for name, call in calls.items():
        call(1)                                               # warm imports and caches
        for n in (N_BOOT, 1):
            times = []
            for _ in range(REPEATS + 1):
                t0 = time.perf_counter()
                call(n)
                times.append(time.perf_counter() - t0)
            out[f"{name}_{n}_draws_s"] = min(times)
    return out


def tau_loop_vs_vectorised(root: Path) -> dict:
    import numpy as np
    from scipy import stats

    from lib import store
    from lib.analysis import agreement, uncertainty

    df = store.load(root)
    benchmarks, _ = agreement.split_benchmarks(sorted(df["benchmark"].unique()), root)
    x = store.matrix(df, store.TBT, benchmarks).to_numpy(float)
    k = x.shape[1]
    pairs = [(a, b) for a in range(k) for b in range(a + 1, k)]
    w = uncertainty.draws(len(x), N_BOOT, seed=0)
    times = []
    for _ in range(REPEATS + 1):
        t0 = time.perf_counter()
        taus = uncertainty.weighted_tau(x, pairs, w)
        times.append(time.perf_counter() - t0)
    t0 = time.perf_counter()
    worst = 0.0
    for d in range(LOOP_DRAWS):
        rows = np.repeat(np.arange(len(x)), w[d].astype(int))
        for j, (a, b) in enumerate(pairs):
            tau = stats.kendalltau(x[rows, a], x[rows, b], variant="b").statistic
            worst = max(worst, abs(tau - taus[d, j]))
    loop = (time.perf_counter() - t0) * N_BOOT / LOOP_DRAWS
    return {"pairs": len(pairs), "models": len(x), "draws": N_BOOT, "vectorised_s": min(times),
            "python_loop_s_scaled": loop, "loop_draws_timed": LOOP_DRAWS, "speedup": loop / min(times),
            "max_abs_difference": worst}


def main() -> int:
    sys.path.insert(0, str(ROOT))
    from lib import paths, published

    try:
        paths.data_dir("lm-harmony/all_results.json")
    except paths.DataMissing as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "MPLBACKEND": "Agg"}

    runs, base_runs = [], []
    with tempfile.TemporaryDirectory(prefix="bench-baseline-") as base:
        if BASELINE:
            archive = subprocess.run(["git", "archive", BASELINE, "lib", "notebooks", "params", "pyproject.toml"],
                                     cwd=ROOT, check=True, capture_output=True).stdout
            subprocess.run(["tar", "-x", "-C", base], input=archive, check=True)
        for i in range(REPEATS):
            runs.append(notebooks([s[:2] for s in STAGES], dict(env)))
            print(f"analysis run {i + 1}/{REPEATS}: " + ", ".join(f"{k} {v:.1f}" for k, v in runs[-1].items()
                                                                 if isinstance(v, float)), flush=True)
            if BASELINE:
                base_runs.append(notebooks([s[:2] for s in STAGES], dict(env), Path(base)))
                print(f"baseline {BASELINE} run {i + 1}/{REPEATS}: " + ", ".join(
                    f"{k} {v:.1f}" for k, v in base_runs[-1].items() if isinstance(v, float)), flush=True)
    with tempfile.TemporaryDirectory(prefix="bench-analysis-") as out:
        os.environ["TBT_OUTPUTS"] = out
        paths.OUTPUTS = Path(out)
        published.import_store("published")
        root = paths.store_dir("published")
        in_process = reports(root)
        print("report functions: " + ", ".join(f"{k} {v:.2f}" for k, v in in_process.items()), flush=True)
        tau = tau_loop_vs_vectorised(root)
        print(f"tau, {tau['pairs']} pairs x {tau['draws']} draws: vectorised {tau['vectorised_s']:.2f} s, "
              f"Python loop {tau['python_loop_s_scaled']:.0f} s (scaled from {LOOP_DRAWS} draws): "
              f"{tau['speedup']:.0f}x", flush=True)
    full = notebooks(None, dict(env)) if FULL else None
    if full:
        print("full published run: " + ", ".join(f"{k} {v:.1f}" for k, v in full.items() if isinstance(v, float)),
              flush=True)
    best = {k: min(r[k] for r in runs) for k in runs[0] if k.endswith("_s")}
    baseline = None
    if base_runs:
        base_best = {k: min(r[k] for r in base_runs) for k in base_runs[0] if k.endswith("_s")}
        baseline = {"ref": BASELINE, "runs": base_runs, "best": base_best,
                    "ratio_best": {s: best[f"{s}_s"] / base_best[f"{s}_s"] for s in STAGES},
                    "ratio_median": {s: sorted(a[f"{s}_s"] / b[f"{s}_s"] for a, b in zip(runs, base_runs))[
                        len(runs) // 2] for s in STAGES}}
    meets = {"notebooks": all(best[f"{s}_s"] < TARGETS["notebook_s"] for s in STAGES),
             "analysis_run": best["run_s"] < TARGETS["published_run_s"]}
    if full:
        meets["full_published_run"] = full["run_s"] < TARGETS["published_run_s"]
    result = {
        "what": "python -m runner.run published --force [--stages 04 05 06] in fresh scratch outputs (import "
                "included); per-notebook seconds from run_log.json (papermill + kernel start); notebooks at their "
                f"default of {N_BOOT} bootstrap draws; report functions and the tau micro-benchmark in-process "
                "(best of the repeats)",
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()},
        "repeats": REPEATS, "n_boot": N_BOOT, "analysis_runs": runs, "best_analysis": best, "baseline": baseline,
        "report_functions": in_process, "tau_bootstrap": tau, "full_run": full,
        "targets": TARGETS, "meets_targets": meets,
    }
    path = ROOT / "bench" / "results" / "analysis.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({"best_analysis": {k: round(v, 2) for k, v in best.items()},
                      "report_functions": {k: round(v, 2) for k, v in in_process.items()},
                      "tau_speedup": round(tau["speedup"]), "meets_targets": meets,
                      "baseline_ratio_best": baseline and {k: round(v, 2) for k, v in baseline["ratio_best"].items()}},
                     indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
