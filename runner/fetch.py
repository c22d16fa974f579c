"""``make models PROFILE=p``: every model and dataset a profile needs, fetched and checked before any
GPU job starts, so that a gated model or a missing dataset stops the run here, named in one line,
and not hours later in a job.

Whether the hub answers at all is asked once first (:mod:`lib.pipeline.hub`); weights go into the
hub cache (``HF_HOME``), never into the repository's own (the paper's 61 models take about 0.7 TB).
What it prints of the datasets: the table their YAML gives before any is loaded (:func:`dataset_lines`),
beside the repositories of lm-eval 0.4.8, the paper's (:func:`paper_configs`, kept as data in
``lm_eval_0.4.8.json``, read from the 0.4.8 wheel by :func:`paper_configs_from_wheel`), and, once
loaded, each one's record (:func:`record_lines`; :func:`lib.pipeline.datasets.record`).

``python -m runner.fetch PROFILE [--check-only] [--allow-repo-cache]``
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
import tempfile
import zipfile
from collections.abc import Iterable
from pathlib import Path

from lib import paths
from lib.errors import UserError
from lib.params import load_profile
from lib.pipeline import datasets, hub
from lib.util import sha256_file

GATED_HELP = ("request access on each model's hub page with the account whose token this machine uses "
              "(HF_TOKEN, or `hf auth login`), then run `make models PROFILE={profile}` again")


class HubError(UserError, RuntimeError):
    """Models or datasets cannot be fetched (the message names them and what to do)."""


def profile_needs(profile: str) -> tuple[list[str], list[str]]:
    """(models, tasks) a profile's stages 01-03 name."""
    prof = load_profile(profile)
    models: list[str] = []
    for stage in ("02_finetune", "03_direct_eval"):
        if stage in prof.stages:
            models += [m for m in prof.params(stage)["models"] if m not in models]
    s1 = prof.params("01_select_benchmarks") if "01_select_benchmarks" in prof.stages else {}
    return models, list(s1.get("tasks", [])) + list(s1.get("corpora", []))


def _weight_patterns(files: list[str]) -> list[str]:
    """What a model needs: configs, tokenizer files, and its weights (safetensors when present)."""
    weights = ["*.safetensors"] if any(f.endswith(".safetensors") for f in files) else ["*.bin"]
    return ["*.json", "*.model", "*.txt", "*.tiktoken", "tokenizer*"] + weights


def check_models(models: list[str], download: bool = True) -> dict[str, list[str]]:
    """Try every hub model (a local folder is checked for its config); returns problems by kind:
    ``gated`` (no access), ``missing`` (no such repository), ``failed`` (other errors, with the
    reason) and ``ok``. With ``download`` the configs, tokenizer and weights are fetched into the
    hub cache (``HF_HOME``)."""
    from huggingface_hub import HfApi, hf_hub_download, snapshot_download
    from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError

    out: dict[str, list[str]] = {"ok": [], "gated": [], "missing": [], "failed": []}
    api = HfApi()
    for m in models:
        if Path(m).expanduser().is_dir():
            (out["ok"] if (Path(m).expanduser() / "config.json").exists() else out["failed"]).append(m)
            continue
        try:
            hf_hub_download(m, "config.json")                  # raises for gated / unknown repositories
            if download:
                files = [s.rfilename for s in api.model_info(m).siblings or []]
                snapshot_download(m, allow_patterns=_weight_patterns(files))
            out["ok"].append(m)
        except GatedRepoError:
            out["gated"].append(m)
        except RepositoryNotFoundError:
            out["missing"].append(m)
        except Exception as exc:  # noqa: BLE001 - network, disk, permissions: reported per model
            out["failed"].append(f"{m} ({type(exc).__name__}: {str(exc).strip().splitlines()[0][:200]})")
    return out


