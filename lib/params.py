"""Profiles: one YAML per profile in params/, holding only what departs from the notebooks' defaults.

A notebook's cell tagged ``parameters`` holds its defaults (literals only; the paper's recipe
wherever one applies). A profile's ``kind`` names the stages it runs (``lib.stages.KINDS``), and
its ``stages`` override what they must (a stage the kind lacks is added by listing it; a profile
without a kind lists every stage it runs)::

    description: one line saying what this profile is for
    kind: hub                           # stages 01-07 (world: 00-07, published: 04-07, train: 01-03, ...)
    base: smoke                         # optional: start from another profile's settings (below)
    offline: true                       # set HF_HUB_OFFLINE / HF_DATASETS_OFFLINE while it runs
    prepare:                            # optional hooks run before the notebooks, in order:
      - runner.published:import_store   #   "module:function" or {"module:function": {kwargs}}
    common:                             # optional: values for every stage whose notebook has the key
      models: [a, b]
    stages:
      01_select_benchmarks:
        min_train: 100                  # an override, with the reason it departs from the default

A stage's parameters resolve as: the notebook's defaults, then ``common``, then the stage's own
values. A profile with ``base: <profile>`` starts from that profile's ``offline``, ``prepare``,
``common`` and stages, and says only what it changes (its ``common`` and each stage's values
update the base's; ``prepare`` and ``offline`` replace them when given). Unknown keys and values
of another type than the default raise :class:`ParamsError` naming the file and the key (with the
closest known key), before anything runs. What a notebook calls with them is :mod:`lib.notebook`.
"""

from __future__ import annotations

import ast
import functools
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from . import paths
from .errors import UserError
from .stages import INHERITED, KINDS, PLACEMENT, in_order
from .util import did_you_mean

TOP_KEYS = {"description", "base", "kind", "offline", "prepare", "common", "stages", "reference"}
REQUIRED_TOP = {"description"}
DEFAULT_PROFILE = "mini"         # what `make all` runs, and every notebook's default `profile`
KERNEL = "train-before-test"     # the project's Jupyter kernel (`make lab` registers it; notebooks name it)
LOCK_FILE = ".lock"              # outputs/<profile>/.lock: held by the run of that profile (runner.run)
PREPARED_STAMP = ".prepared.json"   # outputs/<profile>/.prepared.json: its prepare hooks finished (runner.run)


class ParamsError(UserError, ValueError):
    """A params file or a notebook parameter cell is invalid; the message names file and key."""
    plain = True          # a mistyped key explains itself: no traceback


class PrerequisiteError(UserError, RuntimeError):
    """What a notebook needs has not been made yet; the message names the command that makes it."""


# --------------------------------------------------------------------------- notebook defaults
def notebook_path(stage: str) -> Path:
    return paths.NOTEBOOKS / f"{stage}.ipynb"


@functools.lru_cache(maxsize=64)
def _inspect(path: str, mtime_ns: int) -> tuple[tuple[str, Any], ...]:
    """The ``name = literal`` lines of the notebook's cell tagged ``parameters``, in order, read
    with :mod:`ast` (the cell papermill injects values after; importing papermill and its JSON-schema
    checks would cost every kernel a second)."""
    name = Path(path).name
    try:
        cells = json.loads(Path(path).read_text())["cells"]
        source = next(("".join(c["source"]) for c in cells
                       if "parameters" in c.get("metadata", {}).get("tags", [])), "")
        tree = ast.parse(source)
    except (ValueError, KeyError, TypeError, SyntaxError) as exc:   # unreadable JSON, not a notebook, bad code
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ParamsError(f"{paths.show(path)}: cannot read its parameters cell ({first}): `git checkout "
                          f"{paths.show(path)}` restores the committed notebook (your edits to it "
                          "are lost; copy the file aside first to keep them)") from None
    out = []
    for stmt in tree.body:
        single = isinstance(stmt, ast.Assign) and len(stmt.targets) == 1
        target = stmt.targets[0] if single else getattr(stmt, "target", None)
        if not isinstance(stmt, (ast.Assign, ast.AnnAssign)) or not isinstance(target, ast.Name) or stmt.value is None:
            raise ParamsError(f"{name}: parameters cell, line {stmt.lineno}: one `name = literal  # comment` per "
                              "statement (derive values in the next cell)")
        try:
            out.append((target.id, ast.literal_eval(stmt.value)))
        except ValueError:
            raise ParamsError(f"{name}: parameter {target.id!r} = {ast.get_source_segment(source, stmt.value)} is "
                              "not a literal (derive values in the next cell)") from None
    return tuple(out)


