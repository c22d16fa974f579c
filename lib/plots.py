"""One figure style for every notebook; figures saved as PDF (paper) and PNG (review).

Everything a figure shares lives here, so one edit changes every figure: the page widths and the
smallest text (the rules :mod:`runner.figreview` checks), the names a reader sees (:func:`display`), one
colour per protocol and one hue per model family (sizes as its shades), legends off the data, and
saving with a caption and the notebook cell that made it (:func:`savefig`)."""

from __future__ import annotations

import colorsys
import hashlib
import pickle
import weakref
from collections.abc import Iterable
from pathlib import Path

import matplotlib.pyplot as plt
from matplotlib.colors import to_hex, to_rgb

from .store import DIRECT, REDUCED, TBT
from .util import atomic_write_bytes

WIDTH_SINGLE = 3.4   # inches: one column of a two-column paper
WIDTH_DOUBLE = 7.0   # inches: the full text width
MIN_FONT_PT = 7.0    # no text smaller than this at print size (runner.figreview checks it)

PROTOCOL_LABELS = {DIRECT: "Direct evaluation", TBT: "Train-before-test"}
# orange and dark blue: told apart in colour (also by most colour-blind readers) and in greyscale print
# (luma 146 against 69; the red and blue before were 114 and 110, one grey)
PROTOCOL_COLORS = {DIRECT: "#d9822b", TBT: "#1f4e79"}
PROTOCOL_MARKERS = {DIRECT: "o", TBT: "s"}     # where points of both protocols share a panel
FONT = {"base": 8.0, "small": 7.0, "title": 8.0, "suptitle": 9.0}
STYLE = Path(__file__).with_name("paper.mplstyle")   # seaborn's paper / whitegrid theme, as rcParams


def use_style() -> None:
    """Apply the shared style (call once at the top of a notebook)."""
    plt.style.use(STYLE)
    small, base = FONT["small"], FONT["base"]
    plt.rcParams.update({
        "figure.dpi": 110, "savefig.dpi": 200, "savefig.bbox": "tight", "savefig.pad_inches": 0.02,
        "pdf.fonttype": 42, "ps.fonttype": 42,   # editable text in the PDF
        "font.size": base, "axes.titlesize": FONT["title"], "axes.labelsize": base,
        "legend.fontsize": small, "legend.title_fontsize": small, "xtick.labelsize": small,
        "ytick.labelsize": small, "figure.titlesize": FONT["suptitle"], "figure.labelsize": base,
        "axes.titlepad": 4.0, "legend.borderaxespad": 0.3, "legend.handlelength": 1.6,
        "legend.columnspacing": 1.0, "figure.constrained_layout.h_pad": 0.03,
        "figure.constrained_layout.w_pad": 0.03,
    })


# --------------------------------------------------------------------------- names
# The paper's benchmarks and corpora, the Open LLM Leaderboard item files and the families, as the
# papers spell them. Anything not listed is shown by :func:`display`'s rules.
DISPLAY_NAMES: dict[str, str] = {
    "mnli": "MNLI", "qnli": "QNLI", "rte": "RTE", "sst2": "SST-2", "mrpc": "MRPC", "qqp": "QQP", "wic": "WiC",
    "anli_r1": "ANLI-R1", "cola": "CoLA", "winogrande": "WinoGrande", "commonsense_qa": "CommonsenseQA",
    "social_iqa": "Social IQa", "hellaswag": "HellaSwag", "boolq": "BoolQ", "openbookqa": "OpenBookQA",
    "arc_easy": "ARC-Easy", "arc_challenge": "ARC-Challenge", "nq_open": "NQ-Open", "sciq": "SciQ",
    "piqa": "PIQA", "mathqa": "MathQA", "gsm8k": "GSM8K", "medmcqa": "MedMCQA", "headqa_en": "HeadQA",
    "lambada": "LAMBADA", "wiki_2025": "Wikipedia 2025", "arxiv_2025": "arXiv 2025",
    "stackexchange_2025": "StackExchange 2025",
    "ifeval": "IFEval", "musr": "MuSR", "openllm_math": "MATH-hard", "mmlu_pro": "MMLU-Pro", "bbh": "BBH",
    "gpqa": "GPQA",
    # BenchAlign's ranking losses
    "ranknet": "RankNet", "lambdarank": "LambdaRank", "ndcg_loss2": "NDCG-Loss2", "pointwise": "pointwise",
    # the mini world's families (architectures) and its tasks' shared prefix
    "gpt2": "GPT-2", "llama": "Llama", "gpt_neox": "GPT-NeoX",
    DIRECT: PROTOCOL_LABELS[DIRECT], TBT: PROTOCOL_LABELS[TBT],
}
_PREFIXES = ("mw_", "mw-")          # the mini world's namespace: "mw_facts" -> "Facts"