def models_error(problems: dict[str, list[str]], profile: str) -> str | None:
    """One line per kind of problem, or None when every model is there."""
    lines = []
    if problems.get("gated"):
        lines.append(f"gated models need access ({len(problems['gated'])}): {', '.join(problems['gated'])}; "
                     + GATED_HELP.format(profile=profile))
    if problems.get("missing"):
        lines.append(f"models not found on the hub: {', '.join(problems['missing'])} (check the ids in "
                     f"params/{profile}.yaml)")
    if problems.get("failed"):
        lines.append(f"models that could not be fetched: {'; '.join(problems['failed'])}")
    return "\n".join(lines) or None


MODEL_STAGES = ("02_finetune", "03_direct_eval")       # the stages that load the models a profile names


def _named_models(prof, stages: list[str]):
    """(where it is named, entry) of each ``models`` entry of ``stages`` that load models."""
    for stage in (s for s in MODEL_STAGES if s in stages):
        scope = f"stages.{stage}" if "models" in (prof.stages.get(stage) or {}) else "common"
        for i, entry in enumerate(prof.params(stage).get("models") or []):
            if isinstance(entry, str) and not entry.startswith((".", "~")) and not Path(entry).exists():
                yield f"{prof.path}: {scope}.models[{i}]", entry


def check_named_models(prof, stages: list[str]) -> None:
    """Before prepare and any stage: the hub ids among the ``models`` of ``stages`` can be loaded: in
    the local cache when the hub is off (``HF_HUB_OFFLINE``), else the hub answers. Each failure is
    :class:`lib.params.ParamsError`, one line naming the params file and key."""
    from lib.params import ParamsError

    for where, entry in _named_models(prof, stages):
        if "/" not in entry or entry.startswith("/"):
            continue                         # a local folder, or a name the prepare step makes
        if hub.offline():
            if not hub.cached(entry):
                raise ParamsError(f"{where}: hub model {entry!r} is not in the local cache and HF_HUB_OFFLINE "
                                  f"is set: {hub.fix(f'make models PROFILE={prof.name}')}")
            continue
        try:
            hub.require(f"model {entry!r}", f"make models PROFILE={prof.name}")
        except hub.HubUnreachable as exc:
            raise ParamsError(f"{where}: hub model {entry!r}: {exc}") from None


def check_store_models(prof, stages: list[str]) -> None:
    """After prepare, before any stage: every name among the ``models`` of ``stages`` that is neither
    a hub id nor a folder is a model of the profile's store (what its prepare step built), else
    :class:`lib.params.ParamsError` naming the params file, the key and the closest names."""
    from lib import store
    from lib.params import ParamsError
    from lib.util import did_you_mean

    known = None
    for where, entry in _named_models(prof, stages):
        if "/" in entry:
            continue
        if known is None:
            root = paths.store_dir(prof.name)
            known = [k for k, v in store.read_meta(root, "models").items() if v.get("path")]
        if entry not in known:
            raise ParamsError(f"{where}: no model {entry!r} in this profile's store{did_you_mean(entry, known, n=3)} "
                              f"(its prepare step builds {len(known)} models: "
                              f"{paths.show(root / '_meta' / 'models.json')})")


def hub_cache() -> Path:
    """Where the hub puts model weights (``HF_HUB_CACHE``, else ``HF_HOME/hub``)."""
    from huggingface_hub import constants

    return Path(constants.HF_HUB_CACHE).expanduser().resolve()


# --------------------------------------------------------------------------- the paper's lm-eval configs
PAPER_LM_EVAL = "0.4.8"
PAPER_CONFIGS_FILE = Path(__file__).with_name("lm_eval_0.4.8.json")    # read from its wheel, kept as data


@functools.lru_cache(maxsize=1)
def paper_configs() -> dict[str, dict]:
    """{task: {"dataset_path", "dataset_name", "yaml"}} of lm-eval 0.4.8 (:data:`PAPER_CONFIGS_FILE`)."""
    try:
        data = json.loads(PAPER_CONFIGS_FILE.read_text())
        return {name: dict(cfg) for name, cfg in data["tasks"].items()}
    except (OSError, ValueError, KeyError, AttributeError) as exc:
        raise datasets.DatasetError(
            f"{PAPER_CONFIGS_FILE}: cannot read the lm-eval {PAPER_LM_EVAL} configs ({type(exc).__name__}: {exc}); "
            f"restore it with `git checkout -- {PAPER_CONFIGS_FILE.name}`") from None


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
        raise datasets.DatasetError(f"{wheel.name}: no task YAML for {missing}")
    return {"lm_eval": PAPER_LM_EVAL,
            "source": f"{wheel.name} (sha256 {sha256_file(wheel)}) from PyPI, `pip download --no-deps "
                      f"lm_eval=={PAPER_LM_EVAL}`; lm_eval/tasks/<yaml> of each task, includes resolved",
            "tasks": {t: found[t] for t in tasks}}


