"""The figure checks (runner.figreview) catch each defect a reviewer would, pass a clean figure, and the
figure functions stay within them for zoos and benchmark sets larger than today's (40 models, 8
benchmarks: what the mini world may grow to). The figures the profiles write are checked where the
suite runs them (test_smoke_profile, test_analysis_notebooks, test_benchalign_experiments)."""

from __future__ import annotations

import json

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402

from lib import plots, store  # noqa: E402
from runner import contactsheet, figreview  # noqa: E402


@pytest.fixture(autouse=True)
def style():
    plots.use_style()
    yield
    plt.close("all")


def _save(fig, tmp_path, name="fig"):
    out = tmp_path / "07_stage"
    plots.savefig(fig, out, name, close=True)
    return figreview.record(out / "figures" / f"{name}.png"), contactsheet.check(out)[f"07_stage/{name}"]


def _clean(width=plots.WIDTH_SINGLE):
    fig, ax = plt.subplots(figsize=(width, 2.4), layout="constrained")
    ax.plot([0, 1, 2], [0, 1, 4], label="curve")
    ax.set_xlabel("x")
    ax.set_ylabel("y")
    plots.legend_below(fig, *ax.get_legend_handles_labels())
    plots.title(fig, "A clean figure")
    return plots.set_caption(fig, "A clean figure.")


def test_the_style_file_is_seaborns_paper_theme():
    """lib/paper.mplstyle holds seaborn's paper / whitegrid theme as rcParams, so notebooks draw in it
    without importing seaborn: a seaborn whose theme differs fails here (less the font sizes, which
    use_style sets, and seaborn's own colour map, which every figure overrides)."""
    import seaborn as sns
    from matplotlib.colors import to_rgba

    def applied(apply) -> dict:
        with matplotlib.rc_context():
            matplotlib.rcdefaults()
            apply()
            rc = dict(matplotlib.rcParams)
        colours = rc.pop("axes.prop_cycle").by_key()["color"]
        return {**rc, "axes.prop_cycle": [to_rgba(c) for c in colours]}

    def seaborns():
        matplotlib.rcParams.update({**sns.axes_style("whitegrid"), **sns.plotting_context("paper")})
        matplotlib.rcParams["axes.prop_cycle"] = matplotlib.cycler(color=sns.color_palette("deep"))

    theirs, ours = applied(seaborns), applied(lambda: plt.style.use(plots.STYLE))
    left_out = {"font.size", "axes.titlesize", "axes.labelsize", "legend.fontsize", "legend.title_fontsize",
                "xtick.labelsize", "ytick.labelsize", "image.cmap"}
    differ = {k for k in theirs if theirs[k] != ours[k]}
    assert differ <= left_out, sorted(differ - left_out)
    assert theirs["lines.linewidth"] == ours["lines.linewidth"] == 1.2000000000000002      # not 1.2: the same pixels


def test_a_clean_figure_passes_and_its_record_says_how_it_prints(tmp_path):
    rec, problems = _save(_clean(), tmp_path)
    assert problems == [] and rec["problems"] == []
    assert rec["fits"] == "one column" and rec["width_in"] <= plots.WIDTH_SINGLE
    assert rec["min_font_pt"] >= plots.MIN_FONT_PT
    assert rec["title"] == "A clean figure" and rec["caption"] == "A clean figure."
    assert not any("A clean figure" in text for text, _ in figreview.inspect(_clean())["texts"])   # recorded, not drawn


def test_legends_told_apart_by_marker_line_or_grey_pass(tmp_path):
    fig = _clean()
    ax = fig.axes[0]
    ax.plot([0, 1, 2], [1, 2, 3], color="#4c72b0", ls="--", label="dashed")            # same grey, other line
    ax.plot([0, 1, 2], [2, 3, 3], color="#c44e52", marker="s", label="squares")        # same grey, markers
    for p in plots.PROTOCOL_COLORS:
        ax.plot([0, 1, 2], [3, 3, 4], color=plots.PROTOCOL_COLORS[p], ls=":", label=p)   # the protocols: greys
    ax.plot([0, 1, 2], [0, 1, 4], lw=0.5, color="0.5", ls="--", label="dashed over")    # a dashed line hides nothing
    for marker in "^v":                                    # error bars: their markers count, not their caps
        ax.errorbar([1], [2], yerr=[[0.5], [0.5]], fmt=marker, capsize=2, color="#c44e52", label=f"bars {marker}")
    fig.legends.clear()
    plots.legend_below(fig, *ax.get_legend_handles_labels())
    assert [p for p in figreview.inspect(fig)["problems"] if "greyscale" in p or "hidden" in p] == []


