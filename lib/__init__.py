"""train-before-test: fair language-model evaluation as a notebook research repository.

lib is what the notebooks import; what runs them and reports on them (``make all``, the docs
tables, the figure sheet, the leaderboard page, ``make data``) is the package :mod:`runner` beside
it, which imports lib and is never imported by it.

The map of lib: every module and subpackage, one line each, in layers, lowest first (:data:`LAYERS`);
each subpackage's docstring maps its own modules. A module imports only from its own layer or the
layers below it, lazy imports inside functions included, no modules import each other in a circle,
and every module is named in a map (``tests/test_layers.py`` checks all three).

The ground floor:
    errors        the typed hierarchy of failures a user can fix (the console shows them by their class)
    util          atomic files and folders, digests, JSON, "did you mean", stamps, what a stage read
    paths         every path derived from the package's location; where the published data lies
    progress      units done, elapsed and left, as console lines (also from inside a notebook's kernel)
    params        profiles (params/*.yaml): each stage's parameters, checked against its notebook
    notebook      what a notebook calls first: its stage's parameters, after checking what it needs
    stages        the notebooks, one row each (label, the protocol it launches, reference seconds)
    store         the results store: one small JSON file per (protocol, benchmark, model)
    layout        the work folder: every path under outputs/<profile>/work/, one reader per file kind
    metadata      what we know about benchmarks and models: category, metric, family, size, compute
    plots         one figure style for every notebook; figures saved as PDF and PNG
    outputs       what every stage leaves behind: summary.json, CSV tables, numbers.tex; number formats
    data          the published reference data: pinned commits and sha256, a corrupt file's advice
    published     the published results file: where it is, read and checked
The science:
    pipeline      what a unit computes (tasks, fine-tuning, evaluation, the two protocols); its
                  subpackage pipeline.launch runs the units (process pool, Slurm, locks, preflight)
    analysis      rank agreement, noise and uncertainty, perplexity agreement, PCA structure, budget
    placement     new models ranked among a reference's, after a calibration check
    benchalign    item weights learned from pairwise preferences
    miniworld     the generated world and its zoo of tiny pre-trained models
So the analyses (04-06) never import the pipeline: editing the launcher re-runs no analysis.
"""

__version__ = "0.1.0"

LAYERS = (
    ("lib.errors", "lib.util", "lib.paths", "lib.progress", "lib.stages", "lib.params", "lib.notebook", "lib.store",
     "lib.layout", "lib.metadata", "lib.plots", "lib.outputs", "lib.data", "lib.published"),
    ("lib.pipeline",),
    ("lib.analysis", "lib.placement"),
    ("lib.benchalign",),
    ("lib.miniworld",),
)
