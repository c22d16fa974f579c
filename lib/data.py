"""`make data`: download the published reference data from pinned commits, sha256-checked.

``python -m lib.data download`` fetches the files named in the README's Data section over HTTPS into
:data:`lib.paths.DATA_DOWNLOADS` (git-ignored), in the same layout as a ``$HARMONY_DATA`` folder::

    lm-harmony/all_results.json                     train-before-test paper's scores
    obsscaling/base_llm_benchmark_eval.csv          pre-training compute of base models
    oll-v2-items/<name>.npz                         item-level 0/1 correctness (from joblib files)

Each download is checked against its sha256 before it is moved into place (atomically), so a
truncated or tampered file is never used. The benchmark-prediction scores come as joblib files
(``<name>.jbl``: models x items array, ``<name>_models.jbl``: model names); they are kept under
``_raw/`` and converted to ``<name>.npz`` with arrays ``scores`` (uint8) and ``models`` (str),
loadable with ``numpy.load(path, allow_pickle=False)``. Without network the command fails with one
line saying to point ``HARMONY_DATA`` at a copy instead.
"""

from __future__ import annotations

import argparse
import io
import os
import socket
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from . import paths
from .errors import UserError
from .util import atomic_write_bytes, sha256_bytes, sha256_file

REQUIRED = "lm-harmony/all_results.json"      # present: the published data is there
URL_TEMPLATE = "https://raw.githubusercontent.com/{repo}/{commit}/{path}"
LFS_TEMPLATE = "https://media.githubusercontent.com/media/{repo}/{commit}/{path}"
TIMEOUT_S = 60


class DataError(UserError, RuntimeError):
    """A download or conversion failed; the message is one line naming the file."""


class CorruptData(UserError, ValueError):
    """A file of the published data cannot be read as what it should be; the message names it and
    how to restore it (:func:`corrupt`)."""


@dataclass(frozen=True)
class Remote:
    repo: str            # owner/name on GitHub
    commit: str          # pinned commit
    path: str            # path inside the repository
    dest: str            # path inside the data folder
    sha256: str | None   # expected digest of the downloaded bytes (None: not published)

    def url(self, template: str = URL_TEMPLATE) -> str:
        return template.format(repo=self.repo, commit=self.commit, path=self.path)


_HARMONY = ("socialfoundations/lm-harmony", "88bc5c352f6491bc9e6c19a361096a31c4df6e16")
_OBS = ("ryoungj/ObsScaling", "4d6e1e43fd2635d04654aa77d1df9d5266ea0382")
_BP = ("socialfoundations/benchmark-prediction", "2e98c82ea45bed58f54c9e8894ca42e776bf32a9")
_ITEM_SHA = {
    "ifeval": ("808c4df4f62e9e9cc290249766b30663496c041ae27590e9ffc66e88899e20b2",
               "3c9b5ccb7d250e2239d2ddde9f13521209e96e047e9a2723213359eaae73db4f"),
    "musr": ("a4580672ac844b73ded68308a651ee28f5131f925ea9188b939d68a7ac8158d3",
             "3c9b5ccb7d250e2239d2ddde9f13521209e96e047e9a2723213359eaae73db4f"),
    "openllm_math": ("2dc05527b8b022e4055bd6f46f93109a89c64d55829601536bf451010a1a6ca0",
                     "eb731b7b65853b53e4b94ad4a6cd6441910ea25d88c6345b07327161cff14352"),
    "arc_challenge": ("e8e01a89f6b1018c0ddbae31650852b74280241af85a7d589dafda5406143856",
                      "c58efed473054684f1feb8b6d5fceb0aefb55d92ae7e6fdef3fadc404d0a46b1"),
}

FILES: list[Remote] = [
    Remote(*_HARMONY, "notebooks/all_results.json", "lm-harmony/all_results.json",
           "17e0a0a20bcbb4edd043ae7fcd17318c903b504410da3e036186a8d6191d2f26"),
    Remote(*_OBS, "eval_results/base_llm_benchmark_eval.csv", "obsscaling/base_llm_benchmark_eval.csv",
           "511996815735a4c46251dc585dcc525e370d148201f86561e6f927f9df2d0db8"),
]
# npz name -> (scores remote, models remote)
ITEM_FILES: dict[str, tuple[Remote, Remote]] = {
    name: (Remote(*_BP, f"data/scores/{name}.jbl", f"_raw/benchmark-prediction/{name}.jbl", s_sha),
           Remote(*_BP, f"data/scores/{name}_models.jbl", f"_raw/benchmark-prediction/{name}_models.jbl", m_sha))
    for name, (s_sha, m_sha) in _ITEM_SHA.items()
}