def test_the_protocols_differ_in_greyscale():
    """Issue 53: direct evaluation and train-before-test printed as one grey (luma 114 and 110)."""
    from matplotlib.colors import to_rgb

    luma = [0.299 * r + 0.587 * g + 0.114 * b for r, g, b in map(to_rgb, plots.PROTOCOL_COLORS.values())]
    assert abs(luma[0] - luma[1]) > 0.25, luma


def _too_wide():
    fig = _clean(8.0)
    fig.axes[0].set_title("a panel title that is long enough to need the width")
    return fig


def _small_text():
    fig = _clean()
    fig.axes[0].tick_params(labelsize=6)
    return fig


def _overlap():
    fig = _clean()
    fig.axes[0].text(0.5, 2, "first label")
    fig.axes[0].text(0.55, 2, "second label")
    return fig


def _unlabelled():
    fig = _clean()
    fig.axes[0].set_ylabel("")
    return fig


def _offset():
    fig = _clean()
    fig.axes[0].lines[0].set_xdata([1e-9, 2e-9, 3e-9])
    fig.axes[0].set_xlim(1e-9, 3e-9)
    return fig


def _legend_on_data():
    fig, ax = plt.subplots(figsize=(3.4, 2.4), layout="constrained")
    ax.bar(range(5), [5, 4, 3, 2, 1], label="bars")
    ax.axhline(4.5, ls="--", label="uniform")
    ax.set_xlabel("x")
    ax.set_ylabel("y")
    ax.legend(loc="upper right")
    ax.set_title("legend")
    return plots.set_caption(fig, "c")


def _spill():
    fig = _clean()
    fig.text(1.02, 0.5, "a note placed beside the canvas")
    return fig


def _drawn_title():
    fig = _clean()
    fig.suptitle("A clean figure")                # drawn: costs height, and the caption says it already
    return fig


def _alike_in_grey():
    fig = _clean()           # the red and blue the protocols had before issue 53: luma 0.45 and 0.43
    fig.axes[0].plot([0, 1, 2], [1, 2, 3], color="#4c72b0", label="second")
    fig.axes[0].lines[0].set_color("#c44e52")
    fig.legends.clear()
    plots.legend_below(fig, *fig.axes[0].get_legend_handles_labels())
    return fig


def _hidden_line():
    fig = _clean()
    fig.axes[0].plot([0, 1, 2], [0, 1, 4], lw=3, color="0.1", label="on top")   # covers "curve"
    fig.legends.clear()
    plots.legend_below(fig, *fig.axes[0].get_legend_handles_labels())
    return fig


def _bars_on_log():
    fig = _clean()
    fig.axes[0].bar([0, 1, 2], [30, 300, 3000])
    fig.axes[0].set_yscale("log")
    return fig


def _cut_off():
    fig = _clean()
    fig.axes[0].text(0.5, 1.0, "a label above the top", transform=fig.transFigure, va="bottom")
    return fig


def _panel_title():
    fig = _clean()
    fig.axes[0].set_title("A clean figure")
    return fig


def _no_caption():
    fig = _clean()
    plots._CAPTIONS.pop(fig)
    return fig


@pytest.mark.parametrize("make, expected", [
    (_too_wide, "wider than the full text width"),
    (_small_text, "under 7 pt at print size"),
    (_overlap, "overlaps"),
    (_unlabelled, "the y axis has tick labels but no label"),
    (_offset, "beside its ticks"),
    (_legend_on_data, "covers data"),
    (_spill, "content drawn outside the canvas"),
    (_drawn_title, "a title drawn inside the figure"),
    (_no_caption, "no caption"),
    (_alike_in_grey, "print alike in greyscale"),
    (_hidden_line, "is hidden under"),
    (_bars_on_log, "bars on a log axis"),
    (_cut_off, "drawn outside the canvas"),
    (_panel_title, "a panel title repeats the figure's title"),
])
def test_each_defect_is_caught(tmp_path, make, expected):
    rec, problems = _save(make(), tmp_path)
    assert any(expected in p for p in problems), problems
    assert set(rec["problems"]) <= set(problems)          # the check adds what the files show


def test_a_figure_saved_again_is_checked_again(tmp_path):
    rec, _ = _save(_clean(), tmp_path)
    assert rec["problems"] == [] and json.loads((tmp_path / "07_stage" / "figures" / "fig.json").read_text()) == rec
    rec, problems = _save(_overlap(), tmp_path)              # the same name, a figure with a defect
    assert any("overlaps" in p for p in rec["problems"]) and problems == rec["problems"]