def notebook_parameters(stage: str) -> dict[str, Any]:
    """The defaults of the notebook's ``parameters`` cell, in order."""
    path = notebook_path(stage)
    if not path.exists():
        known = sorted(p.stem for p in paths.NOTEBOOKS.glob("*.ipynb"))
        raise ParamsError(f"unknown stage {stage!r}: no notebook {path.name}{did_you_mean(stage, known)}")
    found = _inspect(str(path), path.stat().st_mtime_ns)
    if not found:
        raise ParamsError(f"{path.name}: no cell tagged 'parameters' (or it is empty)")
    out = dict(found)
    if "profile" not in out:
        raise ParamsError(f"{path.name}: the parameters cell must define `profile`")
    return out


# Values a parameter takes besides those of its default's type (its notebook comment says what they mean).
ALSO_ALLOWED: dict[str, tuple] = {"eval_batch_size": ("auto",)}


def value_allowed(key: str, default: Any, value: Any) -> bool:
    return _type_ok(default, value) or (isinstance(value, str) and value in ALSO_ALLOWED.get(key, ()))


def _type_ok(default: Any, value: Any) -> bool:
    if default is None or value is None:
        return True
    if isinstance(default, bool) or isinstance(value, bool):
        return isinstance(default, bool) and isinstance(value, bool)
    if isinstance(default, float):
        return isinstance(value, (int, float))
    if isinstance(default, int):
        return isinstance(value, int)
    if isinstance(default, (list, tuple)):
        return isinstance(value, (list, tuple))
    return isinstance(value, type(default))


def type_name(v: Any) -> str:
    return {bool: "bool", int: "int", float: "float", str: "str", list: "list", dict: "dict",
            tuple: "list"}.get(type(v), type(v).__name__)


# --------------------------------------------------------------------------- profiles
@dataclass
class Profile:
    name: str
    path: Path
    description: str
    stages: dict[str, dict[str, Any]]          # stage -> its own overrides
    common: dict[str, Any] = field(default_factory=dict)
    offline: bool = False
    prepare: list = field(default_factory=list)
    reference: str | None = None               # a placement profile: "published" or a finished profile
    calibration: list[str] | None = None       # its calibration models (None: the reference's default)

    def overrides(self, stage: str) -> dict[str, Any]:
        """What this profile sets for ``stage``: the ``common`` keys the notebook has, then its own."""
        declared = notebook_parameters(stage)
        return {**{k: v for k, v in self.common.items() if k in declared}, **(self.stages.get(stage) or {})}

    def params(self, stage: str) -> dict[str, Any]:
        """Every parameter of ``stage``: the notebook's defaults, then this profile's overrides. A
        placement profile's stages 01-03 take the reference's values instead (:func:`placed_params`)."""
        if self.reference is not None and stage in INHERITED:
            return placed_params(self, stage)
        return {**notebook_parameters(stage), **self.overrides(stage), "profile": self.name}


def profile_path(name: str) -> Path:
    return paths.PARAMS / f"{name}.yaml"


def known_profiles() -> list[str]:
    return sorted(p.stem for p in paths.PARAMS.glob("*.yaml"))


class _UniqueKeys(yaml.SafeLoader):
    """PyYAML's safe loader, refusing a key given twice in one mapping (PyYAML keeps the last)."""

    def construct_mapping(self, node, deep=False):
        seen = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"key {key!r} given twice (lines {seen[key]} and {key_node.start_mark.line + 1}; "
                    "the last would silently win)", key_node.start_mark)
            seen[key] = key_node.start_mark.line + 1
        return super().construct_mapping(node, deep)


def read_yaml(path: Path):
    """A params YAML file; one :class:`ParamsError` line naming the file, the line and what is wrong
    (a tab, a key given twice, ...) instead of PyYAML's several."""
    try:
        return yaml.load(path.read_text(), Loader=_UniqueKeys)   # noqa: S506 - a safe loader
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        if mark is None:
            raise ParamsError(f"{path}: not valid YAML: {str(exc).splitlines()[0]}") from None
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        if "\t" in path.read_text().splitlines()[mark.line]:
            problem += " (a tab: YAML indents with spaces)"
        raise ParamsError(f"{path}:{mark.line + 1}: not valid YAML: {problem}") from None


