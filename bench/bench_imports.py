"""What each notebook's imports cost a fresh kernel: `python bench/bench_imports.py`.

For every notebook, its import lines (from its code cells) run in a fresh interpreter REPEATS times,
alternating with the same lines plus `import seaborn`: what every kernel paid while lib.plots applied
seaborn's theme (lib/paper.mplstyle holds it since; seaborn is imported only where a heat map is
drawn). Both variants run under the same load, so their difference is the number to read. Writes
bench/results/imports.json.
"""

from __future__ import annotations

import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REPEATS = int(os.environ.get("BENCH_REPEATS", "5"))
IMPORT = re.compile(r"^\s*(import \S|from \S+ import )")


def import_lines(notebook: Path) -> str:
    cells = json.loads(notebook.read_text())["cells"]
    code = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
    return "\n".join(line.strip() for line in code.splitlines() if IMPORT.match(line))


def seconds(code: str) -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, capture_output=True)
    return time.perf_counter() - t0


def main() -> int:
    rows = {}
    for nb in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        code = import_lines(nb)
        now, with_seaborn = [], []
        for _ in range(REPEATS):
            now.append(seconds(code))
            with_seaborn.append(seconds(code + "\nimport seaborn"))
        rows[nb.stem] = {"now_s": statistics.median(now), "with_seaborn_s": statistics.median(with_seaborn)}
        print(f"{nb.stem:22s} {rows[nb.stem]['now_s']:.2f} s, with seaborn {rows[nb.stem]['with_seaborn_s']:.2f} s")
    result = {"what": "median wall seconds of a fresh interpreter running a notebook's import lines",
              "repeats": REPEATS, "notebooks": rows, "load_1min_after": os.getloadavg()[0],
              "cpus": os.cpu_count(), "when": time.strftime("%Y-%m-%d %H:%M:%S")}
    (ROOT / "bench" / "results" / "imports.json").write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