def test_a_wide_figure_is_judged_at_its_printed_size(tmp_path):
    fig = _clean(8.0)                      # 8 pt labels of an 8-inch figure print below 7 pt at 7.0 in
    fig.axes[0].set_xlabel("a label that makes the figure as wide as it was designed")
    fig.axes[0].set_xlim(0, 100)
    rec, problems = _save(fig, tmp_path)
    assert rec["width_in"] > 7.0
    assert any("under 7 pt at print size" in p for p in problems)


def test_check_finds_figures_saved_another_way(tmp_path):
    folder = tmp_path / "prof" / "04_x" / "figures"
    folder.mkdir(parents=True)
    fig, ax = plt.subplots(figsize=(7.6, 2))
    with plt.rc_context({"savefig.bbox": "standard"}):            # the whole 7.6-inch canvas
        fig.savefig(folder / "raw.png")
        fig.savefig(folder / "raw.pdf")
    problems = contactsheet.check(tmp_path / "prof")["04_x/raw"]
    assert any("no record raw.json" in p for p in problems)
    assert any("PDF page 7.6 in wide" in p for p in problems)


def test_contact_sheet_shows_every_figure_with_caption_and_notebook(tmp_path, monkeypatch):
    from lib import paths

    monkeypatch.setattr(paths, "OUTPUTS", tmp_path)
    plots.savefig(_clean(), tmp_path / "prof" / "04_rank_agreement", "clean", close=True)
    plots.savefig(_overlap(), tmp_path / "prof" / "05_perplexity", "bad", close=True)
    sheet = contactsheet.contact_sheet("prof")
    text = sheet.read_text()
    assert sheet == tmp_path / "prof" / "figures.html"
    assert "04_rank_agreement/figures/clean.png" in text and "05_perplexity/figures/bad.png" in text
    assert "A clean figure." in text and "04_rank_agreement.ipynb" in text
    assert "1 with problems" in text and "overlaps" in text
    plots.savefig(_clean(), tmp_path / "prof" / "04_rank_agreement", "aaa_made_later", close=True)
    contactsheet.check(tmp_path / "prof")                              # makes the records
    for name, cell in (("clean", 3), ("aaa_made_later", 9)):          # as the notebook's cells made them
        rec = tmp_path / "prof" / "04_rank_agreement" / "figures" / f"{name}.json"
        rec.write_text(json.dumps({**json.loads(rec.read_text()), "cell": cell}))
    text = contactsheet.contact_sheet("prof").read_text()
    assert text.index("figures/clean.png") < text.index("figures/aaa_made_later.png")   # made first, shown first
    assert contactsheet.main(["prof", "--no-sheet"]) == 1
    assert "1 with problems" in contactsheet.review("prof")


def test_names_are_shown_as_the_papers_write_them():
    assert plots.display("openllm_math") == "MATH-hard"
    assert plots.display("nq_open") == "NQ-Open" and plots.display("arc_challenge") == "ARC-Challenge"
    assert plots.display("mw_facts") == "Facts" and plots.display("mw-llama-s") == "llama-s"
    assert plots.display("Qwen/Qwen2.5-7B-Instruct") == "Qwen2.5-7B-Instruct"
    assert plots.display("gpt_neox") == "GPT-NeoX" and plots.display("ranknet") == "RankNet"
    assert plots.display("some_new_task") == "some_new_task"


def _lightness(color):
    import colorsys

    from matplotlib.colors import to_rgb

    return colorsys.rgb_to_hls(*to_rgb(color))[1]


def test_one_hue_per_family_and_sizes_as_shades():
    import colorsys

    from matplotlib.colors import to_rgb

    assert plots.family_color("Llama") == plots.family_color("llama") == plots.family_color("mw-llama")
    assert plots.family_color("gpt_neox") == plots.family_color("Pythia")
    assert plots.family_color("unheard-of") == plots.family_color("unheard-of")
    assert len({plots.family_color(f) for f in ("Llama", "GPT-2", "Pythia", "Qwen", "Gemma", "Yi")}) == 6
    colors = plots.model_colors(["EleutherAI/pythia-70m-deduped", "EleutherAI/pythia-1b-deduped",
                                 "EleutherAI/pythia-12b"])
    light = [_lightness(c) for c in colors.values()]
    assert light == sorted(light, reverse=True)                       # larger: darker
    hues = {round(colorsys.rgb_to_hls(*to_rgb(c))[0], 2) for c in colors.values()}
    assert len(hues) == 1