def load_profile(name: str, validate: bool = True) -> Profile:
    """Read ``params/<name>.yaml``; with ``validate`` check every override against its notebook."""
    path = profile_path(name)
    if not path.exists():
        known = known_profiles()
        raise ParamsError(f"unknown profile {name!r}: no {path}{did_you_mean(name, known)}; profiles: {known}")
    raw = read_yaml(path)
    if not isinstance(raw, dict):
        raise ParamsError(f"{path}: expected a mapping at the top level")
    for key in raw:
        if key not in TOP_KEYS:
            raise ParamsError(f"{path}: unknown key {key!r}{did_you_mean(key, TOP_KEYS)}; allowed: {sorted(TOP_KEYS)}")
    for key in sorted(REQUIRED_TOP - set(raw)):
        raise ParamsError(f"{path}: missing key {key!r}")
    kind = raw.get("kind")
    if kind is not None:
        if kind not in KINDS:
            raise ParamsError(f"{path}: kind: unknown kind {kind!r}{did_you_mean(str(kind), KINDS)}; kinds: "
                              + ", ".join(f"{k} ({', '.join(s[:2] for s in v)})" for k, v in KINDS.items()))
        own = raw.get("stages") or {}
        raw = {**raw, "stages": {s: own.get(s) for s in in_order({*KINDS[kind], *own})}}
    base = raw.get("base")
    if base is not None:
        if not isinstance(base, str) or base == name:
            raise ParamsError(f"{path}: base: expected the name of another profile, got {base!r}")
        parent = load_profile(base, validate=False)
        own = raw.get("stages") or {}
        raw = {**raw, "offline": raw.get("offline", parent.offline), "prepare": raw.get("prepare", parent.prepare),
               "common": {**parent.common, **(raw.get("common") or {})},
               "stages": {**{s: dict(v) for s, v in parent.stages.items()},
                          **{s: {**parent.stages.get(s, {}), **(v or {})} for s, v in own.items()}}}
    stages, common = raw.get("stages"), raw.get("common") or {}
    if not isinstance(stages, dict) or not stages:
        raise ParamsError(f"{path}: 'stages' must be a non-empty mapping of notebook name -> overrides "
                          f"(or a 'kind': {', '.join(KINDS)})")
    if not isinstance(common, dict):
        raise ParamsError(f"{path}: 'common' must be a mapping of parameter -> value")
    for stage_name, values in stages.items():
        if values is not None and not isinstance(values, dict):
            raise ParamsError(f"{path}: stages.{stage_name}: expected a mapping of parameter -> value")
    reference, calibration = _reference_key(path, raw.get("reference"))
    prof = Profile(name=name, path=path, description=str(raw["description"]),
                   stages={s: dict(v or {}) for s, v in stages.items()}, common=dict(common),
                   offline=bool(raw.get("offline", False)), prepare=list(raw.get("prepare") or []),
                   reference=reference, calibration=calibration)
    if reference is not None and PLACEMENT_HOOK not in prof.prepare:
        prof.prepare.append(PLACEMENT_HOOK)       # the reference's metadata for the calibration models
    for item in prof.prepare:
        spec = next(iter(item)) if isinstance(item, dict) and len(item) == 1 else item
        if not isinstance(spec, str) or ":" not in spec:
            raise ParamsError(f"{path}: prepare: expected 'module:function' or {{'module:function': {{...}}}}, "
                              f"got {item!r}")
    if validate:
        validate_profile(prof)
        if prof.reference is not None:
            check_placement(prof)
    return prof


