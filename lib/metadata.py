"""What we know about benchmarks and models: category, metric, family, size, pre-training compute.

Two built-in tables describe the train-before-test paper's world (24 benchmarks + 3 perplexity
corpora, 61 models); a store's ``_meta/benchmarks.json`` and ``_meta/models.json`` extend or override
them field by field, so tiny models, the mini-world zoo and local tasks get metadata the same way::

    benchmark_info("nq_open")            -> Benchmark(category="Question Answering", metric="exact_match", ...)
    model_info("Qwen/Qwen2-7B-Instruct") -> ModelInfo(family="Qwen", params_b=7.62, instruct=True, ...)
    model_info("tiny-a", store=ctx.store)   # from the store's _meta/models.json

Pre-training compute (tokens in T, FLOPs in 1e21) comes from the ObsScaling table of base models
(``obsscaling/base_llm_benchmark_eval.csv`` in the published data), joined by model id:
exact id, then a documented alias (:data:`COMPUTE_ALIASES`), then a normalised id (case,
organisation and a ``Meta-`` prefix ignored). An instruction-tuned model inherits its base model's
pre-training compute (instruction tuning adds a negligible share); ``extra["compute_source"]``
says where each number came from. Without the published data the compute fields are None.

Unknown names raise :class:`MetadataError` naming the culprit and the closest known names.
"""

from __future__ import annotations

import csv
import functools
import math
import os
import re
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from . import data, paths
from .errors import UserError
from .store import read_meta
from .util import did_you_mean, note_read

OBSSCALING_CSV = "obsscaling/base_llm_benchmark_eval.csv"
PERPLEXITY = "Perplexity"
CATEGORIES = ("Language Understanding", "Commonsense Reasoning", "Question Answering",
              "Physics/Biology/Chemistry", "Math", "Medicine", PERPLEXITY)
LOWER_IS_BETTER_METRICS = {"bits_per_byte", "byte_perplexity", "word_perplexity", "perplexity"}


class MetadataError(UserError, KeyError):
    """A benchmark or model has no metadata (the message names it and the closest known names)."""

    def __str__(self) -> str:          # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


MC, GEN, PPL = "multiple_choice", "generate_until", "loglikelihood_rolling"   # lm-eval output types


@dataclass(frozen=True, kw_only=True)
class Benchmark:
    """The one record of a benchmark or perplexity corpus, built by keyword; ``higher_is_better``
    follows from the metric when not given."""
    name: str
    category: str
    metric: str
    higher_is_better: bool | None = None
    filter: str = "none"           # lm-eval filter whose value is reported ("none": unfiltered)
    kind: str = MC                 # lm-eval output_type
    analogue: str | None = None    # the paper benchmark a synthetic one mirrors
    source: str | None = None      # where the record comes from (e.g. "miniworld")
    chance: float | None = None    # the metric's value for random answers (1 / choices; 0 for mcc and
                                   # exact match); None: unknown or not meaningful (perplexity)

    def __post_init__(self):
        if self.higher_is_better is None:
            object.__setattr__(self, "higher_is_better", self.metric not in LOWER_IS_BETTER_METRICS)

    @property
    def is_perplexity(self) -> bool:
        return self.category == PERPLEXITY or self.metric in LOWER_IS_BETTER_METRICS

    def record(self) -> dict:
        """The fields other than ``name`` (what ``<store>/_meta/benchmarks.json`` holds)."""
        return {k: v for k, v in asdict(self).items() if k != "name"}


@dataclass(frozen=True)
class ModelInfo:
    model: str
    family: str
    params_b: float | None = None          # parameters, billions
    instruct: bool = False                 # instruction-tuned / chat variant
    pretrain_tokens_t: float | None = None  # pre-training tokens, trillions
    flops_1e21: float | None = None        # pre-training compute, 1e21 FLOPs
    extra: dict = field(default_factory=dict)


# --------------------------------------------------------------------------- benchmarks
_LU, _CR, _QA = "Language Understanding", "Commonsense Reasoning", "Question Answering"
_PBC, _MATH, _MED = "Physics/Biology/Chemistry", "Math", "Medicine"


