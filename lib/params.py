"""Profiles: one YAML per profile in params/, validated against the notebooks' parameter cells.

A profile file looks like::

    description: one line saying what this profile is for
    offline: true                       # set HF_HUB_OFFLINE / HF_DATASETS_OFFLINE while it runs
    prepare:                            # optional hooks run before the notebooks, in order:
      - lib.published:import_store      #   "module:function" or {"module:function": {kwargs}}
    stages:
      04_rank_agreement:                # a notebook in notebooks/, run in the listed order
        min_models: 5                   # every parameter of that notebook's `parameters` cell

The notebook's cell tagged ``parameters`` holds literals only; it is the schema. Every key of a
stage must be a parameter of that notebook, every parameter (except ``profile``) must be given,
and each value must have the type of the notebook's default. Violations raise
:class:`ParamsError` naming the file and the key before anything runs.
"""

from __future__ import annotations

import ast
import difflib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from . import paths

TOP_KEYS = {"description", "offline", "prepare", "stages"}
REQUIRED_TOP = {"description", "stages"}


class ParamsError(ValueError):
    """A params file or a notebook parameter cell is invalid; the message names file and key."""


def did_you_mean(word: str, options, n: int = 1, cutoff: float = 0.6) -> str:
    """`` (did you mean 'x'?)`` for the closest of ``options`` to ``word``, or ``""``: the one
    suggestion helper of every error message that names an unknown thing."""
    match = difflib.get_close_matches(word, [str(o) for o in options], n=n, cutoff=cutoff)
    return f" (did you mean {', '.join(map(repr, match))}?)" if match else ""


def notebook_path(stage: str) -> Path:
    return paths.NOTEBOOKS / f"{stage}.ipynb"


def notebook_parameters(stage: str) -> dict[str, Any]:
    """The literal defaults of the notebook's ``parameters`` cell, in order."""
    path = notebook_path(stage)
    if not path.exists():
        known = sorted(p.stem for p in paths.NOTEBOOKS.glob("*.ipynb"))
        raise ParamsError(f"unknown stage {stage!r}: no notebook {path.name}{did_you_mean(stage, known)}")
    nb = json.loads(path.read_text())
    cells = [c for c in nb["cells"] if "parameters" in c.get("metadata", {}).get("tags", [])]
    if len(cells) != 1:
        raise ParamsError(f"{path.name}: expected exactly one cell tagged 'parameters', found {len(cells)}")
    source = "".join(cells[0]["source"])
    out: dict[str, Any] = {}
    for node in ast.parse(source).body:
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)):
            raise ParamsError(f"{path.name}: the parameters cell may only hold `name = literal` lines "
                              f"(line {node.lineno})")
        name = node.targets[0].id
        try:
            out[name] = ast.literal_eval(node.value)
        except ValueError:
            raise ParamsError(f"{path.name}: parameter {name!r} is not a literal (derive values in the "
                              "next cell)") from None
    if "profile" not in out:
        raise ParamsError(f"{path.name}: the parameters cell must define `profile`")
    return out


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


def _type_name(v: Any) -> str:
    return {bool: "bool", int: "int", float: "float", str: "str", list: "list", dict: "dict",
            tuple: "list"}.get(type(v), type(v).__name__)


@dataclass
class Profile:
    name: str
    path: Path
    description: str
    stages: dict[str, dict[str, Any]]
    offline: bool = False
    prepare: list[str] = field(default_factory=list)


def profile_path(name: str) -> Path:
    return paths.PARAMS / f"{name}.yaml"


def load_profile(name: str, validate: bool = True) -> Profile:
    """Read ``params/<name>.yaml`` and validate every stage against its notebook."""
    path = profile_path(name)
    if not path.exists():
        known = sorted(p.stem for p in paths.PARAMS.glob("*.yaml"))
        raise ParamsError(f"unknown profile {name!r}: no {path}{did_you_mean(name, known)}; profiles: {known}")
    try:
        raw = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise ParamsError(f"{path}: not valid YAML: {exc}") from None
    if not isinstance(raw, dict):
        raise ParamsError(f"{path}: expected a mapping at the top level")
    for key in raw:
        if key not in TOP_KEYS:
            raise ParamsError(f"{path}: unknown key {key!r}{did_you_mean(key, TOP_KEYS)}; allowed: {sorted(TOP_KEYS)}")
    for key in sorted(REQUIRED_TOP - set(raw)):
        raise ParamsError(f"{path}: missing key {key!r}")
    stages = raw["stages"]
    if not isinstance(stages, dict) or not stages:
        raise ParamsError(f"{path}: 'stages' must be a non-empty mapping of notebook name -> parameters")
    prof = Profile(name=name, path=path, description=str(raw["description"]),
                   stages={s: dict(v or {}) for s, v in stages.items()},
                   offline=bool(raw.get("offline", False)), prepare=list(raw.get("prepare") or []))
    for item in prof.prepare:
        spec = next(iter(item)) if isinstance(item, dict) and len(item) == 1 else item
        if not isinstance(spec, str) or ":" not in spec:
            raise ParamsError(f"{path}: prepare: expected 'module:function' or {{'module:function': {{...}}}}, "
                              f"got {item!r}")
    if validate:
        for stage, values in prof.stages.items():
            check_stage(prof, stage, values)
    return prof


def check_stage(prof: Profile, stage: str, values: dict[str, Any]) -> dict[str, Any]:
    """Validate one stage's values against the notebook's parameter cell; returns what to inject."""
    try:
        defaults = notebook_parameters(stage)
    except ParamsError as exc:
        raise ParamsError(f"{prof.path}: stages.{stage}: {exc}") from None
    declared = {k: v for k, v in defaults.items() if k != "profile"}
    for key, value in values.items():
        if key == "profile":
            raise ParamsError(f"{prof.path}: stages.{stage}.profile: set by the runner, do not give it")
        if key not in declared:
            raise ParamsError(f"{prof.path}: stages.{stage}.{key}: unknown key{did_you_mean(key, declared)}; "
                              f"the notebook's parameters are {sorted(declared)}")
        if not _type_ok(declared[key], value):
            raise ParamsError(f"{prof.path}: stages.{stage}.{key}: expected {_type_name(declared[key])}, "
                              f"got {_type_name(value)} ({value!r})")
    missing = [k for k in declared if k not in values]
    if missing:
        raise ParamsError(f"{prof.path}: stages.{stage}: missing key(s) {missing}")
    return {"profile": prof.name, **values}


@dataclass
class Stage:
    """What a notebook needs to know about where it runs (its second cell builds one)."""
    profile: str
    name: str
    out: Path      # outputs/<profile>/<stage>/
    store: Path    # outputs/<profile>/store/
    work: Path     # outputs/<profile>/work/


def stage(name: str, profile: str) -> Stage:
    """Context of stage ``name`` under ``profile``; validates both and creates the output folder."""
    prof = load_profile(profile, validate=False)
    if name not in prof.stages:
        raise ParamsError(f"{prof.path}: stage {name!r} is not part of profile {profile!r}"
                          f"{did_you_mean(name, prof.stages)}; its stages: {list(prof.stages)}")
    st = Stage(profile=profile, name=name, out=paths.stage_dir(profile, name),
               store=paths.store_dir(profile), work=paths.work_dir(profile))
    st.out.mkdir(parents=True, exist_ok=True)
    return st