# --------------------------------------------------------------------------- what make models prints
def _short(rev: str | None) -> str:
    return "-" if not rev else rev[:12]


def config_lines(profile: str, sources: dict[str, dict], pinned: dict[str, str]) -> list[str]:
    """The dataset table of a profile's tasks as the installed lm-eval's YAML gives it (offline):
    repository, config name, lm-eval 0.4.8's repository, the pinned revision; then one line naming
    the tasks whose repository differs from 0.4.8's."""
    import lm_eval

    paper = paper_configs()
    moved = rehomed(sources)
    head = ("task", f"repository (lm-eval {lm_eval.__version__})", "config", f"lm-eval {PAPER_LM_EVAL}",
            "pinned revision")
    rows = [head]
    for task, s in sources.items():
        old = paper.get(task)
        then = "not in the paper" if old is None else ("same" if task not in moved else f"{old['dataset_path']}")
        rows.append((task, str(s["dataset_path"]), str(s["dataset_name"] or "-"), then,
                     pinned.get(task) or s.get("revision") or "none"))
    widths = [max(len(r[k]) for r in rows) for k in range(len(head))]
    lines = [f"[{profile}] datasets of {len(sources)} task(s):"]
    lines += ["  " + "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    if moved:
        lines.append(f"[{profile}] dataset_path differs from lm-eval {PAPER_LM_EVAL}'s (the paper's) for "
                     f"{len(moved)} of {len(sources)}: " + "; ".join(f"{t}: {a} -> {b}" for t, (a, b) in moved.items()))
    else:
        lines.append(f"[{profile}] every dataset_path is lm-eval {PAPER_LM_EVAL}'s")
    return lines


def unknown_line(profile: str, why: str) -> str:
    """The one line for what cannot be known without the datasets themselves."""
    return (f"[{profile}] resolved revisions, split fingerprints and document hashes: not known here ({why}); "
            f"`make models PROFILE={profile}` where the hub is reachable loads each dataset and prints them")


def record_lines(profile: str, rows: list[dict]) -> list[str]:
    """One line per loaded task of notebook 01's rows (:func:`lib.pipeline.tasks.select`): its
    resolved revision, split fingerprints and the hash of its chosen documents."""
    lines = []
    for r in rows:
        rec = r.get("dataset")
        if not rec:
            continue
        prints = ", ".join(f"{s} {_short(fp)}" for s, fp in rec["fingerprint"].items())
        lines.append(f"[{profile}]   {r['task']}: {rec['repository']}"
                     f"{'/' + rec['name'] if rec['name'] else ''} @ {_short(rec['resolved'] or rec['revision'])}"
                     f"{' (pinned ' + rec['revision'] + ')' if rec['revision'] else ''}; fingerprints {prints}; "
                     f"documents {_short(rec['documents']['all'])}")
    return lines


def dataset_lines(profile: str, names: list[str], s1: dict) -> list[str]:
    """What ``make models`` can say about a profile's datasets before loading any (``s1``: notebook
    01's parameters), from the tasks' YAML; raises :class:`lib.pipeline.datasets.DatasetError`."""
    from lib.pipeline import tasks as tk

    if not names:
        return []
    try:
        manager = tk.task_manager(tk.resolve_include_paths(s1.get("include_paths", []), paths.work_dir(profile)),
                                  s1.get("include_defaults", True))
        tk.check_names(manager, names)
    except tk.TaskError as exc:
        raise datasets.DatasetError(str(exc)) from None
    pinned = datasets.check_revisions(s1.get("dataset_revisions") or {}, names)
    lines = config_lines(profile, {n: task_source(manager, n) for n in names}, pinned)
    why = "HF_HUB_OFFLINE is set" if hub.offline() else hub.unreachable()
    if why:
        lines.append(unknown_line(profile, why if hub.offline() else f"the hub does not answer: {why}"))
    return lines


def fetch(profile: str, download: bool = True, timeout: float = 600.0, allow_repo_cache: bool = False) -> None:
    """``make models PROFILE=...``: fetch and check every model and dataset the profile needs,
    before any GPU job starts; raises :class:`HubError` naming what is missing. Weights are not
    downloaded into the repository's own cache (the paper's 61 models take about 0.7 TB) unless
    ``allow_repo_cache``."""
    from lib import params
    from lib.pipeline import tasks as tk

    prof = params.load_profile(profile)
    if prof.offline:                               # mini, smoke, real_cpu: built or converted here
        print(f"[{profile}] offline profile: no hub model or dataset to fetch (its prepare hook makes its models "
              f"and tasks: `make all PROFILE={profile}`)", flush=True)
        return
    models, task_names = profile_needs(profile)
    for line in dataset_lines(profile, task_names, prof.params("01_select_benchmarks")):
        print(line, flush=True)                    # what the task configs say, known offline
    cache = hub_cache()
    hub_models = [m for m in models if not Path(m).expanduser().is_dir()]
    if download and not allow_repo_cache and cache.is_relative_to(paths.ROOT) and hub_models:
        raise HubError(f"the hub cache {cache} lies inside the repository: set HF_HOME (or HF_HUB_CACHE) to "
                       "your shared model cache first, e.g. `export HF_HOME=$HOME/.cache/huggingface`, or pass "
                       "--allow-repo-cache")
    command = f"make models PROFILE={profile}"
    if hub_models and hub.offline():               # the cache is all there is: say at once what it lacks
        missing = [m for m in hub_models if not hub.cached(m)]
        if missing:
            raise HubError(f"HF_HUB_OFFLINE is set and the hub cache {cache} lacks {len(missing)} of {len(hub_models)} "
                           f"models ({', '.join(missing[:3])}{', ...' if len(missing) > 3 else ''}): "
                           f"{hub.fix(command)}")
    elif hub_models or task_names:                 # one quick request instead of five retries per file
        try:
            hub.require(f"profile {profile!r}", command)
        except hub.HubUnreachable as exc:
            raise HubError(str(exc)) from None
    print(f"[{profile}] {len(models)} models and {len(task_names)} tasks; hub cache: {cache}", flush=True)
    problems = check_models(models, download=download)
    print(f"[{profile}] models: {len(problems['ok'])} of {len(models)} ready", flush=True)
    s1 = prof.params("01_select_benchmarks")
    include = tk.resolve_include_paths(s1["include_paths"], paths.work_dir(profile))
    rows = tk.select(task_names, include, s1["include_defaults"], min_train=0, timeout=timeout,
                     rule=tk.SplitRule.from_params(s1)) if task_names else []
    unreachable = [f"{r['task']} ({r['note']})" for r in rows if r.get("count_source") != "dataset"]
    print(f"[{profile}] datasets: {len(rows) - len(unreachable)} of {len(rows)} loaded", flush=True)
    for line in record_lines(profile, rows):   # each dataset as loaded: revision, fingerprints, documents
        print(line, flush=True)
    error = models_error(problems, profile)
    if unreachable:
        error = (error + "\n" if error else "") + f"datasets that cannot be loaded: {'; '.join(unreachable)}"
    if error:
        raise HubError(error)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m runner.fetch", description=__doc__.splitlines()[0])
    ap.add_argument("profile")
    ap.add_argument("--check-only", action="store_true", help="check access without downloading weights")
    ap.add_argument("--allow-repo-cache", action="store_true", help="download into the repository's .cache/hf")
    args = ap.parse_args(argv)
    try:
        fetch(args.profile, download=not args.check_only, allow_repo_cache=args.allow_repo_cache)
    except (HubError, datasets.DatasetError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"[{args.profile}] every model and dataset is ready", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