def validate_profile(prof: Profile) -> None:
    """Every stage has a notebook, every override names one of its parameters with the default's type,
    and every ``common`` key belongs to at least one stage."""
    used: set[str] = set()
    for stage_name in prof.stages:
        try:
            declared = notebook_parameters(stage_name)
        except ParamsError as exc:
            raise ParamsError(f"{prof.path}: stages.{stage_name}: {exc}") from None
        used |= set(declared) & set(prof.common)
        for where, values in ((f"stages.{stage_name}", prof.stages[stage_name]),
                              ("common", {k: v for k, v in prof.common.items() if k in declared})):
            _check_values(prof.path, where, stage_name, declared, values)
    unused = sorted(set(prof.common) - used)
    if unused:
        known = sorted({k for s in prof.stages for k in notebook_parameters(s)} - {"profile"})
        raise ParamsError(f"{prof.path}: common.{unused[0]}: no stage of this profile has that parameter"
                          f"{did_you_mean(unused[0], known)}")
    check_models(prof)


def check_models(prof: Profile) -> None:
    """The ``models`` a profile names as local folders (absolute, ``./``, ``~``) have a
    ``config.json``, before prepare and any stage: else one line naming the file and the key. Hub
    ids are checked by ``make models`` and at 02 (the hub may be unreachable while a profile is
    validated); names of models its prepare step builds exist only after it (02 checks them)."""
    for scope, values in [("common", prof.common), *((f"stages.{s}", v) for s, v in prof.stages.items())]:
        models = values.get("models")
        for i, entry in enumerate(models if isinstance(models, list) else []):
            if isinstance(entry, str) and entry.startswith((".", "~", "/")):
                folder = Path(entry).expanduser()
                folder = folder if folder.is_absolute() else paths.ROOT / folder
                if not (folder / "config.json").exists():
                    raise ParamsError(f"{prof.path}: {scope}.models[{i}]: no model folder {entry!r} (no config.json "
                                      "there)")


def _check_values(path: Path, where: str, stage_name: str, declared: dict, values: dict) -> None:
    for key, value in values.items():
        if key == "profile":
            raise ParamsError(f"{path}: {where}.profile: set by the runner, do not give it")
        if key not in declared:
            raise ParamsError(f"{path}: {where}.{key}: unknown key{did_you_mean(key, declared)}; "
                              f"{stage_name}'s parameters are {sorted(k for k in declared if k != 'profile')}")
        if not value_allowed(key, declared[key], value):
            also = "".join(f" or {v!r}" for v in ALSO_ALLOWED.get(key, ()))
            raise ParamsError(f"{path}: {where}.{key}: expected {type_name(declared[key])}{also}, "
                              f"got {type_name(value)} ({value!r})")
        if key == "resources" and isinstance(value, dict):
            check_resources(path, f"{where}.resources", value)


# submitit's parameters of a job: what each must be (Slurm's own, ``slurm_<option>``, are passed to sbatch)
RESOURCE_UNITS = {"timeout_min": (int, "minutes"), "mem_gb": ((int, float), "GB"), "cpus_per_task": (int, "CPUs"),
                  "gpus_per_node": (int, "GPUs"), "nodes": (int, "nodes"), "tasks_per_node": (int, "tasks"),
                  "slurm_array_parallelism": (int, "array tasks at once")}
RESOURCE_STRINGS = ("slurm_", "name", "visible_gpus")


def check_resources(path: Path, where: str, resources: dict) -> None:
    """``resources`` (submitit's parameters) in types and units, before any work: ``mem_gb: "four"``
    or ``timeout_min: -5`` is one line naming the file and the key, not submitit's assertion at 02."""
    for key, value in resources.items():
        if key in RESOURCE_UNITS:
            kinds, unit = RESOURCE_UNITS[key]
            if isinstance(value, bool) or not isinstance(value, kinds) or value <= 0:
                what = "a positive whole number" if kinds is int else "a positive number"
                raise ParamsError(f"{path}: {where}.{key}: expected {what} of {unit}, got {value!r}")
        elif not str(key).startswith(RESOURCE_STRINGS):
            raise ParamsError(f"{path}: {where}.{key}: not a submitit parameter"
                              f"{did_you_mean(str(key), RESOURCE_UNITS)}; expected one of {sorted(RESOURCE_UNITS)} "
                              "or slurm_<sbatch option>")
        elif isinstance(value, (dict, list)) and key != "slurm_additional_parameters" and key != "visible_gpus":
            raise ParamsError(f"{path}: {where}.{key}: expected a single value, got {value!r}")


