"""Does perplexity rank models the way downstream benchmarks do?

Perplexity corpora are ordinary results in the store whose metric is bits-per-byte (lower is
better; :func:`lib.metadata.perplexity_benchmarks` tells them apart). Every tau here is computed on
*oriented* scores (bits-per-byte negated), so a positive tau means "lower perplexity, better
downstream rank". Three settings pair a perplexity protocol with a downstream protocol:

- ``direct``: perplexity before fine-tuning vs zero-shot downstream scores;
- ``train_before_test``: perplexity after fine-tuning on the corpus vs downstream after fine-tuning;
- ``pre_ft_ppl_vs_tbt``: perplexity before fine-tuning vs downstream after fine-tuning (does the
  cheap pre-fine-tuning perplexity predict train-before-test rankings?).

Each is computed for model groups (all, base, instruction-tuned). ``average`` rows/columns use, per
model, the mean over all corpora (benchmarks); models missing any of them are left out of it.

Every number of the summary gets a bootstrap interval over the models of its group
(:func:`bootstrap_settings`, :mod:`lib.analysis.uncertainty`).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .. import metadata, store
from . import uncertainty
from .agreement import MIN_MODELS, split_benchmarks

AVERAGE = "average"
# setting: (protocol of the perplexity, protocol of the downstream scores)
SETTINGS: dict[str, tuple[str, str]] = {
    "direct": (store.DIRECT, store.DIRECT),
    "train_before_test": (store.TBT, store.TBT),
    "pre_ft_ppl_vs_tbt": (store.DIRECT, store.TBT),
}
SETTING_TITLES = {"direct": "Direct (both before fine-tuning)", "train_before_test": "Train-before-test (both after)",
                  "pre_ft_ppl_vs_tbt": "Perplexity before vs downstream after"}


def with_average(matrix: pd.DataFrame) -> pd.DataFrame:
    """The matrix plus an ``average`` column: the row mean over models that have every column."""
    out = matrix.copy()
    out[AVERAGE] = matrix.mean(axis=1).where(matrix.notna().all(axis=1))
    return out


def model_groups(models: list[str], store_root=None) -> dict[str, list[str]]:
    """``{"all": ..., "base": ..., "instruct": ...}`` from metadata (instruct flag)."""
    meta = metadata.models_frame(models, store_root)
    return {"all": list(models), "base": [m for m in models if not meta.loc[m, "instruct"]],
            "instruct": [m for m in models if meta.loc[m, "instruct"]]}


def _setting_groups(df: pd.DataFrame, store_root=None):
    """Per setting whose protocols the store has and per model group: (setting, group, x, corpora,
    benchmarks, pairs), x the group's oriented perplexity columns beside its downstream ones (each
    with its ``average`` last), pairs every (corpus, benchmark) pair of x's columns; nothing when the
    store has no perplexity corpus or no downstream benchmark."""
    downstream, corpora = split_benchmarks(sorted(df["benchmark"].unique()), store_root)
    if not corpora or not downstream:
        return
    present = set(df["protocol"])
    dirs = store.directions(df)
    for setting, (ppl_p, ds_p) in SETTINGS.items():
        if ppl_p not in present or ds_p not in present:
            continue
        ppl = with_average(store.orient(store.matrix(df, ppl_p).reindex(columns=corpora), dirs))
        ds = with_average(store.orient(store.matrix(df, ds_p).reindex(columns=downstream), dirs))
        models = sorted(set(ppl.dropna(how="all").index) & set(ds.dropna(how="all").index))
        pairs = [(c, ppl.shape[1] + b) for c in range(ppl.shape[1]) for b in range(ds.shape[1])]
        for group, members in model_groups(models, store_root).items():
            x = np.hstack([ppl.reindex(members).to_numpy(float), ds.reindex(members).to_numpy(float)])
            yield setting, group, x, list(ppl.columns), list(ds.columns), pairs


def agreement_table(df: pd.DataFrame, store_root=None, min_models: int = MIN_MODELS) -> pd.DataFrame:
    """Kendall tau of every (corpus or average) x (benchmark or average) per setting and model group.

    Columns: setting, group, corpus, benchmark, tau, n_models. Empty when the store has no
    perplexity corpus or lacks a protocol a setting needs (such settings are skipped).
    """
    rows = []
    for setting, group, x, corpora, benchmarks, pairs in _setting_groups(df, store_root):
        taus = uncertainty.weighted_tau(x, pairs, None, min_models)[0]    # every pair in one pass
        finite = np.isfinite(x)
        for (c, b), tau in zip(pairs, taus):
            rows.append((setting, group, corpora[c], benchmarks[b - len(corpora)], float(tau),
                         int((finite[:, c] & finite[:, b]).sum())))
    return pd.DataFrame(rows, columns=["setting", "group", "corpus", "benchmark", "tau", "n_models"])


def summarise(table: pd.DataFrame) -> pd.DataFrame:
    """Per (setting, group): tau of average perplexity vs average downstream, the mean tau over the
    individual corpus x benchmark pairs, and the number of models in the averages."""
    if table.empty:
        return pd.DataFrame(columns=["setting", "group", "tau_average", "mean_tau_pairs", "n_models"])
    rows = []
    for (setting, group), t in table.groupby(["setting", "group"], sort=False):
        avg = t[(t.corpus == AVERAGE) & (t.benchmark == AVERAGE)]
        single = t[(t.corpus != AVERAGE) & (t.benchmark != AVERAGE)]["tau"].dropna()
        rows.append({"setting": setting, "group": group,
                     "tau_average": float(avg["tau"].iloc[0]) if len(avg) else np.nan,
                     "mean_tau_pairs": float(single.mean()) if len(single) else np.nan,
                     "n_models": int(avg["n_models"].iloc[0]) if len(avg) else 0})
    return pd.DataFrame(rows)


def corpus_by_benchmark(table: pd.DataFrame, setting: str, group: str = "all") -> pd.DataFrame:
    """Square corpus x benchmark tau table of one setting and group (incl. averages)."""
    t = table[(table.setting == setting) & (table.group == group)]
    mat = t.pivot(index="corpus", columns="benchmark", values="tau")
    last = lambda names: sorted(n for n in names if n != AVERAGE) + [n for n in names if n == AVERAGE]
    return mat.loc[last(mat.index), last(mat.columns)]


def scatter_frame(df: pd.DataFrame, ppl_protocol: str, ds_protocol: str, store_root=None) -> pd.DataFrame:
    """Per model: average bits-per-byte (``ppl_protocol``), average downstream score (``ds_protocol``),
    and whether it is instruction-tuned, for the scatter plots."""
    downstream, corpora = split_benchmarks(sorted(df["benchmark"].unique()), store_root)
    if not corpora or ppl_protocol not in set(df["protocol"]) or ds_protocol not in set(df["protocol"]):
        return pd.DataFrame(columns=["model", "bits_per_byte", "downstream", "type"])
    ppl = with_average(store.matrix(df, ppl_protocol).reindex(columns=corpora))[AVERAGE]
    ds = with_average(store.matrix(df, ds_protocol).reindex(columns=downstream))[AVERAGE]
    both = pd.concat({"bits_per_byte": ppl, "downstream": ds}, axis=1, join="inner").dropna()
    meta = metadata.models_frame(list(both.index), store_root)
    both["type"] = metadata.model_types(meta).loc[both.index].to_numpy()
    return both.rename_axis("model").reset_index()


def bootstrap_settings(df: pd.DataFrame, store_root=None, min_models: int = MIN_MODELS,
                       n_boot: int = uncertainty.N_BOOT, seed: int = 0, level: float = uncertainty.LEVEL) -> dict:
    """Intervals of :func:`summarise`'s numbers, resampling the models of each (setting, group):
    ``{"tau_average_ci": {setting: {group: [lo, hi]}}, "mean_tau_pairs_ci": {...}}`` (the models
    and pairs of :func:`agreement_table`; all corpus x benchmark pairs of a draw in one product)."""
    out: dict = {"tau_average_ci": {}, "mean_tau_pairs_ci": {}}
    for setting, group, x, corpora, benchmarks, pairs in _setting_groups(df, store_root):
        last = (len(corpora) - 1, len(corpora) + len(benchmarks) - 1)          # average x average
        single = [k for k, (c, b) in enumerate(pairs) if c < last[0] and b < last[1]]
        if len(x) < 2:
            taus = np.full((n_boot, len(pairs)), np.nan)
        else:
            taus = uncertainty.weighted_tau(x, pairs, uncertainty.draws(len(x), n_boot, seed), min_models)
        out["tau_average_ci"].setdefault(setting, {})[group] = uncertainty.interval(taus[:, pairs.index(last)], level)
        out["mean_tau_pairs_ci"].setdefault(setting, {})[group] = uncertainty.interval(
            uncertainty.nanmean_rows(taus[:, single]), level)
    return out


@uncertainty.one_blas_thread
def perplexity_report(df: pd.DataFrame, store_root=None, min_models: int = MIN_MODELS,
                      n_boot: int = uncertainty.N_BOOT, seed: int = 0, level: float = uncertainty.LEVEL,
                      work=None) -> dict:
    """Everything notebook 05 shows: ``table`` (:func:`agreement_table`), ``settings`` (:func:`summarise`
    with the intervals' ``_lo``/``_hi``), ``frames`` ({setting: :func:`scatter_frame`}), ``mats``
    ({setting: corpus x benchmark tau}), ``corpora``, ``notes`` and ``summary`` (plain numbers; every
    interval under its number's name + ``_ci``).

    ``n_boot`` draws of models with ``seed`` give the ``level`` intervals; ``work`` (the profile's
    work folder) is where per-item results would be: corpora have none, and a line says whether
    they have standard errors (a noise ceiling needs one or the other).
    """
    from . import noise

    table = agreement_table(df, store_root, min_models=min_models)
    settings = summarise(table)
    corpora = sorted(set(table["corpus"]) - {AVERAGE})
    notes = [] if len(table) else ["no perplexity corpus (or no downstream benchmark) in the store: nothing to compare"]
    notes += [f"{r.setting}/{r.group}: fewer than {min_models} models, tau NaN"
              for r in settings.itertuples() if r.n_models < min_models]
    frames = {s: scatter_frame(df, *SETTINGS[s], store_root=store_root) for s in SETTINGS}
    mats = {s: corpus_by_benchmark(table, s) for s in table["setting"].unique()} if len(table) else {}
    boot = bootstrap_settings(df, store_root, min_models, n_boot, seed, level)
    for key in ("tau_average", "mean_tau_pairs"):
        cis = [boot[f"{key}_ci"].get(r.setting, {}).get(r.group, [np.nan, np.nan]) for r in settings.itertuples()]
        settings[f"{key}_lo"] = [c[0] for c in cis]
        settings[f"{key}_hi"] = [c[1] for c in cis]
    if corpora:
        meas = {p: noise.load_measurements(df, p, corpora, work) for p in store.PROTOCOLS if p in set(df["protocol"])}
        line = noise.missing_line(meas)
        if line:
            notes.append(line.replace("noise ceiling", "noise ceiling for perplexity agreement"))

    def nested(col: str) -> dict:
        return {s: dict(zip(g["group"], g[col])) for s, g in settings.groupby("setting", sort=False)}

    summary = {"corpora": corpora, "min_models": min_models, "tau_average": nested("tau_average"),
               "mean_tau_pairs": nested("mean_tau_pairs"), "n_models": nested("n_models"), **boot,
               "bootstrap": {"unit": "models of each group", "n_boot": n_boot, "seed": seed, "level": level},
               "notes": notes}
    return {"table": table, "settings": settings, "frames": frames, "mats": mats, "corpora": corpora,
            "notes": notes, "summary": summary}


def tex_numbers(summary: dict) -> dict:
    """The numbers of a 05 summary for ``numbers.tex``: ``ppl_tau_average/<setting>/<group>`` and its
    interval as ``.../lo`` and ``.../hi``."""
    out = {}
    for setting, groups in summary["tau_average"].items():
        for group, value in groups.items():
            key = f"ppl_tau_average/{setting}/{group}"
            out[key] = value
            out[f"{key}/lo"], out[f"{key}/hi"] = summary["tau_average_ci"].get(setting, {}).get(group, [np.nan] * 2)
    return out
