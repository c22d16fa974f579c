"""The notebooks, one row each: the one list of stages that the runner's plan, ``make status``, the
params rules and the tests read, and the two protocols their jobs produce. A new notebook gets its
row here (a test finds a notebook without one, and a row without a notebook). Imports nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field

DIRECT, TBT = "direct_eval", "train_before_test"      # the two protocols, as the store names their results


@dataclass(frozen=True)
class Stage:
    name: str                   # the notebook's file name, without .ipynb
    label: str                  # how the plan names it
    protocol: str | None = None  # the protocol whose jobs the notebook launches (02, 03), else None
    inherited: bool = False     # a placement profile runs it with its reference's parameters
    reference_s: dict[str, float] = field(default_factory=dict)   # seconds of a reference run, by profile,
                                # where the plan has no model of its work (runner.plan)


STAGES = (
    Stage("00_world", "00 world", reference_s={"mini": 12}),
    Stage("01_select_benchmarks", "01 selection", inherited=True, reference_s={"mini": 8}),
    Stage("02_finetune", "02 fine-tuning", protocol=TBT, inherited=True),
    Stage("03_direct_eval", "03 direct evaluation", protocol=DIRECT, inherited=True),
    Stage("04_rank_agreement", "04", reference_s={"mini": 28, "published": 7}),
    Stage("05_perplexity", "05", reference_s={"published": 7}),
    Stage("06_pca", "06", reference_s={"mini": 12, "published": 5}),
    Stage("07_benchalign", "07", reference_s={"mini": 34, "published": 84}),
    Stage("08_placement", "08 placement"),
)
BY_NAME = {s.name: s for s in STAGES}
JOB_STAGES = tuple(s.name for s in STAGES if s.protocol)           # the stages whose notebooks launch jobs
INHERITED = tuple(s.name for s in STAGES if s.inherited)           # a placement profile's stages 01-03
PLACEMENT = (*INHERITED, "08_placement")                           # all a placement profile may run



def numbered(first: str, last: str) -> tuple[str, ...]:
    """The stages whose numbers run from ``first`` to ``last`` ("01", "07"), in notebook order."""
    return tuple(s.name for s in STAGES if first <= s.name[:2] <= last)


# A profile's ``kind`` switches its stages on; its ``stages:`` then lists only what it changes (a
# stage listed there that the kind lacks is added).
KINDS = {
    "world": numbered("00", "07"),                 # a synthetic world, built and analysed
    "hub": numbered("01", "07"),                   # hub models and benchmarks, end to end
    "train": numbered("01", "03"),                 # scores only, no analysis
    "published": numbered("04", "07"),             # the paper's results, analysed
    "placement": (*JOB_STAGES, "08_placement"),    # new models placed among a reference's
}


def in_order(names) -> list[str]:
    """``names`` in notebook order (names without a row last, as given: the params check names them)."""
    order = {s.name: i for i, s in enumerate(STAGES)}
    return sorted(names, key=lambda n: order.get(n, len(order)))