# The paper's 24 benchmarks (its metric and filter choices; chance = 1 / number of answer choices)
# and its 3 perplexity corpora.
BENCHMARKS: dict[str, Benchmark] = {b.name: b for b in (
    *(Benchmark(name=n, category=_LU, metric="acc", chance=c) for n, c in
      (("mnli", 1 / 3), ("qnli", 0.5), ("rte", 0.5), ("sst2", 0.5), ("mrpc", 0.5), ("qqp", 0.5), ("wic", 0.5),
       ("anli_r1", 1 / 3))),
    Benchmark(name="cola", category=_LU, metric="mcc", chance=0.0),
    *(Benchmark(name=n, category=_CR, metric="acc", chance=c) for n, c in
      (("winogrande", 0.5), ("commonsense_qa", 0.2), ("social_iqa", 1 / 3))),
    Benchmark(name="hellaswag", category=_CR, metric="acc_norm", chance=0.25),
    Benchmark(name="boolq", category=_QA, metric="acc", chance=0.5),
    *(Benchmark(name=n, category=_QA, metric="acc_norm", chance=0.25) for n in
      ("openbookqa", "arc_easy", "arc_challenge")),
    Benchmark(name="nq_open", category=_QA, metric="exact_match", filter="remove_whitespace", kind=GEN, chance=0.0),
    Benchmark(name="sciq", category=_PBC, metric="acc_norm", chance=0.25),
    Benchmark(name="piqa", category=_PBC, metric="acc_norm", chance=0.5),
    Benchmark(name="mathqa", category=_MATH, metric="acc_norm", chance=0.2),
    Benchmark(name="gsm8k", category=_MATH, metric="exact_match", filter="flexible-extract", kind=GEN, chance=0.0),
    *(Benchmark(name=n, category=_MED, metric="acc_norm", chance=0.25) for n in ("medmcqa", "headqa_en")),
    *(Benchmark(name=n, category=PERPLEXITY, metric="bits_per_byte", kind=PPL)
      for n in ("wiki_2025", "arxiv_2025", "stackexchange_2025")),
)}

# --------------------------------------------------------------------------- models
# id: (family, series, params_b, instruct, base model of an instruct variant)
# Parameter counts (billions) as reported on the models' Hugging Face cards, rounded.
_MODELS: dict[str, tuple[str, str, float, bool, str | None]] = {}


def _add(family: str, series: str, rows: Iterable[tuple[str, float]], instruct: dict[str, str] | None = None):
    for model, size in rows:
        _MODELS[model] = (family, series, size, False, None)
        if instruct and model in instruct:
            _MODELS[instruct[model]] = (family, series, size, True, model)


_add("GPT-2", "GPT-2", [("openai-community/gpt2", 0.124), ("openai-community/gpt2-medium", 0.355),
                        ("openai-community/gpt2-large", 0.774), ("openai-community/gpt2-xl", 1.558)])
_add("Pythia", "Pythia", [("EleutherAI/pythia-70m-deduped", 0.070), ("EleutherAI/pythia-160m-deduped", 0.162),
                          ("EleutherAI/pythia-410m-deduped", 0.405), ("EleutherAI/pythia-1b-deduped", 1.01),
                          ("EleutherAI/pythia-1.4b-deduped", 1.41), ("EleutherAI/pythia-2.8b-deduped", 2.78),
                          ("EleutherAI/pythia-6.9b-deduped", 6.86), ("EleutherAI/pythia-12b", 11.8)])
_LLAMA = [("meta-llama/Meta-Llama-3-8B", 8.03), ("meta-llama/Llama-3.1-8B", 8.03),
          ("meta-llama/Llama-3.2-1B", 1.24), ("meta-llama/Llama-3.2-3B", 3.21)]
_add("Llama", "Llama-3", _LLAMA, {m: m + "-Instruct" for m, _ in _LLAMA})
_Q15 = [("Qwen/Qwen1.5-0.5B", 0.62), ("Qwen/Qwen1.5-1.8B", 1.84), ("Qwen/Qwen1.5-4B", 3.95),
        ("Qwen/Qwen1.5-7B", 7.72), ("Qwen/Qwen1.5-14B", 14.2)]
_add("Qwen", "Qwen1.5", _Q15, {m: m + "-Chat" for m, _ in _Q15})
_Q2 = [("Qwen/Qwen2-0.5B", 0.49), ("Qwen/Qwen2-1.5B", 1.54), ("Qwen/Qwen2-7B", 7.62)]
_add("Qwen", "Qwen2", _Q2, {m: m + "-Instruct" for m, _ in _Q2})
_Q25 = [("Qwen/Qwen2.5-0.5B", 0.49), ("Qwen/Qwen2.5-1.5B", 1.54), ("Qwen/Qwen2.5-3B", 3.09),
        ("Qwen/Qwen2.5-7B", 7.62), ("Qwen/Qwen2.5-14B", 14.7)]
_add("Qwen", "Qwen2.5", _Q25, {m: m + "-Instruct" for m, _ in _Q25})
_GEMMA = [("google/gemma-2b", 2.51), ("google/gemma-7b", 8.54), ("google/gemma-2-2b", 2.61),
          ("google/gemma-2-9b", 9.24)]
