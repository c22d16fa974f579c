"""What a run will do and about how long each part takes, said before it starts (``make all``).

A model of the work, not a guess per stage: every part gets a *work* figure from the profile's
parameters (units x tokens, weighted by the model size's measured cost), and seconds are work x a
rate measured on the project's 2-core reference machine (the fresh-clone ``make all`` of 62f183b).
The stamps of stages run here before hold the seconds they took and the seconds the model gave
them; their ratio is this machine's speed, by which a part is scaled unless its own last run gives
its own ratio (a stage whose model is off corrects itself). A cached stage costs nothing; one
without a model (the hub profiles) is estimated from its last recorded seconds, if any.

- the zoo (``lib.miniworld.zoo:prepare``): tokens of every trunk and every model's last phase, each
  over its size's pre-training speed;
- 02: models x benchmarks x learning rates x epochs x training examples, weighted by size;
- 03 / 05: models x tasks x test items / models x corpora x test documents;
- every other stage, and the published profile's: its seconds in the reference run.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass

from lib import paths
from lib.params import PREPARED_STAMP, Profile, load_profile
from lib.stages import BY_NAME
from lib.util import CorruptFile, current, read_json

WORKERS = 2                      # the reference machine's worker processes (one per core)
# pre-training tokens per CPU second by size (bench/bench_training.py, one torch thread) and the cost
# of one fine-tuning step by size, relative to xs (bench/bench_compute_floor.py, mean of the families)
PRETRAIN_TOKENS_S = {"xs": 64.6e3, "s": 28.3e3, "m": 14.1e3, "l": 8.5e3}
FINETUNE_COST = {"xs": 1.0, "s": 1.6, "m": 3.4, "l": 5.3}
DOC_TOKENS = 40                  # mean tokens of a last-phase document (corpus and preparation text)
# reference seconds per unit of work (the 62f183b run: world and zoo 681 s, 02 2,365 s, 03 162 s, 05 11 s,
# wall time over its two workers, on the mini profile's work of 1,277 / 5.02e6 / 75,000 / 5,000 units; the
# zoo's 1,277 modelled CPU seconds against the 1,290 its models recorded)
RATE = {"zoo": 681 / 1277, "02_finetune": 2365 / 5.0176e6, "03_direct_eval": 162 / 75000, "05_perplexity": 11 / 5000}
# reference seconds of prepare hooks without a model of their work (the stages': lib.stages)
PREPARE_S = {"published": 1}
ZOO_HOOK = "lib.miniworld.zoo:prepare"


@dataclass
class Part:
    """One part of a run: the prepare hooks or a stage."""
    profile: str
    name: str                    # "prepare" or the stage's name
    label: str                   # how the plan names it, e.g. "02 fine-tuning (800 units)"
    work: float | None           # units of the model (None: no model for it)
    reference_s: float | None    # seconds on the reference machine (None: no model)
    cached: bool = False
    last_s: float | None = None  # seconds its last run took here (from its stamp)
    ratio: float | None = None   # its last run's seconds over the seconds the model gave it then


def hooks(prof: Profile) -> list[tuple[str, dict]]:
    """The profile's prepare hooks as (``"module:function"``, keyword arguments)."""
    pairs = [next(iter(i.items())) if isinstance(i, dict) else (i, None) for i in prof.prepare]
    return [(str(spec), dict(kwargs or {})) for spec, kwargs in pairs]


def zoo_models(prof: Profile) -> list | None:
    """The zoo recipes a profile's prepare hook builds (None: the profile has no zoo)."""
    options = dict(hooks(prof)).get(ZOO_HOOK)
    if options is None:
        return None
    from lib.miniworld import zoo

    accepted = inspect.signature(zoo.default_zoo).parameters     # not the hook's own (seed, workers)
    args = {k: (tuple(v) if k in ("doses", "answers", "twin_kinds") and v is not None else v)
            for k, v in options.items() if k in zoo.ZOO_OPTIONS and k in accepted}
    return zoo.default_zoo(**args)


def _world(prof: Profile) -> dict:
    from lib.miniworld import world as mw

    options = dict(hooks(prof)).get(ZOO_HOOK, {})
    defaults = {k: f.default for k, f in mw.WorldConfig.__dataclass_fields__.items()}
    return {k: options.get(k, v) for k, v in defaults.items()}


def zoo_work(recipes: list) -> float:
    """CPU seconds of the zoo's training at the measured speeds: trunks once each, then every last phase."""
    trunks = {r.trunk.name: r.trunk for r in recipes}
    work = sum(t.tokens / PRETRAIN_TOKENS_S[t.size] for t in trunks.values())
    return work + sum(r.post_examples * (1 + r.dose) * r.post_epochs * DOC_TOKENS / PRETRAIN_TOKENS_S[r.trunk.size]
                      for r in recipes)


def stage_work(prof: Profile, stage: str, recipes: list | None) -> tuple[float, str] | None:
    """(work, what) of a stage of a zoo profile whose work grows with the zoo; None for other stages."""
    if recipes is None or stage not in ("02_finetune", "03_direct_eval", "05_perplexity"):
        return None
    world = _world(prof)
    sel = prof.params("01_select_benchmarks") if "01_select_benchmarks" in prof.stages else {}
    tasks, corpora = list(sel.get("tasks") or []), list(sel.get("corpora") or [])
    if stage == "02_finetune":
        p = prof.params(stage)
        train = min(world["train"], sel.get("cap_train") or world["train"])
        per_model = len(p["lrs"]) * p["epochs"] * train * (len(tasks) + len(corpora))
        units = len(recipes) * (len(tasks) + len(corpora)) * len(p["lrs"])
        return sum(FINETUNE_COST[r.trunk.size] for r in recipes) * per_model, f"{units} units"
    if stage == "03_direct_eval":
        return len(recipes) * len(tasks) * world["test"], f"{len(recipes) * len(tasks)} evaluations"
    return len(recipes) * len(corpora) * world["corpus_test"], f"{len(recipes) * len(corpora)} corpora"


