"""Which data a unit reads: each lm-eval task's dataset repository and revision, the configs of the
lm-eval release the paper ran (0.4.8, kept as data), a profile's pinned revisions, and the record
every unit keeps of the documents it chose.

The paper vendored lm-eval 0.4.8. The pinned lm-eval keeps the prompts, metrics and filters of the
paper's 24 tasks, but moved most of them to re-homed hub repositories (``glue`` ->
``nyu-mll/glue``, ``social_i_qa`` -> ``lighteval/siqa``, ``gsm8k`` -> ``openai/gsm8k``, ...):
:func:`paper_configs` holds the 0.4.8 ``dataset_path`` and ``dataset_name`` of every task, read
from the 0.4.8 wheel (:func:`paper_configs_from_wheel`; ``lm_eval_0.4.8.json`` says which wheel).
The paper's documents are chosen by position (the random_split carve and the permutation caps,
:func:`lib.pipeline.tasks.plan_splits`), so a repository that orders its rows differently changes
every chosen document while the positions stay the same. So every unit records
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

import functools
import hashlib
import json
import re
import tempfile
import zipfile
from collections.abc import Iterable
from pathlib import Path

from ..errors import UserError

PAPER_LM_EVAL = "0.4.8"
PAPER_CONFIGS_FILE = Path(__file__).with_name("lm_eval_0.4.8.json")
ROLES = ("train", "validation", "test")
_COMMIT = re.compile(r"[0-9a-f]{40}")


class DatasetError(UserError, ValueError):
    """A pinned revision or the configs file cannot be used (the message names it)."""


# ---------------------------------------------------------------------------------------------
# the paper's lm-eval configs (data) and the installed ones


@functools.lru_cache(maxsize=1)
def paper_configs() -> dict[str, dict]:
    """{task: {"dataset_path", "dataset_name", "yaml"}} of lm-eval 0.4.8 (:data:`PAPER_CONFIGS_FILE`)."""
    try:
        data = json.loads(PAPER_CONFIGS_FILE.read_text())
        return {name: dict(cfg) for name, cfg in data["tasks"].items()}
    except (OSError, ValueError, KeyError, AttributeError) as exc:
        raise DatasetError(f"{PAPER_CONFIGS_FILE}: cannot read the lm-eval {PAPER_LM_EVAL} configs "
                           f"({type(exc).__name__}: {exc}); restore it with `git checkout -- {PAPER_CONFIGS_FILE.name}`"
                           ) from None


def _yaml_source(path: str | Path) -> dict:
    """``dataset_path``, ``dataset_name`` and the pinned ``revision`` of a task YAML (includes
    resolved, functions not imported)."""
    from lm_eval.tasks._yaml_loader import load_yaml

    cfg = load_yaml(Path(path), resolve_func=False, recursive=True)
    return {"task": cfg.get("task"), "dataset_path": cfg.get("dataset_path"), "dataset_name": cfg.get("dataset_name"),
            "revision": (cfg.get("dataset_kwargs") or {}).get("revision")}


def task_source(manager, name: str) -> dict:
    """What the installed lm-eval's YAML of ``name`` says about its data (no dataset is loaded)."""
    entry = manager.task_index[name]
    if entry.yaml_path is None:
        return {"task": name, "dataset_path": None, "dataset_name": None, "revision": None}
    return _yaml_source(entry.yaml_path)


def rehomed(sources: dict[str, dict]) -> dict[str, tuple[str, str]]:
    """{task: (0.4.8 dataset_path, installed dataset_path)} for the tasks of ``sources``
    ({task: :func:`task_source`}) whose repository is not the one lm-eval 0.4.8 named."""
    paper = paper_configs()
    return {t: (paper[t]["dataset_path"], s["dataset_path"]) for t, s in sources.items()
            if t in paper and paper[t]["dataset_path"] != s["dataset_path"]}


def paper_configs_from_wheel(wheel: str | Path, tasks: Iterable[str]) -> dict:
    """The content of :data:`PAPER_CONFIGS_FILE` for ``tasks``, read from an lm-eval wheel (``pip
    download --no-deps lm_eval==0.4.8``) with lm-eval's own YAML loader; the wheel is named with its
    sha256 so the file says where it came from."""
    from ..util import sha256_file

    wheel, tasks = Path(wheel), list(tasks)
    found: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as tmp, zipfile.ZipFile(wheel) as zf:
        zf.extractall(tmp, [n for n in zf.namelist() if n.startswith("lm_eval/tasks/")])
        root = Path(tmp) / "lm_eval" / "tasks"
        for path in sorted(root.glob("**/*.yaml")):
            try:
                src = _yaml_source(path)
            except Exception:  # noqa: BLE001 - lm-eval's own registry skips YAML it cannot parse, so does this
                continue
            if src["task"] in tasks and src["task"] not in found:
                found[src["task"]] = {"dataset_path": src["dataset_path"], "dataset_name": src["dataset_name"],
                                      "yaml": path.relative_to(root).as_posix()}
    missing = [t for t in tasks if t not in found]
    if missing:
        raise DatasetError(f"{wheel.name}: no task YAML for {missing}")
    return {"lm_eval": PAPER_LM_EVAL,
            "source": f"{wheel.name} (sha256 {sha256_file(wheel)}) from PyPI, `pip download --no-deps "
                      f"lm_eval=={PAPER_LM_EVAL}`; lm_eval/tasks/<yaml> of each task, includes resolved",
            "tasks": {t: found[t] for t in tasks}}


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