_add("Gemma", "Gemma", _GEMMA, {m: m + "-it" for m, _ in _GEMMA})
_add("Yi", "Yi", [("01-ai/Yi-6B", 6.06), ("01-ai/Yi-9B", 8.83), ("01-ai/Yi-1.5-6B", 6.06),
                  ("01-ai/Yi-1.5-9B", 8.83)],
     {"01-ai/Yi-6B": "01-ai/Yi-6B-Chat", "01-ai/Yi-1.5-6B": "01-ai/Yi-1.5-6B-Chat",
      "01-ai/Yi-1.5-9B": "01-ai/Yi-1.5-9B-Chat"})

# Our id -> ObsScaling id, where the normalised ids differ. Each entry says why the numbers apply.
COMPUTE_ALIASES: dict[str, str] = {
    # Pythia-12b (Pile, 300B tokens) and pythia-12b-deduped (deduplicated Pile, ~1.5 epochs = the
    # same 300B tokens) share architecture, size and token count, hence pre-training FLOPs.
    "EleutherAI/pythia-12b": "EleutherAI/pythia-12b-deduped",
}


# --------------------------------------------------------------------------- helpers
def _unknown(kind: str, name: str, known: Iterable[str], hint: str) -> MetadataError:
    return MetadataError(f"no metadata for {kind} {name!r}{did_you_mean(name, known, n=3, cutoff=0.5)} ({hint})")


def _store_records(store: str | Path | None, kind: str) -> dict[str, dict]:
    if store is None or not Path(store).is_dir():
        return {}
    return read_meta(store, kind)


def _normalise(model_id: str) -> str:
    name = model_id.rsplit("/", 1)[-1].lower()
    return re.sub(r"^meta-", "", name)


def _float_or_none(text: str | None) -> float | None:
    try:
        value = float(text) if text not in (None, "") else None
    except ValueError:
        return None
    return value if value is not None and math.isfinite(value) else None


@functools.lru_cache(maxsize=4)
def _read_obsscaling(path: str) -> dict[str, dict[str, Any]]:
    try:
        with open(path, newline="", encoding="utf-8") as fh:
            rows = list(csv.DictReader(fh))
    except (UnicodeDecodeError, csv.Error) as exc:
        raise data.corrupt(path, f"{type(exc).__name__}: {exc}") from None
    need = {"Model", "Model Family", "Model Size (B)", "Pretraining Data Size (T)", "FLOPs (1E21)"}
    if not rows or not need <= set(rows[0]):
        raise data.corrupt(path, f"expected columns {sorted(need)}, found {sorted(rows[0]) if rows else 'no rows'}")
    return {r["Model"]: {"id": r["Model"], "family": r["Model Family"],
                         "params_b": _float_or_none(r["Model Size (B)"]),
                         "pretrain_tokens_t": _float_or_none(r["Pretraining Data Size (T)"]),
                         "flops_1e21": _float_or_none(r["FLOPs (1E21)"])} for r in rows}


def obsscaling_table() -> dict[str, dict[str, Any]]:
    """The ObsScaling base-model table keyed by its model id ({} when the published data is absent)."""
    if not paths.has_data(OBSSCALING_CSV):
        return {}
    path = paths.data_dir(OBSSCALING_CSV) / OBSSCALING_CSV
    note_read(path)
    return _read_obsscaling(str(path))


def obsscaling_match(model_id: str, table: dict[str, dict] | None = None) -> dict[str, Any] | None:
    """The ObsScaling row of ``model_id`` (exact id, alias, then normalised id), or None."""
    table = obsscaling_table() if table is None else table
    if model_id in table:
        return table[model_id]
    if model_id in COMPUTE_ALIASES and COMPUTE_ALIASES[model_id] in table:
        return table[COMPUTE_ALIASES[model_id]]
    key = _normalise(model_id)
    hits = [row for mid, row in table.items() if _normalise(mid) == key]
    return hits[0] if len(hits) == 1 else None


def _compute_for(model_id: str, base: str | None) -> dict[str, Any]:
    row, note = obsscaling_match(model_id), ""
    if row is None and base is not None:
        row, note = obsscaling_match(base), " (base model)"
    if row is None:
        return {}
    return {"pretrain_tokens_t": row["pretrain_tokens_t"], "flops_1e21": row["flops_1e21"],
            "extra": {"compute_source": f"obsscaling:{row['id']}{note}"}}


# --------------------------------------------------------------------------- public API
def _benchmark_info(name: str, records: dict[str, dict]) -> Benchmark:
    base: dict[str, Any] = BENCHMARKS[name].record() if name in BENCHMARKS else {}
    if name in records:
        base.update({k: v for k, v in records[name].items() if k in Benchmark.__dataclass_fields__})
    if not base:
        raise _unknown("benchmark", name, set(BENCHMARKS) | set(records),
                       "add it to lib.metadata or to the store's _meta/benchmarks.json")
    for key in ("category", "metric"):
        if not base.get(key):
            raise MetadataError(f"metadata of benchmark {name!r} lacks {key!r}")
    base.pop("name", None)
    if base.get("filter") is None:
        base["filter"] = "none"
    if "kind" not in base and base["category"] == PERPLEXITY:
        base["kind"] = PPL
    return Benchmark(name=name, **base)


