"""``make preflight PROFILE=p`` (``python -m runner.preflight p``): the preflight of a profile's
notebook 02 (:mod:`lib.pipeline.launch.preflight`) before anything is submitted, from notebook 01's
selection when it has run, else offline from the tasks' YAML: GPU-hours and peak memory by family,
the units to split or refuse, and the GPU-hours of each model.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace

import pandas as pd

from lib import outputs, params, paths
from lib.pipeline import tasks as tk
from lib.pipeline.evaluate import ModelError, resolve_model
from lib.pipeline.finetune import Recipe
from lib.pipeline.launch import preflight as pf
from lib.pipeline.spec import JobSpec, planned_benchmarks
from lib.store import REDUCED, TBT, fewshot_protocol


def model_lines(profile: str, table: pd.DataFrame) -> list[str]:
    """GPU-hours of notebook 02 per model; for a placement profile each model says whether it is new
    or a calibration model of the reference (what placing one more model costs)."""
    prof = params.load_profile(profile, validate=False)
    new = set(params.new_models(prof)) if prof.reference else set()
    role = {m: ("new" if m in new else "calibration") for m in table["model"]} if prof.reference else {}
    lines = ["GPU-hours per model (notebook 02):"]
    for model, hours in table.groupby("model", sort=False)["gpu_hours"].sum().items():
        lines.append(f"  {model}: {hours:,.1f}" + (f" ({role[model]})" if role else ""))
    return lines


def _source(model: str, profile: str) -> str:
    """Where a model of the profile lies: its folder when the store's metadata records one (models a
    prepare hook built), else the name itself (a hub id or a folder)."""
    try:
        return resolve_model(model, paths.store_dir(profile), offline=True)[1]
    except ModelError:
        return model


def preflight_profile(profile: str) -> pf.Preflight:
    """The preflight of a profile's notebook 02 (with its reduced budget and 03's k-shot evaluations),
    from notebook 01's summary when it has run, else offline from :func:`lib.pipeline.tasks.preview_selection`."""
    prof = params.load_profile(profile)
    s1, s2 = prof.params("01_select_benchmarks"), prof.params("02_finetune")
    rule = tk.SplitRule.from_params(s1)
    try:
        selection = outputs.read_selection(profile)
    except FileNotFoundError:
        include = tk.resolve_include_paths(s1["include_paths"], paths.work_dir(profile))
        selection = tk.preview_selection(list(s1["tasks"]), rule, include, s1["include_defaults"])
    recipe = Recipe.from_params(s2)
    chunk = s2["benchmarks_per_job"] or len(selection["selected"])
    forms = [dict(protocol=TBT, recipe=recipe)]          # and the cheaper protocols the profile asks for
    if s2.get("reduced"):
        r = s2["reduced"]
        forms.append(dict(protocol=REDUCED, recipe=replace(recipe, lrs=(r["lr"],), epochs=r["epochs"], patience=0),
                          train_fraction=r["train_fraction"]))
    forms += [dict(protocol=fewshot_protocol(k), num_fewshot=k) for k in prof.params("03_direct_eval")["fewshot"]]
    specs = [JobSpec(model=m, source=_source(m, profile), include_paths=[], benchmarks=names[i:i + chunk],
                     include_defaults=True, store_root=str(paths.store_dir(profile)),
                     work_root=str(paths.work_dir(profile)), splits=rule.to_dict(), dtype=s2["dtype"],
                     max_gen_toks=s2["max_gen_toks"], eval_batch_size=s2["eval_batch_size"], **form)
             for form in forms for names in [planned_benchmarks(form["protocol"], selection)]
             for m in s2["models"] for i in range(0, len(names), chunk)]
    return pf.preflight(specs, selection, s2["resources"], s2["throughput_tflops"], s2["gpu_memory_gb"], s2["executor"])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m runner.preflight", description=__doc__.splitlines()[0])
    ap.add_argument("profile")
    args = ap.parse_args(argv)
    pre = preflight_profile(args.profile)
    by_family = pre.table.groupby("family").agg(models=("model", "nunique"), units=("benchmark", "size"),
                                                gpu_hours=("gpu_hours", "sum"), peak_gb=("peak_gb", "max"),
                                                split=("action", lambda a: int((a == pf.SPLIT).sum())))
    print(by_family.round(1).to_string())
    print("\n".join(pre.lines()))
    print("\n".join(model_lines(args.profile, pre.table)))
    return 1 if pre.refused else 0


if __name__ == "__main__":
    sys.exit(main())
