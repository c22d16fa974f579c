"""Which data a unit reads: each lm-eval task's dataset repository and revision, a profile's pinned
revisions, and the record every unit keeps of the documents it chose.

The paper vendored lm-eval 0.4.8. The pinned lm-eval keeps the prompts, metrics and filters of the
paper's 24 tasks, but moved most of them to re-homed hub repositories (``glue`` ->
``nyu-mll/glue``, ``social_i_qa`` -> ``lighteval/siqa``, ``gsm8k`` -> ``openai/gsm8k``, ...;
``make models`` compares them with 0.4.8's, :mod:`runner.fetch`). The paper's documents are chosen
by position (the random_split carve and the permutation caps, :func:`lib.pipeline.tasks.plan_splits`),
so a repository that orders its rows differently changes every chosen document while the positions
stay the same. So every unit records
(:func:`record`, in its provenance under ``dataset``):

- ``repository`` and ``name``: the task's ``dataset_path`` and ``dataset_name`` as lm-eval loaded it;
- ``revision``: the revision the profile pinned (``dataset_revisions`` of notebook 01, which reach
  ``datasets.load_dataset`` through the task's ``dataset_kwargs``: :func:`pinned_config`), else None;
- ``resolved``: the commit the datasets library loaded (the name of its cache folder, which for a hub
  repository is the commit's hash); None for local files;
- ``fingerprint``: a hash of each split the unit reads, all its rows in their order (the datasets
  library's own fingerprint of a local file changes from run to run, so it cannot be compared);
- ``documents``: a hash of the chosen documents themselves (each role's rows at its planned ids, in id
  order, as JSON), one per role and one over all: the same positions in re-ordered rows give another
  hash, so two runs that chose "the same" documents of different data can be told apart
  (:func:`differences`; the placement calibration names them, :mod:`lib.placement`).

``make models`` prints what the YAML says and, once loaded, the records (:mod:`runner.fetch`). This
module imports nothing of the pipeline: :mod:`lib.pipeline.tasks` uses it.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable
from pathlib import Path

from ..errors import UserError

ROLES = ("train", "validation", "test")
_COMMIT = re.compile(r"[0-9a-f]{40}")


class DatasetError(UserError, ValueError):
    """A pinned revision or the configs file cannot be used (the message names it)."""


# ---------------------------------------------------------------------------------------------
# a pinned revision


def check_revisions(revisions: dict, tasks: Iterable[str] | None = None) -> dict[str, str]:
    """``revisions`` ({task: revision}) checked: every value a non-empty string (a commit hash, a tag
    or a branch of the task's repository) and, given ``tasks``, every key one of them."""
    if not isinstance(revisions, dict):
        raise DatasetError(f"dataset_revisions must map task names to revisions, got {type(revisions).__name__}")
    for task, rev in revisions.items():
        if not isinstance(rev, str) or not rev.strip():
            raise DatasetError(f"dataset_revisions: the revision of {task!r} must be a non-empty string "
                               f"(a commit hash, tag or branch), got {rev!r}")
    if tasks is not None:
        from ..util import did_you_mean

        names = list(tasks)
        unknown = [t for t in revisions if t not in names]
        if unknown:
            raise DatasetError(f"dataset_revisions: {unknown[0]!r} is not one of the profile's tasks"
                               f"{did_you_mean(unknown[0], names)}")
    return dict(revisions)


def pinned_config(manager, name: str, revision: str) -> dict:
    """The full config of task ``name`` with ``revision`` in its ``dataset_kwargs``, as a dict that
    ``manager.load`` builds the task from (lm-eval passes ``dataset_kwargs`` on to
    ``datasets.load_dataset``, so the revision reaches the loader)."""
    from lm_eval.tasks._yaml_loader import load_yaml

    entry = manager.task_index[name]
    if entry.yaml_path is None:
        raise DatasetError(f"task {name!r} has no YAML config, so no revision can be pinned for it")
    cfg = dict(load_yaml(Path(entry.yaml_path), resolve_func=True, recursive=True))
    cfg["dataset_kwargs"] = {**(cfg.get("dataset_kwargs") or {}), "revision": revision}
    cfg["task"] = name
    return cfg


# ---------------------------------------------------------------------------------------------
# what a unit read


def _packaged(path: str | None) -> bool:
    """A datasets builder for local files (json, csv, parquet, text, ...), not a hub repository."""
    from datasets.packaged_modules import _PACKAGED_DATASETS_MODULES

    return path is None or path in _PACKAGED_DATASETS_MODULES or Path(str(path)).exists()


def resolved_revision(task, splits: Iterable[str]) -> str | None:
    """The commit of the task's hub repository that the datasets library loaded: the name of the cache
    folder its split files lie in (datasets names it after the commit); None for local files or
    a dataset held in memory."""
    if _packaged(task.config.dataset_path):
        return None
    found = set()
    for split in splits:
        for f in getattr(task.dataset[split], "cache_files", None) or []:
            name = Path(f["filename"]).parent.name
            if _COMMIT.fullmatch(name):
                found.add(name)
    return found.pop() if len(found) == 1 else None


def documents_hash(rows: Iterable[dict]) -> str:
    """sha256 of documents (dicts), each as sorted-key JSON on its own line, in the order given."""
    h = hashlib.sha256()
    for row in rows:
        h.update(json.dumps(row, sort_keys=True, default=str, ensure_ascii=False).encode())
        h.update(b"\n")
    return h.hexdigest()


def record(task, plan) -> dict:
    """What a unit (or notebook 01's plan of a task) read, for its provenance (the module docstring
    says what each field is): ``repository``, ``name``, ``revision``, ``resolved``, ``fingerprint``
    {split}, ``documents`` {role, "all"}."""
    cfg = task.config
    splits = sorted(set(plan.source.values()))
    by_role = {role: documents_hash(task.dataset[plan.source[role]].select(sorted(plan.ids[role])))
               for role in ROLES}
    return {"repository": cfg.dataset_path, "name": cfg.dataset_name,
            "revision": (cfg.dataset_kwargs or {}).get("revision"), "resolved": resolved_revision(task, splits),
            "fingerprint": {s: documents_hash(task.dataset[s]) for s in splits},
            "documents": {**by_role, "all": hashlib.sha256("".join(by_role[r] for r in ROLES).encode()).hexdigest()}}


def differences(ours: dict[str, dict], theirs: dict[str, dict]) -> list[str]:
    """``benchmark: what differs`` for the benchmarks both ``ours`` and ``theirs`` ({benchmark:
    :func:`record`}) recorded, where their chosen documents differ (and with them, where known, the
    repository or its resolved revision)."""
    out = []
    for bench in sorted(set(ours) & set(theirs)):
        a, b = ours[bench] or {}, theirs[bench] or {}
        da, db = (a.get("documents") or {}).get("all"), (b.get("documents") or {}).get("all")
        if not da or not db or da == db:
            continue
        why = [f"documents {da[:12]} here vs {db[:12]}"]
        for key in ("repository", "name", "resolved", "revision"):
            if a.get(key) != b.get(key) and (a.get(key) or b.get(key)):
                why.append(f"{key} {a.get(key)} vs {b.get(key)}")
        out.append(f"{bench} ({', '.join(why)})")
    return out
