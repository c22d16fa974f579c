"""One figure style for every notebook; figures saved as PDF (paper) and PNG (review)."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import seaborn as sns

PROTOCOL_LABELS = {"direct_eval": "Direct evaluation", "train_before_test": "Train-before-test"}
PROTOCOL_COLORS = {"direct_eval": "#c44e52", "train_before_test": "#4c72b0"}
CATEGORY_ORDER = ["Language Understanding", "Commonsense Reasoning", "Question Answering",
                  "Physics/Biology/Chemistry", "Math", "Medicine"]
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


def savefig(fig, out_dir: str | Path, name: str, close: bool = False) -> list[Path]:
    """Save ``fig`` as ``<name>.pdf`` and ``<name>.png`` in ``out_dir``; returns both paths."""
    out_dir = Path(out_dir)
    (out_dir / "figures").mkdir(parents=True, exist_ok=True)
    written = []
    for ext in ("pdf", "png"):
        path = out_dir / "figures" / f"{name}.{ext}"
        fig.savefig(path)
        written.append(path)
    if close:
        plt.close(fig)
    return written
