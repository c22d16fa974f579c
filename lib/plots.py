"""One figure style for every notebook; figures saved as PDF (paper) and PNG (review)."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import seaborn as sns

from .store import DIRECT, TBT

PROTOCOL_LABELS = {DIRECT: "Direct evaluation", TBT: "Train-before-test"}
PROTOCOL_COLORS = {DIRECT: "#c44e52", TBT: "#4c72b0"}
WIDTH_SINGLE = 3.4   # inches: one column of a two-column paper
WIDTH_DOUBLE = 7.0


def use_style() -> None:
    """Apply the shared style (call once at the top of a notebook)."""
    sns.set_theme(context="paper", style="whitegrid", font_scale=1.0)
    plt.rcParams.update({
        "figure.dpi": 110, "savefig.dpi": 200, "savefig.bbox": "tight",
        "pdf.fonttype": 42, "ps.fonttype": 42,   # editable text in the PDF
        "axes.titlesize": 9, "axes.labelsize": 9, "legend.fontsize": 8,
        "xtick.labelsize": 8, "ytick.labelsize": 8, "figure.titlesize": 10,
    })


def savefig(fig, out_dir: str | Path, name: str, close: bool = False) -> None:
    """Save ``fig`` as ``figures/<name>.pdf`` and ``figures/<name>.png`` in ``out_dir`` (returns
    nothing, so a notebook cell ending with it shows the figure and no return value)."""
    folder = Path(out_dir) / "figures"
    folder.mkdir(parents=True, exist_ok=True)
    for ext in ("pdf", "png"):
        fig.savefig(folder / f"{name}.{ext}")
    if close:
        plt.close(fig)