def display(name) -> str:
    """How a figure shows an identifier: the paper's spelling (:data:`DISPLAY_NAMES`), a hub id
    without its organisation (``Qwen/Qwen2-7B`` -> ``Qwen2-7B``), a mini-world name without its
    prefix (``mw_facts`` -> ``Facts``, ``mw-llama-s`` -> ``llama-s``); anything else unchanged."""
    text = str(name)
    if text in DISPLAY_NAMES:
        return DISPLAY_NAMES[text]
    text = text.rsplit("/", 1)[-1]
    for prefix in _PREFIXES:
        if text.startswith(prefix) and len(text) > len(prefix):
            rest = text[len(prefix):]
            return DISPLAY_NAMES.get(rest, rest[:1].upper() + rest[1:] if prefix == "mw_" else rest)
    return DISPLAY_NAMES.get(text, text)


def displays(names: Iterable) -> list[str]:
    return [display(n) for n in names]


# --------------------------------------------------------------------------- colours
# One hue per model family. The mini world's families share the hue of the hub family of the same
# architecture (its llama and gpt2 with Llama and GPT-2, gpt_neox with Pythia, a GPT-NeoX model).
FAMILY_HUES: dict[str, str] = {
    "Llama": "#3a6fb0", "GPT-2": "#dd7a2f", "Pythia": "#3f9a55", "Qwen": "#7c5fb5", "Gemma": "#8c6239",
    "Yi": "#d45a9a",
}
_FAMILY_ALIASES = {"llama": "Llama", "gpt2": "GPT-2", "gpt_neox": "Pythia", "GPT-NeoX": "Pythia"}
# Hues for families not listed above, picked by a digest of the name (stable across figures/runs).
_SPARE_HUES = ("#2aa0a4", "#b8a21a", "#c44e52", "#6b6b6b", "#a05195", "#8f2d56")   # none a protocol's colour


# One marker shape per family, so families stay apart where hues print as one grey.
FAMILY_MARKERS: dict[str, str] = {"Llama": "o", "GPT-2": "s", "Pythia": "^", "Qwen": "D", "Gemma": "v", "Yi": "P"}
_SPARE_MARKERS = ("X", "<", ">", "h", "p", "*")


def _family_pick(family: str, named: dict, spare: tuple) -> str:
    for key in (family, display(family)):              # "mw-llama" -> "Llama"
        name = _FAMILY_ALIASES.get(key, key)
        if name in named:
            return named[name]
    return spare[int(hashlib.sha256(str(display(family)).encode()).hexdigest(), 16) % len(spare)]


def family_color(family: str) -> str:
    """The hue of model family ``family`` (the same in every figure)."""
    return _family_pick(family, FAMILY_HUES, _SPARE_HUES)


def family_marker(family) -> str:
    """The marker of model family ``family`` (the same in every figure; ``o`` for no family)."""
    return _family_pick(family, FAMILY_MARKERS, _SPARE_MARKERS) if isinstance(family, str) else "o"