def check_stage(prof: Profile, stage_name: str) -> dict[str, Any]:
    """Validate ``stage_name`` of ``prof``; returns every parameter to inject (with ``profile``)."""
    if stage_name not in prof.stages:
        raise ParamsError(f"{prof.path}: stage {stage_name!r} is not part of profile {prof.name!r}"
                          f"{did_you_mean(stage_name, prof.stages)}; its stages: {list(prof.stages)}")
    declared = notebook_parameters(stage_name)
    _check_values(prof.path, f"stages.{stage_name}", stage_name, declared, prof.stages[stage_name])
    return prof.params(stage_name)


# --------------------------------------------------------------------------- placement profiles
# A profile with ``reference:`` places its own ``models`` (the new ones) among the models of a
# reference: ``published`` (the paper's 61, whose recipe is the notebooks' defaults) or a finished
# profile (e.g. ``mini``). Its stages 01-03 run the reference's parameters: what determines a
# result (recipe, split rule, tasks and metric, precision, evaluation settings) is inherited, and a
# profile that sets one of them to another value is refused before anything runs. Only how the
# work is run may differ (:data:`RUN_KEYS`). Calibration models of the reference are run too, so
# that notebook 08 can check that this run reproduces the reference before it ranks anything.
PUBLISHED = "published"
PLACEMENT_HOOK = "lib.placement:prepare"
SLICE_PROFILE = "paper_slice"     # its two models calibrate a run against the published results
# how the work runs, not what it computes (micro-batches and checkpointing keep the effective batch)
RUN_KEYS = frozenset({"models", "executor", "resources", "max_jobs", "max_array", "benchmarks_per_job",
                      "throughput_tflops", "gpu_memory_gb", "task_timeout", "allow_unreachable",
                      "micro_batch_size", "gradient_checkpointing", "tensorboard"})
CALIBRATION_COUNT = 1             # a profile reference: its cheapest model (fewest parameters) calibrates


def _reference_key(path: Path, value: Any) -> tuple[str | None, list[str] | None]:
    """(reference, calibration models or None) from the ``reference:`` key."""
    if value is None:
        return None, None
    if isinstance(value, str) and value:
        return value, None
    if isinstance(value, dict) and isinstance(value.get("name"), str) and set(value) <= {"name", "calibration"}:
        cal = value.get("calibration")
        if cal is not None and (not isinstance(cal, list) or not cal or not all(isinstance(m, str) for m in cal)):
            raise ParamsError(f"{path}: reference.calibration: expected a non-empty list of model names, got {cal!r}")
        return value["name"], (list(cal) if cal is not None else None)
    raise ParamsError(f"{path}: reference: expected {PUBLISHED!r}, a profile's name, or {{name: <profile>, "
                      f"calibration: [<model>, ...]}}, got {value!r}")


def reference_params(prof: Profile, stage: str) -> dict[str, Any]:
    """The reference's resolved parameters of ``stage``: for ``published`` the notebook's defaults
    (the paper's recipe), else the reference profile's own."""
    if prof.reference == PUBLISHED:
        return dict(notebook_parameters(stage))
    return load_profile(prof.reference, validate=False).params(stage)


def new_models(prof: Profile) -> list[str]:
    """A placement profile's own models: the ones it places (``common.models``)."""
    return list(prof.common.get("models") or [])


def calibration_models(prof: Profile) -> list[str]:
    """The reference models this profile runs again to check it reproduces the reference: the
    ``reference.calibration`` list; else for ``published`` the models of params/paper_slice.yaml,
    for a profile its :data:`CALIBRATION_COUNT` cheapest models (fewest parameters, then name) by
    the metadata of its store (it must have run)."""
    if prof.calibration is not None:
        return list(prof.calibration)
    if prof.reference == PUBLISHED:
        return list(load_profile(SLICE_PROFILE, validate=False).common["models"])
    meta = paths.store_dir(prof.reference) / "_meta" / "models.json"
    if not meta.exists():
        raise PrerequisiteError(f"{prof.path}: the reference profile {prof.reference!r} has not run (no "
                                f"{paths.show(meta)}): run `{paths.make_command(prof.reference)}` first")
    records = json.loads(meta.read_text())
    ranked = sorted((float(r.get("params_b") or float("inf")), name) for name, r in records.items() if r.get("path"))
    return [name for _, name in ranked[:CALIBRATION_COUNT]]


CHEAPER_OFF = {"reduced": {}, "fewshot": []}    # issue 42's cheaper protocols: placement ranks on the paper's two


