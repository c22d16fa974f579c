"""What a notebook calls: :func:`stage` in the cell after the parameters, and the checks it makes.

In a notebook, the cell after the parameters calls :func:`stage` with ``globals()``: run by
``make all`` (papermill injects the resolved values) or stepped through in JupyterLab (the cell
holds the defaults), the notebook ends up with the same values. A value changed by hand in the
parameters cell wins, and the stage's cached result is cleared so ``make all`` redoes it. Stepped
through by a person (not under the runner), a notebook first checks what it needs (the profile's
prepare hook and earlier stages have run, no ``make all`` of the profile is running) and otherwise
stops with the command that fixes it.
"""

from __future__ import annotations

import fcntl
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import params, paths
from .util import READS_ENV, current, short_warning_paths


@dataclass
class Stage:
    """Where a notebook runs and with which parameters (its second cell builds one)."""
    profile: str
    name: str
    out: Path      # outputs/<profile>/<stage>/
    store: Path    # outputs/<profile>/store/
    work: Path     # outputs/<profile>/work/
    params: dict[str, Any] = field(default_factory=dict)
    changed: dict[str, Any] = field(default_factory=dict)   # values that differ from the profile's


def stage(name: str, namespace: dict[str, Any]) -> Stage:
    """Resolve stage ``name``'s parameters in ``namespace`` (the notebook's ``globals()``) and
    return its context; creates the output folder.

    Under the runner (``make all``: :data:`lib.util.READS_ENV` is set) papermill has injected every
    parameter of the profile, and they are used as they are (a batch run of its own, such as a test,
    sets it too). Stepped through by a person, the
    profile is ``namespace["profile"]``: a parameter still at the notebook's default takes the
    profile's value, so the notebook computes what ``make all`` computed, and a value that differs
    from the default was changed by hand and is kept (to run with the default where the profile sets
    another value, change the profile). The resolved values are written back into ``namespace``.
    When they differ from the profile's, the stage's cache stamp is removed so that the next
    ``make all`` re-runs it, and one line says so.
    """
    short_warning_paths()          # warnings end up in the executed notebook: no path of this machine
    profile = namespace.get("profile")
    if not isinstance(profile, str):
        raise params.ParamsError(f"{name}: set `profile` in the parameters cell (profiles: {params.known_profiles()})")
    defaults = params.notebook_parameters(name)
    if os.environ.get(READS_ENV):                       # under the runner: the injected values are the profile's
        final = {key: namespace.get(key, default) for key, default in defaults.items()}
        return _context(profile, name, final, {}, sorted(k for k in final if not _same(final[k], defaults[k])))
    try:                                                # stepped through by a person
        check_prerequisites(params.load_profile(profile, validate=False), name)
    except params.PrerequisiteError as exc:
        other = last_run_profile(name) if profile == defaults["profile"] else None
        if other is None:
            raise
        print(f"{name}: {str(exc).split(': ')[1]}; showing profile {other!r}, the last one that ran "
              f"(set profile = {other!r} in the parameters cell to say so, or run `make all` for {profile!r})")
        profile = namespace["profile"] = other
    prof = params.load_profile(profile, validate=False)
    wanted = params.check_stage(prof, name)
    final = {}
    for key, default in defaults.items():
        value = namespace.get(key, default)
        final[key] = value if not _same(value, default) else wanted[key]
        if not params.value_allowed(key, default, final[key]):
            raise params.ParamsError(f"{name}: parameter {key} = {final[key]!r}: expected {params.type_name(default)}")
    changed = {k: v for k, v in final.items() if not _same(v, wanted[k])}
    namespace.update(final)
    ctx = _context(profile, name, final, changed, sorted(k for k in prof.overrides(name) if k not in changed))
    if changed:
        (ctx.out / paths.STAGE_STAMP).unlink(missing_ok=True)
        said = ", ".join(f"{k}={v!r}" for k, v in changed.items())
        print(f"{name}: changed by hand: {said}; writing to {paths.show(ctx.out)} and clearing its cache, so the "
              "next `make all` re-runs this stage")
    return ctx