def shade(color: str, t: float) -> str:
    """``color`` made lighter (``t`` = 0) or darker (``t`` = 1); 0.5 keeps it about as it is."""
    h, light, s = colorsys.rgb_to_hls(*to_rgb(color))
    light = 0.78 - 0.5 * min(max(t, 0.0), 1.0)          # 0.78 (light) .. 0.28 (dark)
    return to_hex(colorsys.hls_to_rgb(h, light, s))


def sized_colors(family: dict, size: dict) -> dict[str, str]:
    """A colour per model: its family's hue (:func:`family_color`), lighter for smaller ``size`` within
    the family (equal sizes, such as a prepared twin and its base, share a shade)."""
    out = {}
    for fam in dict.fromkeys(family.values()):
        members = [m for m in family if family[m] == fam]
        sizes = sorted({size[m] for m in members if size.get(m) == size.get(m) and size.get(m) is not None})
        for m in members:
            s = size.get(m)
            t = sizes.index(s) / (len(sizes) - 1) if len(sizes) > 1 and s in sizes else 0.5
            out[m] = shade(family_color(fam), 0.15 + 0.7 * t)
    return out


def model_colors(models: Iterable[str], store: str | Path | None = None) -> dict[str, str]:
    """A colour per model (:func:`sized_colors`), family and parameters from :mod:`lib.metadata`."""
    from . import metadata

    frame = metadata.models_frame(list(dict.fromkeys(models)), store)
    return sized_colors(frame["family"].to_dict(), frame["params_b"].to_dict())


def model_styles(models: Iterable[str], store: str | Path | None = None):
    """Per model (index): ``color``, ``family``, ``marker`` and ``instruct`` (drawn hollow) from
    :mod:`lib.metadata`; models without metadata get one neutral grey and no family."""
    import pandas as pd

    from . import metadata

    models = list(dict.fromkeys(models))
    try:
        frame = metadata.models_frame(models, store)
    except metadata.MetadataError:
        return pd.DataFrame({"color": "0.35", "family": None, "instruct": False, "marker": "o"},
                            index=pd.Index(models, name="model"))
    colors = model_colors(models, store)
    return pd.DataFrame({"color": [colors[m] for m in models], "family": frame["family"].to_list(),
                         "instruct": frame["instruct"].to_list(),
                         "marker": [family_marker(f) for f in frame["family"]]}, index=pd.Index(models, name="model"))


def protocol_label(protocol: str) -> str:
    """How figures, tables and the leaderboard name a protocol (:data:`PROTOCOL_LABELS`; the cheaper
    forms of issue 42 by their settings: "Direct evaluation, 5-shot")."""
    if protocol == REDUCED:
        return "Train-before-test, reduced budget"
    shots = protocol.removeprefix(DIRECT + "_").removesuffix("shot")
    if protocol.startswith(DIRECT + "_") and protocol.endswith("shot") and shots.isdigit():
        return f"Direct evaluation, {shots}-shot"
    return PROTOCOL_LABELS.get(protocol, protocol)


def family_handles(families: Iterable[str], marker: str | None = None, lines: bool = False) -> tuple[list, list[str]]:
    """Legend entries (handles, labels) for model families: hue, marker, a line if ``lines``."""
    from matplotlib.lines import Line2D

    fams = list(dict.fromkeys(families))
    handles = [Line2D([], [], color=family_color(f), lw=1.5 if lines else 0, marker=marker or family_marker(f),
                      ms=3.5 if lines else 5) for f in fams]
    return handles, [display(f) for f in fams]


# --------------------------------------------------------------------------- layout helpers
def text_width_in(text: str, size: float = FONT["small"]) -> float:
    """Printed width of ``text`` (its widest line) at ``size`` points, measured with the font in use."""
    from matplotlib.font_manager import FontProperties
    from matplotlib.textpath import TextToPath

    prop = FontProperties(size=size)
    widths = [TextToPath().get_text_width_height_descent(line, prop, ismath=False)[0]
              for line in str(text).split("\n") if line]
    return max(widths, default=0.0) / 72.0