def expected_sha256(dest: str) -> str | None:
    """The sha256 a published file (path inside the data folder) must have, where one is pinned."""
    return next((r.sha256 for r in FILES if r.dest == dest), None)


def corrupt(path: str | Path, reason: str) -> CorruptData:
    """The error for a published data file that does not read: which file, why, and how to get a
    good copy (`make data`, or the sha256 a copy must have)."""
    name = paths.portable(path)
    dest = name.partition(":")[2] if name.startswith("data:") else Path(path).name
    sha = expected_sha256(dest)
    check = (f"a good copy has sha256 {sha}" if sha else
             "`make data` makes it from downloads whose sha256 it checks")
    env = os.environ.get(paths.DATA_ENV)
    if not name.startswith("data:"):
        fix = ("replace it with a good copy (`make data` downloads the published files into "
               f"{paths.show(paths.DATA_DOWNLOADS)})")
    elif env:
        fix = (f"copy a good one into {paths.DATA_ENV}={env}, or `unset {paths.DATA_ENV}; make data` to download the "
               f"published data into {paths.show(paths.DATA_DOWNLOADS)}")
    else:
        fix = f"`make data` downloads it again into {paths.show(paths.DATA_DOWNLOADS)}"
    return CorruptData(f"corrupt data file {path} ({reason}): {fix} ({check})")


def fetch(url: str) -> bytes:
    """GET ``url`` (https:// or file://) and return its bytes; one-line :class:`DataError` on failure."""
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT_S) as resp:
            return resp.read()
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        raise DataError(f"cannot download {url}: {reason} (no network? set {paths.DATA_ENV}=<folder> with a "
                        "copy of the published data, e.g. ../shared/data)") from None


def host(template: str | None = None) -> str:
    """The host the downloads come from (``file`` for a local mirror)."""
    parsed = urllib.parse.urlsplit(template or URL_TEMPLATE)
    return parsed.hostname or parsed.scheme


def reachable(template: str | None = None, timeout: float = 5.0) -> bool:
    """Whether the download host answers a TCP connection within ``timeout`` seconds (a local
    ``file://`` mirror counts as reachable), so an offline machine is told at once, not after a
    download's timeout."""
    parsed = urllib.parse.urlsplit(template or URL_TEMPLATE)
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
    url_template, lfs_template = url_template or URL_TEMPLATE, lfs_template or LFS_TEMPLATE
    target = dest_dir / remote.dest
    if not force and target.exists() and (remote.sha256 is None or sha256_file(target) == remote.sha256):
        return target
    url = remote.url(url_template)
    data = fetcher(url)
    if data.startswith(b"version https://git-lfs"):          # a Git LFS pointer: fetch the object itself
        url = remote.url(lfs_template)
        data = fetcher(url)
    if remote.sha256 is not None and sha256_bytes(data) != remote.sha256:
        raise DataError(f"sha256 mismatch for {remote.dest} from {url}: expected {remote.sha256}, "
                        f"got {sha256_bytes(data)} (file not written)")
    return atomic_write_bytes(target, data)


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
             log: Callable[[str], None] = print) -> list[Path]:
    """Fetch every published file (and convert the item scores); returns the paths written."""
    dest = Path(dest_dir) if dest_dir is not None else paths.DATA_DOWNLOADS
    kw = dict(fetcher=fetcher, force=force, url_template=url_template, lfs_template=lfs_template)
    written = []
    for remote in (FILES if files is None else files):
        written.append(get(remote, dest, **kw))
        log(f"ok  {remote.dest}")
    for name, (scores, models) in (ITEM_FILES if items is None else items).items():
        out = dest / "oll-v2-items" / f"{name}.npz"
        s_path, m_path = get(scores, dest, **kw), get(models, dest, **kw)
        written.append(jbl_to_npz(s_path, m_path, out))
        log(f"ok  oll-v2-items/{name}.npz")
    return written


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m lib.data", description=__doc__.splitlines()[0])
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