def benchmark_info(name: str, store: str | Path | None = None) -> Benchmark:
    """Category, metric, direction, filter and lm-eval kind of benchmark ``name``."""
    return _benchmark_info(name, _store_records(store, "benchmarks"))


def _model_info(model_id: str, records: dict[str, dict]) -> ModelInfo:
    base: dict[str, Any] = {}
    extra: dict[str, Any] = {}
    if model_id in _MODELS:
        family, series, size, instruct, base_model = _MODELS[model_id]
        base = {"family": family, "params_b": size, "instruct": instruct}
        extra = {"series": series}
        if base_model:
            extra["base_model"] = base_model
        computed = _compute_for(model_id, base_model)
        extra.update(computed.pop("extra", {}))
        base.update(computed)
    if model_id in records:
        own = dict(records[model_id])
        extra.update(own.pop("extra", None) or {})
        own.pop("model", None)
        for key, value in own.items():
            (base if key in ModelInfo.__dataclass_fields__ else extra)[key] = value
    elif not base:
        raise _unknown("model", model_id, set(_MODELS) | set(records),
                       "add it to lib.metadata or to the store's _meta/models.json")
    if not base.get("family"):
        raise MetadataError(f"metadata of model {model_id!r} lacks 'family'")
    base["instruct"] = bool(base.get("instruct", False))
    return ModelInfo(model=model_id, extra=extra, **base)


def model_info(model_id: str, store: str | Path | None = None) -> ModelInfo:
    """Family, size, base vs instruct and pre-training compute of ``model_id``."""
    return _model_info(model_id, _store_records(store, "models"))


def benchmarks_frame(names: Iterable[str], store: str | Path | None = None) -> pd.DataFrame:
    """One row per benchmark (index ``benchmark``): the fields of :class:`Benchmark`."""
    records = _store_records(store, "benchmarks")
    rows = [asdict(_benchmark_info(n, records)) for n in names]
    cols = [f.name for f in fields(Benchmark)]
    return pd.DataFrame(rows, columns=cols).rename(columns={"name": "benchmark"}).set_index("benchmark")


def require_compute(ids: Iterable[str]) -> None:
    """Raise :class:`lib.paths.DataMissing` when some of ``ids`` take their pre-training compute from
    the published ObsScaling table and it is absent: an analysis of compute would quietly shrink."""
    needing = [m for m in ids if m in _MODELS]
    if needing and not paths.has_data(OBSSCALING_CSV):
        raise paths.DataMissing(
            f"the pre-training compute of {len(needing)} models (e.g. {needing[0]}) comes from the published "
            f"data's {OBSSCALING_CSV}, not found in {paths.show(paths.data_root())}: "
            f"{paths.provide_data(os.environ.get(paths.DATA_ENV))}")


def models_frame(ids: Iterable[str], store: str | Path | None = None, need_compute: bool = False) -> pd.DataFrame:
    """One row per model (index ``model``): the fields of :class:`ModelInfo`, ``series``, ``base_model``
    and ``compute_source`` from ``extra``, and ``prepared``. ``need_compute``: :func:`require_compute`."""
    ids = list(ids)
    if need_compute:
        require_compute(ids)
    records = _store_records(store, "models")
    extras = ("series", "base_model", "compute_source")
    rows = []
    for m in ids:
        row = asdict(_model_info(m, records))
        extra = row.pop("extra")
        rows.append({**row, **{k: extra.get(k) for k in extras}, "prepared": bool(extra.get("prepared"))})
    cols = [f.name for f in fields(ModelInfo) if f.name != "extra"] + [*extras, "prepared"]
    df = pd.DataFrame(rows, columns=cols).set_index("model")
    for col in ("params_b", "pretrain_tokens_t", "flops_1e21"):
        df[col] = pd.to_numeric(df[col], errors="coerce").astype(float)
    df[["instruct", "prepared"]] = df[["instruct", "prepared"]].astype(bool)
    return df


def model_types(frame: pd.DataFrame) -> pd.Series:
    """Per model of a :func:`models_frame`: ``"base"``, ``"instruct"`` or ``"prepared"``."""
    return pd.Series(np.where(frame["prepared"], "prepared", np.where(frame["instruct"], "instruct", "base")),
                     index=frame.index)


def perplexity_benchmarks(names: Iterable[str], store: str | Path | None = None) -> list[str]:
    """Those of ``names`` that are perplexity corpora (category Perplexity or a perplexity metric)."""
    records = _store_records(store, "benchmarks")
    return [n for n in names if _benchmark_info(n, records).is_perplexity]