def _stamp(path) -> dict:
    """A stage's stamp ({} when it is missing, does not parse or is not a record)."""
    try:
        record = read_json(path)
    except (FileNotFoundError, CorruptFile):
        return {}
    return record if isinstance(record, dict) else {}


def _last_run(stamp) -> tuple[float | None, float | None]:
    """(seconds, seconds / modelled seconds) of a stage's last run, from its stamp; None where unknown."""
    record = _stamp(stamp)
    seconds, modelled = record.get("seconds"), record.get("modelled_s")
    if not isinstance(seconds, (int, float)):
        return None, None
    ratio = seconds / modelled if isinstance(modelled, (int, float)) and modelled > 0 else None
    return float(seconds), ratio


def parts(name: str, cached=None) -> list[Part]:
    """The parts of profile ``name`` in run order, each with its work and reference seconds.
    ``cached(profile, stage) -> bool`` says which stages will be skipped (default: none)."""
    prof = load_profile(name)
    recipes = zoo_models(prof)
    out = []
    if prof.prepare:
        done = current(paths.profile_dir(name) / PREPARED_STAMP, prof.prepare) is not None
        if recipes is not None:
            work = zoo_work(recipes)
            n_trunks = len({r.trunk.name for r in recipes})
            out.append(Part(name, "prepare", f"world and zoo ({len(recipes)} models, {n_trunks} trunks)", work,
                            work * RATE["zoo"], cached=done))
        else:
            out.append(Part(name, "prepare", "prepare", None, PREPARE_S.get(name), cached=done))
    for stage in prof.stages:
        row = BY_NAME.get(stage)
        words = row.label if row else stage
        measured = stage_work(prof, stage, recipes)
        if measured is not None:
            work, what = measured
            part = Part(name, stage, f"{words} ({what})", work, work * RATE[stage])
        else:
            known = row.reference_s if row else {}
            part = Part(name, stage, words, None, known.get(name, known.get("mini") if recipes is not None else None))
        part.cached = bool(cached and cached(name, stage))
        part.last_s, part.ratio = _last_run(paths.stage_dir(name, stage) / paths.STAGE_STAMP)
        out.append(part)
    return out


def machine_speed(profiles: list[str]) -> float | None:
    """This machine's seconds per reference second: recorded seconds over the modelled seconds the
    stamps of ``profiles``' stages hold (:func:`runner.run.run_profile` writes both); None without any."""
    spent = modelled = 0.0
    for name in profiles:
        for stamp in paths.profile_dir(name).glob(f"*/{paths.STAGE_STAMP}"):
            record = _stamp(stamp)
            if (record.get("modelled_s") or 0) > 0 and record.get("seconds") is not None:
                spent += float(record["seconds"])
                modelled += float(record["modelled_s"])
    return spent / modelled if modelled > 0 else None


def estimate(part: Part, speed: float | None) -> float | None:
    """Seconds the part should take here: 0 when cached; the model scaled by the part's own last run
    here (its seconds over the model's then), else by this machine's speed over all parts; else its
    last recorded seconds; None when nothing is known."""
    if part.cached:
        return 0.0
    if part.reference_s is not None:
        return part.reference_s * (part.ratio or speed or 1.0)
    return part.last_s


def _minutes(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.0f} min"


def plan_lines(profiles: list[str], cached=None, goal: str = "make all") -> list[str]:
    """The few lines a run prints before it starts: the profiles in order and, for each, about how
    long its parts take on this machine (see the module's docstring)."""
    speed = machine_speed(profiles)
    where = (f"this machine ran {speed:.2f}x the reference's seconds last time" if speed is not None
             else "at the reference machine's speed; no earlier run here")
    groups, total, unknown = [], 0.0, False
    for name in profiles:
        items, seconds = [], 0.0
        for part in parts(name, cached):
            est = estimate(part, speed)
            if part.cached:
                items.append(f"{part.label} cached")
            elif est is None:
                items.append(f"{part.label} (no estimate yet)")
                unknown = True
            else:
                items.append(f"{part.label} ~{_minutes(est)}")
                seconds += est
        groups.append((name, seconds, items))
        total += seconds
    order = " then ".join(name for name, _, _ in groups)
    if unknown and not total:
        about = "no estimate yet"
    elif not total and all(i.endswith("cached") for _, _, items in groups for i in items):
        about = "everything cached"
    else:
        about = f"about {_minutes(total)}{' and more' if unknown else ''}"
    lines = [f"[plan] {goal}: {order}, {about} ({where})"]
    for name, seconds, items in groups:
        if not seconds and all(i.endswith(" cached") for i in items):
            lines.append(f"[plan]   {name}: cached")
            continue
        head = f"~{_minutes(seconds)}" if seconds else "no estimate yet"
        lines.append(f"[plan]   {name}: {head}: " + "; ".join(items))
    return lines
