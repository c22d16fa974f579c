"""Speed of the analysis half on the published data: `python bench/bench_analysis.py`.

Runs `python -m lib.run published --force --stages 04 05 06` (the analysis half) REPEATS times and
the whole profile (every stage, including BenchAlign's 07) once, each in a scratch outputs folder
(fresh store, so the import is included), and reports the wall time of each run and of each
notebook (papermill, kernel start included, from run_log.json), plus the importer alone.
Targets (issue 2): each notebook < 20 s, the whole published run < 2 min. Writes
bench/results/analysis.json and prints the numbers. Needs HARMONY_DATA (or `make data`).
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
STAGES = ("04_rank_agreement", "05_perplexity", "06_pca")
TARGETS = {"notebook_s": 20.0, "published_run_s": 120.0}   # seconds


def main() -> int:
    sys.path.insert(0, str(ROOT))
    from lib import paths, store

    try:
        paths.data_dir("lm-harmony/all_results.json")
    except paths.DataMissing as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "MPLBACKEND": "Agg"}
    def one(stages: list[str] | None) -> dict:
        with tempfile.TemporaryDirectory(prefix="bench-analysis-") as out:
            env["TBT_OUTPUTS"] = out
            load_before = os.getloadavg()[0]
            cmd = [sys.executable, "-m", "lib.run", "published", "--force"] + (["--stages", *stages] if stages else [])
            t0 = time.perf_counter()
            subprocess.run(cmd, cwd=ROOT, env=env, check=True, stdout=subprocess.DEVNULL)
            total = time.perf_counter() - t0
            log = json.loads((Path(out) / "published" / "run_log.json").read_text())
            imported = json.loads((Path(out) / "published" / "store" / "_meta" / "published_import.json").read_text())
            t1 = time.perf_counter()
            n = len(store.load(Path(out) / "published" / "store"))
            load_s = time.perf_counter() - t1
        return {"run_s": total, "import_s": imported["seconds"], "store_load_s": load_s, "results": n,
                "load_avg_1min_before": load_before, **{f"{s}_s": v["seconds"] for s, v in log["stages"].items()}}

    runs = []
    for i in range(REPEATS):
        runs.append(one([s[:2] for s in STAGES]))
        print(f"analysis run {i + 1}/{REPEATS}: " + ", ".join(f"{k} {v:.1f}" for k, v in runs[-1].items()
                                                             if isinstance(v, float)), flush=True)
    full = one(None)
    print("full published run: " + ", ".join(f"{k} {v:.1f}" for k, v in full.items() if isinstance(v, float)),
          flush=True)
    best = {k: min(r[k] for r in runs) for k in runs[0] if k.endswith("_s")}
    result = {
        "what": "python -m lib.run published --force [--stages 04 05 06] in fresh scratch outputs (import "
                "included); per-notebook seconds from run_log.json (papermill + kernel start)",
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()},
        "repeats": REPEATS, "analysis_runs": runs, "best_analysis": best, "full_run": full, "targets": TARGETS,
        "meets_targets": {"notebooks": all(best[f"{s}_s"] < TARGETS["notebook_s"] for s in STAGES),
                          "analysis_run": best["run_s"] < TARGETS["published_run_s"],
                          "full_published_run": full["run_s"] < TARGETS["published_run_s"]},
    }
    out = ROOT / "bench" / "results" / "analysis.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({"best_analysis": {k: round(v, 2) for k, v in best.items()},
                      "full_run": {k: round(v, 2) for k, v in full.items() if isinstance(v, float)},
                      "meets_targets": result["meets_targets"]}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
