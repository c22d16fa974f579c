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
        how = (f"{DATA_ENV}={env} does not contain it" if env
               else f"set {DATA_ENV}=<folder> (e.g. ../shared/data) or run `make data`")
        raise DataMissing(f"published data not found: {target} ({how})")
    return base


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
