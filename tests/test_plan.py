"""The lines `make all` prints before it starts: what it runs, in which order, and about how long
each part takes, from a model of the work calibrated by the last run's recorded seconds."""

from __future__ import annotations

import json

import pytest

from lib import params, paths
from runner import plan


@pytest.fixture()
def outputs(tmp_path, monkeypatch):
    monkeypatch.setattr(paths, "OUTPUTS", tmp_path / "outputs")
    return tmp_path / "outputs"


def _stamp(outputs, profile, stage, seconds, modelled):
    folder = outputs / profile / stage
    folder.mkdir(parents=True, exist_ok=True)
    (folder / paths.STAGE_STAMP).write_text(json.dumps({"key": {}, "seconds": seconds, "modelled_s": modelled}))


def test_the_zoo_work_model_counts_trunks_once_and_every_last_phase():
    """The mini zoo: 12 trunks' tokens at their size's speed plus 25 last phases; its modelled CPU
    seconds are those the reference run's models recorded (1,290 s) within a few per cent."""
    recipes = plan.zoo_models(params.load_profile("mini"))
    assert len(recipes) == 25 and len({r.trunk.name for r in recipes}) == 12
    work = plan.zoo_work(recipes)
    assert 1200 < work < 1380
    only_bases = [r for r in recipes if r.kind == "base"]
    trunks = sum(r.trunk.tokens / plan.PRETRAIN_TOKENS_S[r.trunk.size] for r in only_bases)
    assert plan.zoo_work(only_bases) == pytest.approx(
        trunks + sum(3000 * 2 * plan.DOC_TOKENS / plan.PRETRAIN_TOKENS_S[r.trunk.size] for r in only_bases))
    assert plan.zoo_models(params.load_profile("published")) is None
    prof = params.load_profile("smoke")
    prof.prepare[0]["lib.miniworld.zoo:prepare"]["workers"] = 1          # the hook's own option, not the zoo's
    assert len(plan.zoo_models(prof)) == 4


def test_plan_lines_put_published_first_and_estimate_each_part(outputs):
    lines = plan.plan_lines(["published", "mini"], goal="make all")
    assert lines[0].startswith("[plan] make all: published then mini, about ")
    assert "no earlier run here" in lines[0] and len(lines) == 3
    assert lines[1].startswith("[plan]   published: ~2 min: prepare ~1 s; 04 ~7 s")
    mini = lines[2]
    assert mini.startswith("[plan]   mini: ~")
    parts = plan.parts("mini")
    by_name = {p.name: p for p in parts}
    # mini's work is the reference run's (62f183b: world and zoo 681 s, 02 2,365 s), so each estimate is
    # that run's seconds; the line shows each part's estimate in minutes
    assert by_name["prepare"].reference_s == pytest.approx(681, rel=0.02)
    assert by_name["02_finetune"].reference_s == pytest.approx(2365, rel=0.02)
    for name, label in (("prepare", "world and zoo (25 models, 12 trunks)"),
                        ("02_finetune", "02 fine-tuning (800 units)")):
        assert f"{label} ~{by_name[name].reference_s / 60:.0f} min" in mini, (label, mini)
    total = sum(p.reference_s for p in plan.parts("published") + parts)
    assert f"about {total / 60:.0f} min" in lines[0] and 50 * 60 < total < 65 * 60
    # the model: 02's seconds grow with the units of work (half the learning rates: half the seconds)
    prof = params.load_profile("mini")
    recipes = plan.zoo_models(prof)
    full = plan.stage_work(prof, "02_finetune", recipes)[0]
    prof.stages["02_finetune"] = {**prof.stages["02_finetune"], "lrs": [0.001, 0.003]}
    assert plan.stage_work(prof, "02_finetune", recipes) == (full / 2, "400 units")


def test_plan_lines_are_calibrated_by_the_last_runs_seconds_and_skip_cached_stages(outputs):
    before = {p.name: plan.estimate(p, None) for p in plan.parts("mini")}
    _stamp(outputs, "mini", "02_finetune", 3000.0, 1500.0)          # this machine took twice the model's seconds
    _stamp(outputs, "mini", "04_rank_agreement", 100.0, 50.0)
    assert plan.machine_speed(["mini"]) == pytest.approx(2.0)
    after = {p.name: plan.estimate(p, 2.0) for p in plan.parts("mini")}
    assert after == pytest.approx({k: 2 * v for k, v in before.items()})
    _stamp(outputs, "mini", "06_pca", 36.0, 12.0)                    # a stage's own last run corrects its model
    assert plan.machine_speed(["mini"]) == pytest.approx(3136 / 1562)
    after = {p.name: plan.estimate(p, plan.machine_speed(["mini"])) for p in plan.parts("mini")}
    assert after["06_pca"] == pytest.approx(3 * before["06_pca"]) and after["02_finetune"] == pytest.approx(
        2 * before["02_finetune"]) and after["00_world"] == pytest.approx(3136 / 1562 * before["00_world"])
    (outputs / "mini" / "06_pca" / paths.STAGE_STAMP).unlink()
    lines = plan.plan_lines(["mini"], cached=lambda profile, stage: stage != "02_finetune")
    assert "this machine ran 2.00x the reference's seconds last time" in lines[0]
    assert "04 cached" in lines[1] and "00 world cached" in lines[1]
    assert f"02 fine-tuning (800 units) ~{2 * before['02_finetune'] / 60:.0f} min" in lines[1]
    assert "world and zoo (25 models, 12 trunks) ~" in lines[1]      # the zoo: no .prepared.json here, so it builds
    lines = plan.plan_lines(["published"], cached=lambda p, s: True)
    assert lines[0].startswith("[plan] make all: published, about ")      # its prepare hook still runs here
    (outputs / "published").mkdir(parents=True, exist_ok=True)
    params_ = params.load_profile("published")
    (outputs / "published" / params.PREPARED_STAMP).write_text(json.dumps({"key": params_.prepare}))
    assert plan.plan_lines(["published"], cached=lambda p, s: True) == [
        "[plan] make all: published, everything cached (at the reference machine's speed; no earlier run here)",
        "[plan]   published: cached"]


def test_a_profile_without_a_model_is_estimated_from_its_last_run_or_says_so(outputs):
    lines = plan.plan_lines(["real_cpu"])
    assert lines[0].startswith("[plan] make all: real_cpu, no estimate yet")
    assert "02 fine-tuning (no estimate yet)" in lines[1]
    assert lines[1].startswith("[plan]   real_cpu: no estimate yet: "), lines[1]    # not "cached"
    _stamp(outputs, "real_cpu", "02_finetune", 120.0, None)
    assert "02 fine-tuning ~2 min" in plan.plan_lines(["real_cpu"])[1]
