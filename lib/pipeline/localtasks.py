"""Write local lm-eval tasks: JSONL splits plus a task YAML that points at them by absolute path.

lm-eval resolves relative ``data_files`` against the working directory, not the YAML file, so the
YAML is generated with absolute paths. The folder can be handed to
``lm_eval.tasks.TaskManager(include_path=...)``. Record formats by kind:

- ``multiple_choice``: ``{"query": str, "choices": [str, ...], "label": int}``
- ``generate_until``: ``{"question": str, "answer": str}``
- ``loglikelihood_rolling``: ``{"text": str}``
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path

import yaml

from ..util import atomic_write_text

KINDS = ("multiple_choice", "generate_until", "loglikelihood_rolling")
REQUIRED_FIELDS = {"multiple_choice": ("query", "choices", "label"),
                   "generate_until": ("question", "answer"),
                   "loglikelihood_rolling": ("text",)}
_METRIC_SPECS = {
    "acc": {"metric": "acc", "aggregation": "mean", "higher_is_better": True},
    "acc_norm": {"metric": "acc_norm", "aggregation": "mean", "higher_is_better": True},
    "mcc": {"metric": "mcc", "aggregation": "matthews_corrcoef", "higher_is_better": True},
    "exact_match": {"metric": "exact_match", "aggregation": "mean", "higher_is_better": True,
                    "ignore_case": True, "ignore_punctuation": False},
    "word_perplexity": {"metric": "word_perplexity", "aggregation": "weighted_perplexity",
                        "higher_is_better": False},
    "byte_perplexity": {"metric": "byte_perplexity", "aggregation": "weighted_perplexity",
                        "higher_is_better": False},
    "bits_per_byte": {"metric": "bits_per_byte", "aggregation": "bits_per_byte", "higher_is_better": False},
}
DEFAULT_METRICS = {"multiple_choice": ["acc", "acc_norm"], "generate_until": ["exact_match"],
                   "loglikelihood_rolling": ["word_perplexity", "byte_perplexity", "bits_per_byte"]}


def _check_records(name: str, split: str, kind: str, records: list[dict]) -> None:
    if not records:
        raise ValueError(f"local task {name!r}: split {split!r} is empty")
    for i, rec in enumerate(records):
        missing = [f for f in REQUIRED_FIELDS[kind] if f not in rec]
        if missing:
            raise ValueError(f"local task {name!r}: {split}[{i}] lacks field(s) {missing}")
        if kind == "multiple_choice" and not (0 <= int(rec["label"]) < len(rec["choices"])):
            raise ValueError(f"local task {name!r}: {split}[{i}] label {rec['label']} out of range")


def write_task(task_dir: str | Path, name: str, kind: str, splits: dict[str, Iterable[dict]], *,
               metrics: list[str] | None = None, prompt: str | None = None, target: str | None = None,
               choices: list[str] | str | None = None, until: list[str] | None = None,
               max_gen_toks: int = 16, tags: list[str] | None = None, description: str = "") -> Path:
    """Write ``<task_dir>/<name>/{split}.jsonl`` for each split of ``splits`` ({split: records}) and
    ``<task_dir>/<name>/<name>.yaml`` (returned); ``prompt``/``target``/``choices`` override the
    Jinja templates of the record formats above."""
    if kind not in KINDS:
        raise ValueError(f"local task {name!r}: unknown kind {kind!r}; expected one of {KINDS}")
    metrics = metrics or DEFAULT_METRICS[kind]
    unknown = [m for m in metrics if m not in _METRIC_SPECS]
    if unknown:
        raise ValueError(f"local task {name!r}: unknown metric(s) {unknown}; known: {sorted(_METRIC_SPECS)}")
    folder = Path(os.path.abspath(task_dir)) / name      # as reached (a linked outputs/ keeps its name)
    data_files = {}
    for split, recs in splits.items():
        recs = list(recs)
        _check_records(name, split, kind, recs)
        path = folder / f"{split}.jsonl"
        atomic_write_text(path, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in recs))
        data_files[split] = str(path)
    spec: dict = {"task": name, "dataset_path": "json", "dataset_kwargs": {"data_files": data_files},
                  "output_type": kind}
    if tags:
        spec["tag"] = list(tags)
    if description:
        spec["description"] = description
    for split, key in (("train", "training_split"), ("validation", "validation_split"),
                       ("test", "test_split")):
        if split in data_files:
            spec[key] = split
    if kind == "multiple_choice":
        spec["doc_to_text"] = prompt or "{{query}}"
        spec["doc_to_target"] = target or "{{label}}"
        spec["doc_to_choice"] = choices if choices is not None else "{{choices}}"
    elif kind == "generate_until":
        spec["doc_to_text"] = prompt or "{{question}}"
        spec["doc_to_target"] = target or "{{answer}}"
        spec["target_delimiter"] = " "
        spec["generation_kwargs"] = {"until": until or ["\n"], "do_sample": False, "temperature": 0.0,
                                     "max_gen_toks": max_gen_toks}
        spec["filter_list"] = [{"name": "remove_whitespace", "filter": [
            {"function": "remove_whitespace"}, {"function": "take_first"}]}]
    else:
        spec["doc_to_text"] = ""
        spec["doc_to_target"] = target or "{{text}}"
    spec["metric_list"] = [dict(_METRIC_SPECS[m]) for m in metrics]
    spec["metadata"] = {"version": 1.0}
    yaml_path = folder / f"{name}.yaml"
    atomic_write_text(yaml_path, yaml.safe_dump(spec, sort_keys=False, allow_unicode=True))
    return yaml_path
