"""Every path in the project derives from this file's location, never from the working directory."""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = Path(os.environ["TBT_NOTEBOOKS"]).resolve() if os.environ.get("TBT_NOTEBOOKS") else ROOT / "notebooks"
PARAMS = Path(os.environ["TBT_PARAMS"]).resolve() if os.environ.get("TBT_PARAMS") else ROOT / "params"
# TBT_OUTPUTS redirects every generated file (the tests use it to keep outputs/ untouched)
OUTPUTS = Path(os.environ["TBT_OUTPUTS"]).resolve() if os.environ.get("TBT_OUTPUTS") else ROOT / "outputs"
CACHE = ROOT / ".cache"
DATA_DOWNLOADS = ROOT / "data" / "published"   # where `make data` puts the published files

DATA_ENV = "HARMONY_DATA"
STAGE_STAMP = ".stage.json"     # in a stage's output folder: what its last successful run read (lib.run)


class DataMissing(FileNotFoundError):
    """The published reference data cannot be found."""


def data_dir(required: str | None = None) -> Path:
    """Folder of the published reference data.

    ``$HARMONY_DATA`` wins; otherwise the folder `make data` downloads into. ``required`` names a
    file or folder inside it that the caller needs (e.g. ``"lm-harmony/all_results.json"``); if it
    is absent a :class:`DataMissing` error says, in one line, what to do.
    """
    env = os.environ.get(DATA_ENV)
    base = Path(env).expanduser().resolve() if env else DATA_DOWNLOADS
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
    try:
        data_dir(required)
        return True
    except DataMissing:
        return False


def show(path: str | os.PathLike) -> str:
    """``path`` relative to the repository when it lies inside it (for messages)."""
    try:
        return str(Path(path).resolve().relative_to(ROOT))
    except ValueError:
        return str(path)


def make_command(where: str | os.PathLike, stages: str | None = None) -> str:
    """The command that (re)builds ``where``: a profile's name or a path under ``outputs/``.
    ``make run PROFILE=<p> STAGES=<NN>`` for a stage's folder (or the given ``stages``), else
    ``make all PROFILE=<p>`` (``make all`` for the default profile, mini); a path elsewhere: ``make all``."""
    parts: tuple[str, ...] = (str(where),)
    if os.sep in str(where):
        try:
            parts = Path(where).resolve().relative_to(OUTPUTS.resolve()).parts
        except ValueError:
            return "make all"
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


def work_dir(profile: str) -> Path:
    """Long-running artefacts of a profile (adapters, curves, samples, built models, local tasks)."""
    return OUTPUTS / profile / "work"
