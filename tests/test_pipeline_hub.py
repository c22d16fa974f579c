"""Without the hub, `make models` and the stages that need it say so at once, in one line, with what
to do: one quick request instead of five retries per file (2 min 41 s for paper_slice before)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from lib import paths
from lib.pipeline import hub
from lib.pipeline import tasks as tk
from runner import fetch

DEAD = "http://127.0.0.1:9"        # the discard port: refused at once


@pytest.fixture
def no_hub(monkeypatch):
    """The hub not set offline, and its address one that refuses connections."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setattr(hub, "endpoint", lambda: DEAD)
    calls = []
    import requests

    real = requests.head
    monkeypatch.setattr(requests, "head", lambda url, **kw: calls.append(url) or real(url, **kw))
    hub._probe.cache_clear()
    yield calls
    hub._probe.cache_clear()


def _no_downloads(monkeypatch):
    import huggingface_hub

    def refuse(*a, **kw):
        raise AssertionError("a file was requested from the hub")

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", refuse)
    monkeypatch.setattr(huggingface_hub, "snapshot_download", refuse)


@pytest.mark.slow
def test_make_models_asks_the_hub_once_and_says_what_to_do(no_hub, monkeypatch):
    _no_downloads(monkeypatch)
    with pytest.raises(fetch.HubError) as err:
        fetch.fetch("paper_slice", download=False)
    text = str(err.value)
    assert "\n" not in text and no_hub == [DEAD]                 # one line, one request
    assert text.startswith(f"profile 'paper_slice' needs the Hugging Face Hub and {DEAD} cannot be reached")
    assert "Connection refused" in text and "make models PROFILE=paper_slice" in text and "HF_HUB_OFFLINE=1" in text


@pytest.mark.slow                 # starts make / python subprocesses
def test_offline_make_models_names_what_the_cache_lacks(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(fetch, "hub_cache", lambda: tmp_path / "hub")
    monkeypatch.setattr(hub, "cached", lambda repo: repo.startswith("Qwen/"))
    _no_downloads(monkeypatch)
    with pytest.raises(fetch.HubError, match=r"^HF_HUB_OFFLINE is set and the hub cache .* lacks 1 of 2 models "
                                               r"\(EleutherAI/pythia-160m-deduped\): run `make models PROFILE="):
        fetch.fetch("paper_slice", download=False)


@pytest.mark.parametrize("profile", ["real_cpu", "mini"])
def test_make_models_of_an_offline_profile_asks_nothing(no_hub, monkeypatch, capsys, profile):
    """Profiles whose prepare hook builds or converts their models need no hub: one line says so."""
    _no_downloads(monkeypatch)
    fetch.fetch(profile, download=False)
    assert no_hub == [] and capsys.readouterr().out.strip().endswith(f"`make all PROFILE={profile}`)")


def test_notebook_01_and_hub_models_fail_fast_too(no_hub, tmp_path):
    from lib.pipeline import evaluate as ev

    with pytest.raises(tk.TaskError, match=r"^lm-eval's built-in tasks needs the Hugging Face Hub .* "
                                           r"`make models PROFILE=paper_slice`"):
        tk.select(["arc_easy"], include_defaults=True, store=paths.store_dir("paper_slice"))
    with pytest.raises(ev.ModelError, match=r"^model 'EleutherAI/pythia-160m-deduped' needs the Hugging Face Hub"):
        ev.resolve_model("EleutherAI/pythia-160m-deduped", tmp_path / "store")
    assert no_hub == [DEAD]                                       # asked once per process


@pytest.mark.slow
def test_the_make_models_command_prints_one_line(tmp_path):
    """`make models PROFILE=paper_slice CHECK_ONLY=1`'s command, offline and with a dead hub: one line
    on stderr, exit status 1 (measured: about 3 s on the loaded 2-core machine); stdout holds only the
    datasets table the task configs give and one line for what needs the data
    (:func:`runner.fetch.dataset_lines`)."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    for extra in ({"HF_HUB_OFFLINE": "1"}, {"HF_ENDPOINT": DEAD}):
        env = {**base, "HF_HOME": str(tmp_path / "hf"), **extra}
        out = subprocess.run([sys.executable, "-m", "runner.fetch", "paper_slice", "--check-only"],
                             cwd=paths.ROOT, env=env, capture_output=True, text=True, timeout=120)
        table = out.stdout.splitlines()
        assert out.returncode == 1 and table[0] == "[paper_slice] datasets of 3 task(s):", (out.stdout, out.stderr)
        assert len(table) == 7 and table[-1].startswith("[paper_slice] resolved revisions, split fingerprints and "
                                                        "document hashes: not known here"), table
        lines = [line for line in out.stderr.splitlines() if line.strip()]
        assert len(lines) == 1 and lines[0].startswith("error: ") and "make models PROFILE=paper_slice" in lines[0]
