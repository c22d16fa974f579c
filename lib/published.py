"""The train-before-test paper's published results: where the file is and how it reads.

``all_results.json`` (lm-harmony; the README's Data section) maps ``{protocol: {benchmark: {model: score}}}``
for ``direct_eval`` and ``train_before_test``, standard errors under ``<protocol>_stderr``.
:func:`parse_results` reads and checks it. :mod:`runner.published` imports it into a profile's
results store (the ``published`` profile's ``prepare`` hook), so the notebooks read published and our
own results the same way, and compares a first run with it.
"""

from __future__ import annotations

import math
from pathlib import Path

from . import data, paths, store
from .util import CorruptFile, read_json

RESULTS_FILE = "lm-harmony/all_results.json"
SOURCE = {"repository": "github.com/socialfoundations/lm-harmony",
          "commit": "88bc5c352f6491bc9e6c19a361096a31c4df6e16", "path": "notebooks/all_results.json"}
MISSING_STDERR = ("N/A", "NA", "", None)   # how the file spells "no standard error" (perplexity corpora)


def results_path() -> Path:
    """Path of the published ``all_results.json`` (raises lib.paths.DataMissing with what to do)."""
    return paths.data_dir(RESULTS_FILE) / RESULTS_FILE


def parse_results(path: str | Path) -> dict[str, dict[str, dict[str, dict[str, float | None]]]]:
    """Read and validate ``all_results.json``: ``{protocol: {benchmark: {model: {"score", "stderr"}}}}``;
    a bad file raises :class:`lib.store.StoreError` (:func:`lib.data.corrupt`)."""
    def bad(reason: str) -> store.StoreError:
        return store.StoreError(str(data.corrupt(path, reason)))

    try:
        raw = read_json(path)
    except CorruptFile as exc:
        raise bad(str(exc).split(": ", 1)[1]) from None
    if not isinstance(raw, dict):
        raise bad("expected a JSON object {protocol: {benchmark: {model: score}}}")
    allowed = set(store.PROTOCOLS) | {p + "_stderr" for p in store.PROTOCOLS}
    unknown = sorted(set(raw) - allowed)
    if unknown:
        raise bad(f"unknown protocol key(s) {unknown}; expected {sorted(allowed)}")
    out: dict[str, dict[str, dict[str, dict[str, float | None]]]] = {}
    for protocol in store.PROTOCOLS:
        if protocol not in raw:
            continue
        scores, errors = raw[protocol], raw.get(protocol + "_stderr", {})
        if not isinstance(scores, dict) or not isinstance(errors, dict):
            raise bad(f"{protocol!r} must map benchmark -> {{model: score}}")
        out[protocol] = {}
        for bench, by_model in scores.items():
            if not isinstance(by_model, dict):
                raise bad(f"{protocol}/{bench}: expected {{model: score}}")
            errs = errors.get(bench, {}) or {}
            out[protocol][bench] = {}
            for model, score in by_model.items():
                if isinstance(score, bool) or not isinstance(score, (int, float)) or not math.isfinite(score):
                    raise bad(f"{protocol}/{bench}/{model}: score {score!r} is not a finite number")
                err = errs.get(model)
                if err in MISSING_STDERR:
                    err = None
                if err is not None and (isinstance(err, bool) or not isinstance(err, (int, float))):
                    raise bad(f"{protocol}_stderr/{bench}/{model}: {err!r} is not a number")
                out[protocol][bench][model] = {"score": float(score),
                                               "stderr": float(err) if err is not None else None}
    if not out:
        raise bad(f"none of the protocols {list(store.PROTOCOLS)} is present")
    return out
