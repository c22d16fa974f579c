"""Every path in the project derives from this file's location, never from the working directory."""

from __future__ import annotations

import os
from pathlib import Path

from .errors import UserError

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = Path(os.environ["TBT_NOTEBOOKS"]).resolve() if os.environ.get("TBT_NOTEBOOKS") else ROOT / "notebooks"
PARAMS = Path(os.environ["TBT_PARAMS"]).resolve() if os.environ.get("TBT_PARAMS") else ROOT / "params"
# TBT_OUTPUTS redirects every generated file (the tests use it to keep outputs/ untouched)
OUTPUTS = Path(os.environ["TBT_OUTPUTS"]).resolve() if os.environ.get("TBT_OUTPUTS") else ROOT / "outputs"
CACHE = ROOT / ".cache"
DATA_DOWNLOADS = ROOT / "data" / "published"   # where `make data` puts the published files

DATA_ENV = "HARMONY_DATA"
STAGE_STAMP = ".stage.json"     # in a stage's output folder: what its last successful run read (runner.run)


class DataMissing(UserError, FileNotFoundError):
    """The published reference data cannot be found."""
    plain = True          # the message says where it was looked for and how to provide it


def data_root() -> Path:
    """Where the published data is looked for (it may be absent): ``$HARMONY_DATA``, a relative
    value read from the repository's root (not from the working directory, which is ``notebooks/``
    in a JupyterLab kernel), or else the folder `make data` downloads into."""
    env = os.environ.get(DATA_ENV)
    if not env:
        return DATA_DOWNLOADS
    return (ROOT / Path(env).expanduser()).resolve()     # an absolute value stays as it is


def data_dir(required: str | None = None) -> Path:
    """Folder of the published reference data (:func:`data_root`); a :class:`DataMissing` error says in
    one line what to do when ``required`` (a file or folder the caller needs inside it) is absent."""
    env = os.environ.get(DATA_ENV)
    base = data_root()
    target = base / required if required else base
    if not target.exists():
        raise DataMissing(f"published data not found: {target} ({provide_data(env)})")
    return base


def provide_data(env: str | None = None) -> str:
    """How to provide the published data, for messages (a notebook reads ``HARMONY_DATA`` when it
    needs the data, so ``%env`` in a running JupyterLab works without restarting it)."""
    if env:
        return (f"{DATA_ENV}={env} does not contain it: `export {DATA_ENV}=<folder with the published data>`, "
                f"or in a notebook `%env {DATA_ENV}=<folder>`")
    return (f"run `make data` (downloads it into {show(DATA_DOWNLOADS)}, where notebooks find it), or "
            f"`export {DATA_ENV}=<folder>` (e.g. ../shared/data; in a notebook `%env {DATA_ENV}=<folder>`)")


def has_data(required: str) -> bool:
    return (data_root() / required).exists()


# --------------------------------------------------------------------------- paths that survive a move
# A cache that names what it read by absolute path goes stale when outputs/ or the checkout moves,
# and stays "fresh" when HARMONY_DATA points at other data under the same name. So recorded paths
# are relative to the folder they lie in, named by a prefix: the outputs folder, the published
# data folder (wherever HARMONY_DATA points now) or the repository.
PORTABLE_ROOTS = ("outputs", "data", "repo")


def _roots() -> dict[str, Path]:
    return {"outputs": OUTPUTS, "data": data_root(), "repo": ROOT}


def portable(path: str | os.PathLike) -> str:
    """``outputs:smoke/store``, ``data:oll-v2-items/ifeval.npz`` or ``repo:lib/store.py``: ``path``
    relative to the first of :data:`PORTABLE_ROOTS` that holds it, as written and then with links
    resolved (``outputs/smoke`` may be a link to another disk); a path outside all three stays absolute."""
    roots = _roots()
    forms = [(os.path.abspath, os.path.abspath), (os.path.abspath, os.path.realpath),
             (os.path.realpath, os.path.realpath)]
    for as_path, as_root in forms:
        target = Path(as_path(path))
        for name, root in roots.items():
            try:
                rel = target.relative_to(as_root(root))
            except ValueError:
                continue
            return f"{name}:{rel.as_posix()}"
    linked = _under_linked_profile(os.path.realpath(path))
    return linked if linked is not None else os.path.realpath(path)


def _under_linked_profile(real: str) -> str | None:
    """``outputs:<profile>/...`` for a resolved path inside a profile folder that is a symbolic link
    to another disk (``outputs/smoke -> /mnt/big/smoke``), else None: a path some code resolved
    must not record this machine's other disk."""
    try:
        entries = [e for e in OUTPUTS.iterdir() if e.is_symlink()]
    except OSError:
        return None
    for entry in entries:
        try:
            rel = Path(real).relative_to(os.path.realpath(entry))
        except ValueError:
            continue
        return f"outputs:{(Path(entry.name) / rel).as_posix()}"
    return None


def located(name: str) -> Path:
    """The path a :func:`portable` name stands for now (under today's outputs, data and repository)."""
    prefix, sep, rel = name.partition(":")
    if sep and prefix in PORTABLE_ROOTS:
        root = _roots()[prefix]
        return root / rel if rel not in ("", ".") else root
    return Path(name)


def show(path: str | os.PathLike) -> str:
    """``path`` relative to the repository when it lies inside it (for messages)."""
    for resolve in (os.path.abspath, os.path.realpath):
        try:
            return str(Path(resolve(path)).relative_to(resolve(ROOT)))
        except ValueError:
            continue
    return str(path)


def make_command(where: str | os.PathLike, stages: str | None = None) -> str:
    """The command that (re)builds ``where``: a profile's name or a path under ``outputs/``.
    ``make run PROFILE=<p> STAGES=<NN>`` for a stage's folder (or the given ``stages``), else
    ``make all PROFILE=<p>`` (``make all`` for the default profile, mini); a path elsewhere: ``make all``."""
    parts: tuple[str, ...] = (str(where),)
    if os.sep in str(where):
        name = portable(where)
        if not name.startswith("outputs:"):
            return "make all"
        parts = Path(name.partition(":")[2]).parts
    profile = parts[0]
    if stages is None and len(parts) > 1 and parts[1][:2].isdigit() and "_" in parts[1]:
        stages = parts[1].split("_")[0]
    if stages:
        return f"make run PROFILE={profile} STAGES={stages if ' ' not in stages else repr(stages)}"
    return "make all" if profile == "mini" else f"make all PROFILE={profile}"


def profile_dir(profile: str) -> Path:
    return OUTPUTS / profile


def stage_dir(profile: str, stage: str) -> Path:
    return OUTPUTS / profile / stage


def store_dir(profile: str) -> Path:
    """The results store of a profile: one JSON per (protocol, benchmark, model)."""
    return OUTPUTS / profile / "store"


def export_dir(profile: str) -> Path:
    """A profile's results as Every Eval Ever records (`make export`, :mod:`runner.export`)."""
    return OUTPUTS / profile / "export"


def work_dir(profile: str) -> Path:
    """Long-running artefacts of a profile (adapters, curves, samples, built models, local tasks)."""
    return OUTPUTS / profile / "work"