# --------------------------------------------------------------------------- a zoo larger than today's
FAMILIES = ("llama", "gpt2", "gpt_neox", "mamba")
SIZES = {"xs": 6e-5, "s": 1.6e-4, "m": 4e-4, "l": 9e-4, "xl": 2e-3}
BENCHES = [f"mw_task{i}" for i in range(6)]
CORPORA = ["mw_wiki", "mw_stories"]


@pytest.fixture
def big_zoo(tmp_path):
    """40 models (4 families x 5 sizes + 20 prepared twins) recorded in a store's metadata."""
    root = tmp_path / "store"
    models = {}
    for fam in FAMILIES:
        for size, params in SIZES.items():
            base = f"mw-{fam}-{size}"
            models[base] = {"family": f"mw-{fam}", "params_b": params, "instruct": False}
            models[f"{base}-prep"] = {"family": f"mw-{fam}", "params_b": params, "instruct": True, "base_model": base}
    store.write_meta(root, "models", models)
    return root, list(models)


def _assert_clean(fig, tmp_path, name):
    rec, problems = _save(fig, tmp_path, name)
    assert problems == [], (name, problems)
    return rec


def test_pipeline_figures_with_40_models_and_8_tasks(tmp_path, big_zoo):
    from lib.pipeline import figures

    root, models = big_zoo
    rng = np.random.default_rng(0)
    tasks = BENCHES + CORPORA
    curves = pd.DataFrame([{"model": m, "benchmark": b, "lr": lr, "epoch": e, "val_loss": 2 / e + rng.random()}
                           for m in models for b in tasks for lr in (1e-3, 3e-3) for e in (1, 2, 3)])
    _assert_clean(figures.val_curves(curves, tasks, CORPORA, value="val_loss", store=root), tmp_path, "val_curves")
    both = pd.DataFrame([{"model": m, "benchmark": b, "direct_eval": rng.random(), "train_before_test": rng.random()}
                         for m in models for b in tasks])
    _assert_clean(figures.direct_vs_tbt(both, tasks, CORPORA, store=root), tmp_path, "direct_vs_tbt")
    table = pd.DataFrame({"n_train": rng.integers(50, 5000, len(tasks)), "selected": True,
                          "role": ["benchmark"] * len(BENCHES) + ["corpus"] * len(CORPORA)}, index=tasks)
    _assert_clean(figures.train_sizes(table, 100), tmp_path, "train_sizes")


def test_budget_plot_with_four_learning_rates_and_wide_bands(tmp_path):
    """Notebook 04's budget figure as mini draws it on some CPUs: four learning rates (four viridis shades
    print alike in grey, so each rate has its own marker) and bands from -0.4 to 1 over eight epochs."""
    from lib.analysis import figures
    from lib.analysis.budget import BEST

    rng = np.random.default_rng(0)
    rows = [{"curve": curve, "epoch": e, "mean_tau": v, "lo": v - 0.3 - 0.1 * e, "hi": min(1.0, v + 0.3)}
            for curve in ("lr=0.0001", "lr=0.0003", "lr=0.001", "lr=0.003", BEST)
            for e in range(1, 9) for v in [rng.uniform(0.0, 0.7)]]
    refs = {plots.PROTOCOL_LABELS[store.DIRECT]: (0.26, [0.11, 0.43]),
            plots.PROTOCOL_LABELS[store.TBT]: (0.53, [0.40, 0.65])}
    _assert_clean(figures.budget_plot(pd.DataFrame(rows), refs), tmp_path, "budget")


@pytest.mark.parametrize("n", [3, 5, 12, 24])
def test_tau_heatmaps_name_every_benchmark_up_to_the_papers_24(tmp_path, n):
    from lib.analysis import figures

    names = list(plots.DISPLAY_NAMES)[:n]
    rng = np.random.default_rng(n)
    mats = {}
    for p in store.PROTOCOLS:
        m = rng.uniform(-0.1, 1, (n, n))
        m = (m + m.T) / 2
        np.fill_diagonal(m, 1)
        mats[p] = pd.DataFrame(m, index=names, columns=names)
    fig = figures.tau_heatmaps(mats, cis={p: [0.1, 0.2] for p in mats}, n_models=61)
    rec = _assert_clean(fig, tmp_path, f"tau_{n}")
    labels = {t.get_text() for ax in fig.axes for t in ax.get_yticklabels()}
    assert {plots.display(b) for b in names} <= labels
    assert rec["width_in"] <= plots.WIDTH_DOUBLE