def _context(profile: str, name: str, final: dict[str, Any], changed: dict[str, Any], set_by_profile) -> Stage:
    ctx = Stage(profile=profile, name=name, out=paths.stage_dir(profile, name), store=paths.store_dir(profile),
                work=paths.work_dir(profile), params=final, changed=changed)
    ctx.out.mkdir(parents=True, exist_ok=True)
    if set_by_profile:
        print(f"{name}: profile {profile} sets {', '.join(set_by_profile)}; the rest are the defaults")
    return ctx


def ran_profiles() -> list[str]:
    """Profiles of params/ with a finished run under outputs/ (their ``run_log.json``), the most
    recent first."""
    logs = sorted(paths.OUTPUTS.glob("*/run_log.json"), key=lambda p: p.stat().st_mtime, reverse=True)
    known = set(params.known_profiles())
    return [p.parent.name for p in logs if p.parent.name in known]


def lock_holder(path: Path) -> str:
    """``pid 123, `make all`, started 2026-01-01 12:00:00`` from a lock file (what its holder wrote)."""
    try:
        info = json.loads(path.read_text())
        return f"pid {info['pid']}, `{info['command']}`, started {info['started']}"
    except (OSError, ValueError, KeyError, TypeError):
        return "a process that has not written its name yet"


def last_run_profile(name: str) -> str | None:
    """The profile that finished a run most recently among those that have stage ``name`` and
    everything it needs (None: no such profile). A notebook left at its default profile shows this
    one when the default has not run (e.g. after `make all PROFILE=smoke`)."""
    for ran in ran_profiles():
        try:
            prof = params.load_profile(ran, validate=False)
            if name in prof.stages:
                check_prerequisites(prof, name)
                return prof.name
        except (params.ParamsError, params.PrerequisiteError):
            continue
    return None


def running(profile: str) -> str | None:
    """Who holds the profile's run lock (``pid ..., `make all`, started ...``), or None."""
    path = paths.profile_dir(profile) / params.LOCK_FILE
    if not path.exists():
        return None
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return None
    except BlockingIOError:
        return lock_holder(path)
    finally:
        os.close(fd)


def check_prerequisites(prof: params.Profile, name: str) -> None:
    """Before a notebook runs outside ``make all``: no run of the profile is in progress, its prepare
    hooks have run with the current params file, and the stages before ``name`` have results.
    Raises :class:`params.PrerequisiteError` naming the command that makes what is missing."""
    if name not in prof.stages:
        raise params.PrerequisiteError(f"{name}: profile {prof.name!r} has no stage {name} (its stages: "
                                       f"{list(prof.stages)}): set profile to one that has it, e.g. a placement "
                                       "profile for 08_placement")
    holder = running(prof.name)
    if holder:
        raise params.PrerequisiteError(f"{name}: `make` is running profile {prof.name!r} now ({holder}); run "
                                       "this notebook when it has finished")
    earlier = list(prof.stages)[:list(prof.stages).index(name)]
    missing = [s for s in earlier if not (paths.stage_dir(prof.name, s) / "summary.json").exists()]
    stamp = paths.profile_dir(prof.name) / params.PREPARED_STAMP
    prepared = not prof.prepare or current(stamp, prof.prepare) is not None
    if not missing and prepared:
        return
    if not (paths.profile_dir(prof.name) / "run_log.json").exists() and (missing or not earlier):
        what = f"profile {prof.name!r} has not run"
    elif missing:
        what = f"stages {', '.join(missing)} of profile {prof.name!r} have not run"
    else:
        what = (f"profile {prof.name!r} has not been prepared with {paths.show(prof.path)} as it is now "
                "(its prepare hook builds what the notebooks read)")
    cmd = paths.make_command(prof.name, " ".join(s[:2] for s in missing or [name]))
    others = [p for p in ran_profiles() if p != prof.name and name in params.load_profile(p, validate=False).stages]
    alt = f", or set profile = {others[0]!r} in the parameters cell (it has run)" if others else ""
    raise params.PrerequisiteError(f"{name}: {what}: run `{cmd}` (or `{paths.make_command(prof.name)}`){alt}")


def _same(a: Any, b: Any) -> bool:
    """Equal as parameter values: same type and value (a list and a tuple with equal items match)."""
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b
