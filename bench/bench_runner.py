"""What the runner's kernel costs: `python bench/bench_runner.py`.

Executes one small notebook (imports lib, resolves its stage, writes a summary; what every stage
does around its real work) through papermill REPEATS times with papermill's default kernel
manager (plain TCP, SIGINT at shutdown) and with the runner's (`runner.kernel.kernel_manager_class`:
CurveZMQ-encrypted channels, no SIGINT at shutdown), alternating the two so that a busy machine
slows both alike. Reports the wall time per notebook (kernel start and shutdown included), the
median of each and their ratio, and in how many runs the kernel printed each console line. Writes
bench/results/runner.json.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REPEATS = int(os.environ.get("BENCH_REPEATS", "5"))
BODY = """
from lib import notebook, outputs, params
ctx = notebook.stage("01_demo", globals())
outputs.write_summary(ctx.out, {"n_squared": n * n})
"""
CHILD = """
import sys, time
import papermill as pm
from lib import params
from runner import kernel
manager = sys.argv[1]
kw = {"kernel_manager_class": kernel.kernel_manager_class()} if manager == "runner" else {}
t0 = time.perf_counter()
pm.execute_notebook(sys.argv[2], sys.argv[3], parameters={"n": 3, "profile": "x"}, progress_bar=False,
                    kernel_name=params.KERNEL if manager == "runner" else "python3", **kw)
print(time.perf_counter() - t0)
"""


def main() -> int:
    import nbformat

    with tempfile.TemporaryDirectory(prefix="bench-runner-") as tmp:
        tmp = Path(tmp)
        (tmp / "notebooks").mkdir()
        (tmp / "params").mkdir()
        nb = nbformat.v4.new_notebook()
        p = nbformat.v4.new_code_cell('profile = "x"\nn = 1\n')
        p.metadata["tags"] = ["parameters"]
        nb.cells = [p, nbformat.v4.new_code_cell(BODY)]
        nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
        nbformat.write(nb, tmp / "notebooks" / "01_demo.ipynb")
        (tmp / "params" / "x.yaml").write_text("description: bench\nstages:\n  01_demo:\n")
        env = {**os.environ, "TBT_NOTEBOOKS": str(tmp / "notebooks"), "TBT_PARAMS": str(tmp / "params"),
               "TBT_OUTPUTS": str(tmp / "outputs"), "TBT_READS": str(tmp / "reads")}   # as under the runner
        times: dict[str, list[float]] = {"papermill_default": [], "runner": []}
        console: dict[str, dict[str, int]] = {"papermill_default": {}, "runner": {}}   # line -> runs showing it
        for i in range(REPEATS):
            for manager in ("papermill_default", "runner") if i % 2 == 0 else ("runner", "papermill_default"):
                res = subprocess.run([sys.executable, "-c", CHILD, manager, str(tmp / "notebooks" / "01_demo.ipynb"),
                                      str(tmp / "out.ipynb")], cwd=ROOT, env=env, capture_output=True, text=True,
                                     check=True)
                times[manager].append(float(res.stdout.strip().splitlines()[-1]))
                for line in {ln.split("|")[1].strip()[:60] for ln in res.stderr.splitlines()
                             if ln.startswith("[IPKernelApp]")}:
                    console[manager][line] = console[manager].get(line, 0) + 1
    med = {k: statistics.median(v) for k, v in times.items()}
    result = {
        "what": "one small notebook through papermill, kernel start and shutdown included (seconds)",
        "repeats": REPEATS, "times_s": times, "median_s": med,
        "ratio_runner_over_default": med["runner"] / med["papermill_default"],
        "kernel_console_lines": console,
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                    "load_1min": os.getloadavg()[0]},
        "when": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    out = ROOT / "bench" / "results" / "runner.json"
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: result[k] for k in ("median_s", "ratio_runner_over_default", "kernel_console_lines")},
                     indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