def test_world_overview_with_40_models(tmp_path, big_zoo):
    from lib.miniworld import overview

    _, models = big_zoo
    table = pd.DataFrame({"family": [f"mw-{m.split('-')[1]}" for m in models],
                          "params": [SIZES[m.split("-")[2]] * 1e9 for m in models],
                          "tokens": [4e5 + 1e4 * i for i in range(len(models))],
                          "prepared": ["mw_task0=150" if m.endswith("prep") else "" for m in models]},
                         index=pd.Index(models, name="model"))
    doses = pd.DataFrame({b: [150 * (m.endswith("prep") and i % 2 == 0) for m in models]
                          for i, b in enumerate(BENCHES)}, index=models)
    curves = {m: np.column_stack([np.arange(10), np.linspace(6, 1, 10)]) for m in models}
    _assert_clean(overview.plot_overview(table, doses, curves), tmp_path, "world")


def test_weights_by_benchmark_with_many_benchmarks(tmp_path):
    from lib.benchalign import figures

    rng = np.random.default_rng(1)
    item_benchmark = np.repeat(["musr", "openllm_math"] + BENCHES, 200)
    weights = [rng.normal(0, 1e-3, len(item_benchmark)) for _ in range(3)]
    fig = figures.weight_hist(item_benchmark, weights)
    _assert_clean(fig, tmp_path, "weights")
    assert any("MATH-hard" in t.get_text() for t in fig.axes[0].get_yticklabels())


def _texts(fig) -> str:
    return " | ".join(t.get_text() for t in fig.findobj(matplotlib.text.Text))


def test_analysis_figures_say_what_they_show(tmp_path):
    """Legends name instruction-tuned models so (mini-world 'prepared' only where the models are), a
    family's bar carries its size and floor, the ceiling plot counts the pairs above its line, the
    rank plot names its marked model, and captions name the statistic the panels give."""
    from lib.analysis import figures as af

    models = ["openai-community/gpt2", "Qwen/Qwen2-7B", "Qwen/Qwen2-7B-Instruct"]
    frame = pd.DataFrame({"model": models, "x": [1.0, 2.0, 3.0], "y": [0.2, 0.5, 0.6],
                          "type": ["base", "base", "instruct"]})
    fig = af.scatter_grid({"direct_eval": frame}, "x", "y", hue="type", statistic="Pearson r", suptitle="S")
    assert "instruction-tuned" in _texts(fig) and "prepared" not in _texts(fig)
    assert "Pearson r" in plots.caption(fig) and "prepared" not in plots.caption(fig)
    prepared = af.scatter_grid({"d": frame.assign(type=["base", "base", "prepared"])}, "x", "y", hue="type")
    assert "prepared for the test tasks" in _texts(prepared)
    family = pd.DataFrame({"group": ["GPT-2", "Qwen"] * 2, "n_models": [4, 26] * 2, "pc1": [0.7, 0.8, 0.8, 0.9],
                           "lo": [0.6] * 4, "hi": [0.9] * 4, "protocol": [store.DIRECT] * 2 + [store.TBT] * 2})
    bars = af.family_pc1_bars(family, 24)
    assert {"GPT-2 (4)", "Qwen (26)"} <= {t.get_text() for t in bars.axes[0].get_yticklabels()}
    floor = [line for line in bars.axes[0].get_lines() if line.get_label() == "lowest possible"][0]
    assert list(floor.get_xdata()) == pytest.approx([1 / 3, 1 / 24])
    pairs = pd.DataFrame({"a": ["p", "p"], "b": ["q", "r"], "tau_d": [0.9, 0.3], "ceiling_d": [0.8, 0.9]})
    per = pd.DataFrame({"tau_d": [0.6, 0.9, 0.3], "ceiling_d": [0.85, 0.8, 0.9]}, index=["p", "q", "r"])
    assert "(1 of 2 pairs above the line)" in _texts(af.ceiling_plot(pairs, per, ("d",)))
    ranks = {"d": pd.DataFrame({"model": models, "rank_a": [1.0, 2.0, 3.0], "rank_b": [2.0, 1.0, 3.0]})}
    marked = af.rank_plot(ranks, "nq_open", "arc_challenge", highlight=["Qwen/Qwen2-7B"])
    assert "Qwen2-7B" in _texts(marked) and "Thick: Qwen2-7B." in plots.caption(marked)
    plt.close("all")