def placed_params(prof: Profile, stage: str) -> dict[str, Any]:
    """Stage ``stage`` (01-03) of a placement profile: the reference's parameters without its cheaper
    protocols (:data:`CHEAPER_OFF`), this profile's
    :data:`RUN_KEYS` (and, against ``published``, its subset of the paper's tasks), and as ``models``
    the new models followed by the calibration models."""
    out = reference_params(prof, stage)
    out.update({k: off for k, off in CHEAPER_OFF.items() if k in out})
    own = prof.overrides(stage)
    out.update({k: v for k, v in own.items() if k in RUN_KEYS or (k == "tasks" and prof.reference == PUBLISHED)})
    if "models" in out:
        new = new_models(prof)
        out["models"] = new + [m for m in calibration_models(prof) if m not in new]
    out["profile"] = prof.name
    return out


def _equal(a: Any, b: Any) -> bool:
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    return a == b and isinstance(a, bool) == isinstance(b, bool)


def check_placement(prof: Profile) -> None:
    """Refuse, in one line naming the key and both values, a placement profile that would compute
    differently from its reference; and one whose reference, stages or models make no placement."""
    where, ref = f"{prof.path}: reference", prof.reference
    if ref == prof.name:
        raise ParamsError(f"{where}: a profile cannot be its own reference")
    if ref != PUBLISHED:
        known = known_profiles()
        if ref not in known:
            raise ParamsError(f"{where}: unknown reference {ref!r}{did_you_mean(ref, known)}; expected "
                              f"{PUBLISHED!r} or one of {known}")
        other = load_profile(ref, validate=False)
        if other.reference is not None:
            raise ParamsError(f"{where}: {ref!r} is itself a placement profile; place against its reference "
                              f"{other.reference!r}")
        lacking = [s for s in ("02_finetune", "03_direct_eval") if s not in other.stages]
        if lacking:
            raise ParamsError(f"{where}: the reference {ref!r} has no stage {lacking[0]}, so it has no results to "
                              "place among")
    extra = [s for s in prof.stages if s not in PLACEMENT]
    if extra:
        raise ParamsError(f"{prof.path}: stages.{extra[0]}: a placement profile runs only {list(PLACEMENT)} "
                          f"(the analyses of the reference stay the reference's)")
    if ref != PUBLISHED and "01_select_benchmarks" in prof.stages:
        raise ParamsError(f"{prof.path}: stages.01_select_benchmarks: the reference {ref!r}'s selection is used "
                          "(its benchmarks and split plan); remove this stage")
    if ref == PUBLISHED and "01_select_benchmarks" not in prof.stages:
        raise ParamsError(f"{prof.path}: stages: a placement against {PUBLISHED!r} selects the paper's benchmarks "
                          "itself: add 01_select_benchmarks (its defaults are the paper's)")
    if not new_models(prof) or not isinstance(prof.common.get("models"), list):
        raise ParamsError(f"{prof.path}: common.models: a placement profile names the new models it places")
    for stage_name in ("02_finetune", "03_direct_eval"):
        if "models" in prof.stages.get(stage_name, {}):
            raise ParamsError(f"{prof.path}: stages.{stage_name}.models: name the new models once, under common")
    for stage_name in (s for s in INHERITED if s in prof.stages):
        declared = notebook_parameters(stage_name)
        theirs = reference_params(prof, stage_name)
        for scope, values in ((f"stages.{stage_name}", prof.stages[stage_name]),
                              ("common", {k: v for k, v in prof.common.items() if k in declared})):
            for key, value in values.items():
                if key in RUN_KEYS:
                    continue
                if key == "tasks" and ref == PUBLISHED:
                    outside = [t for t in value if t not in theirs["tasks"]]
                    if outside:
                        raise ParamsError(f"{prof.path}: {scope}.tasks: {outside[0]!r} is not one of the reference "
                                          f"{ref!r}'s benchmarks {list(theirs['tasks'])}")
                    continue
                if not _equal(value, theirs[key]):
                    raise ParamsError(f"{prof.path}: {scope}.{key}: {value!r} differs from the reference {ref!r}'s "
                                      f"{theirs[key]!r} (a placement runs the reference's recipe, splits and "
                                      "metric: remove the key, or place against another reference)")