def wrap(text: str, width_in: float, size: float = FONT["title"]) -> str:
    """``text`` broken into lines that fit ``width_in`` inches at ``size`` points."""
    import textwrap

    chars = max(12, int(width_in * 72.0 / (0.56 * size)))
    text = str(text).replace(" %", "\u00a0%")           # "95 %" stays on one line
    return "\n".join(textwrap.fill(part, chars, break_on_hyphens=False) for part in str(text).split("\n"))


def title(fig, text: str):
    """The figure's title, recorded (``figures/<name>.json``) and not drawn: the paper's caption carries
    it (:mod:`runner.figreview` flags a drawn one)."""
    fig._tbt_title = " ".join(str(text).split())
    return fig


def _columns(labels, width_in: float) -> int:
    """The most legend columns whose entries (handle, label, spacing) fit ``width_in`` inches; matplotlib
    fills a legend column by column."""
    import math

    widths = [text_width_in(label) + 0.42 for label in labels]         # handle, pads, column spacing
    for ncol in range(len(labels), 1, -1):
        rows = math.ceil(len(labels) / ncol)
        if sum(max(widths[i:i + rows]) for i in range(0, len(labels), rows)) <= width_in:
            return ncol
    return 1


def legend_below(fig, handles, labels, title: str | None = None, ncol: int | None = None, **kw):
    """A figure legend under the panels (never on the data), in as many columns as fit."""
    ncol = ncol or _columns(labels, fig.get_figwidth() - 0.15)
    return fig.legend(handles, labels, loc="outside lower center", ncol=ncol, frameon=False, title=title, **kw)


def legend_above(ax, handles, labels, title: str | None = None, ncol: int | None = None, **kw):
    """A legend just above ``ax``, in as many columns as fit the figure's width."""
    ncol = ncol or _columns(labels, ax.get_figure().get_figwidth() - 0.15)
    return ax.legend(handles, labels, loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=ncol, frameon=False,
                     title=title, borderaxespad=0.2, **kw)


# --------------------------------------------------------------------------- captions and saving
_CAPTIONS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def set_caption(fig, text: str):
    """Attach a caption to ``fig`` (:func:`savefig` records it). Returns ``fig``."""
    _CAPTIONS[fig] = " ".join(str(text).split())
    return fig


def caption(fig) -> str | None:
    return _CAPTIONS.get(fig)


def savefig(fig, out_dir: str | Path, name: str, close: bool = False) -> None:
    """Save ``fig`` as ``figures/<name>.pdf`` and ``.png`` in ``out_dir``, and the figure itself with its
    caption, notebook cell and style (matplotlib remakes ticks from the style when a kept figure is drawn
    again) as ``<name>.pickle``, which :mod:`runner.figreview` checks after the stage (``make
    check-figures`` after a run in JupyterLab). Returns nothing, so a notebook cell ending with it shows
    the figure and no return value."""
    folder = Path(out_dir) / "figures"
    folder.mkdir(parents=True, exist_ok=True)
    for ext in ("pdf", "png"):
        fig.savefig(folder / f"{name}.{ext}")
    style = {k: v for k, v in plt.rcParams.items() if not k.startswith("backend")}
    saved = {"figure": fig, "caption": caption(fig), "cell": _cell()}
    atomic_write_bytes(folder / f"{name}.pickle", pickle.dumps(style) + pickle.dumps(saved))   # style first
    if close:
        plt.close(fig)


def _cell() -> int | None:
    """The ``In [N]`` of the notebook cell running now (IPython's counter is one ahead while it runs)."""
    try:
        from IPython import get_ipython
    except ImportError:
        return None
    ip = get_ipython()
    return int(ip.execution_count) - 1 if ip is not None and getattr(ip, "execution_count", None) else None
