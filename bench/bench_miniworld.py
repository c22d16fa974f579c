"""Speed of the mini world: generation, the zoo's pre-training, and `make all` first and second run.

    python bench/bench_miniworld.py            # world + zoo only (minutes)
    python bench/bench_miniworld.py --full     # `python -m runner.run mini --with-published` twice
                                               # into a fresh outputs folder (~30 minutes)

Writes bench/results/miniworld.json and prints the numbers. The full run uses a fresh
``TBT_OUTPUTS`` folder under .cache/ (never outputs/), so it measures a first run from nothing:
world build, zoo pre-training, fine-tuning sweep, evaluations and every notebook.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
RESULTS = ROOT / "bench" / "results" / "miniworld.json"


def _env(outputs: Path) -> dict:
    env = dict(os.environ, TBT_OUTPUTS=str(outputs), HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1",
               TOKENIZERS_PARALLELISM="false", MPLBACKEND="Agg")
    for key, sub in (("HF_HOME", "hf"), ("MPLCONFIGDIR", "matplotlib"), ("IPYTHONDIR", "ipython"),
                     ("JUPYTER_CONFIG_DIR", "jupyter/config"), ("JUPYTER_DATA_DIR", "jupyter/data"),
                     ("JUPYTER_RUNTIME_DIR", "jupyter/runtime")):
        env.setdefault(key, str(ROOT / ".cache" / sub))
    if not env.get("HARMONY_DATA") and (ROOT.parent / "shared" / "data").is_dir():
        env["HARMONY_DATA"] = str(ROOT.parent / "shared" / "data")
    return env


def bench_world_and_zoo(outputs: Path) -> dict:
    """Time the prepare hook of the mini profile (world + 12 models), then its cached second call."""
    code = ("import json, time; from lib.miniworld import zoo; t = time.time(); zoo.prepare('mini'); "
            "a = time.time() - t; t = time.time(); zoo.prepare('mini'); "
            "print(json.dumps({'first': a, 'second': time.time() - t}))")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=_env(outputs), check=True,
                          capture_output=True, text=True)
    times = json.loads(proc.stdout.strip().splitlines()[-1])
    return {"prepare_first_s": times["first"], "prepare_second_s": times["second"], **zoo_seconds(outputs)}


def zoo_seconds(outputs: Path) -> dict:
    records = [json.loads(p.read_text()) for p in (outputs / "mini" / "work" / "models").glob("*.recipe.json")]
    return {"models": len(records), "zoo_build_s": round(sum(r["build_seconds"] for r in records), 1),
            "pretrain_s_per_model": {r["recipe"]["name"]: round(r["build_seconds"], 1) for r in records}}


def bench_make_all(outputs: Path) -> dict:
    """Wall time of `python -m runner.run mini --with-published`, first run from nothing and second run."""
    out = {}
    for label in ("first", "second"):
        t0 = time.time()
        subprocess.run([sys.executable, "-m", "runner.run", "mini", "--with-published"], cwd=ROOT,
                       env=_env(outputs), check=True)
        out[f"make_all_{label}_s"] = time.time() - t0
        log = json.loads((outputs / "mini" / "run_log.json").read_text())
        out[f"stages_{label}"] = {k: round(v["seconds"], 1) for k, v in log["stages"].items()}
        pub = outputs / "published" / "run_log.json"
        if pub.exists():
            out[f"published_{label}_s"] = round(json.loads(pub.read_text())["total_seconds"], 1)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--full", action="store_true", help="also time the whole mini profile, twice")
    ap.add_argument("--keep", action="store_true", help="keep the temporary outputs folder")
    args = ap.parse_args()
    outputs = Path(tempfile.mkdtemp(prefix="bench-mini-", dir=ROOT / ".cache"))
    try:
        result = {"machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                              "platform": platform.platform()}}
        if args.full:          # the first run starts from nothing: world, zoo, every stage
            result.update(bench_make_all(outputs))
            result.update(zoo_seconds(outputs))
        else:
            result.update(bench_world_and_zoo(outputs))
        result["measured_at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        previous = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
        keep = ("make_all", "stages_") if not args.full else ("prepare_",)   # the other mode's numbers
        result.update({k: v for k, v in previous.items() if k.startswith(keep) and k not in result})
        RESULTS.write_text(json.dumps(result, indent=1) + "\n")
        print(json.dumps(result, indent=1))
    finally:
        if not args.keep:
            shutil.rmtree(outputs, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
