"""train-before-test: fair language-model evaluation as a notebook research repository.

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
    store         the results store: one small JSON file per (protocol, benchmark, model)
    layout        the work folder: every path under outputs/<profile>/work/, one reader per file kind
    metadata      what we know about benchmarks and models: category, metric, family, size, compute
    figreview     the checks of a figure as a reviewer reads it, and a profile's contact sheet
    plots         one figure style for every notebook; figures saved as PDF and PNG
    outputs       what every stage leaves behind: summary.json, CSV tables, numbers.tex
    doctables     the docs' results tables: their registry, number formats and summaries
    data          `make data`: the published reference data from pinned commits, sha256-checked
    published     the published results imported into a store; a first run compared with them
The science:
    pipeline      what a unit computes (tasks, fine-tuning, evaluation, the two protocols); its
                  subpackage pipeline.launch runs the units (process pool, Slurm, locks, preflight)
    analysis      rank agreement, noise and uncertainty, perplexity agreement, PCA structure, budget
    placement     new models ranked among a reference's, after a calibration check
    benchalign    item weights learned from pairwise preferences
    miniworld     the generated world and its zoo of tiny pre-trained models
Running and reporting:
    plan          what a run will do and for about how long, said before it starts
    run           the runner: a profile's notebooks in order through papermill (`make all`)
    stagecache    whether a stage's last run still holds: its key, the inputs it read, its results
    kernel        the kernel a notebook runs in, and the console's heartbeat meanwhile
    failures      the one console line and the log file of a run that failed
    docblocks     the docs' results tables written and checked (`make docs`, `make check-docs`)
    leaderboard   a profile's leaderboard page
    export        a profile's results as Every Eval Ever records (`make export`); TensorBoard on its curves

So the analyses (04-06) never import the pipeline: editing the launcher re-runs no analysis.
"""

__version__ = "0.1.0"

LAYERS = (
    ("lib.errors", "lib.util", "lib.paths", "lib.progress", "lib.params", "lib.store", "lib.layout", "lib.metadata",
     "lib.figreview", "lib.plots", "lib.outputs", "lib.doctables", "lib.data", "lib.published"),
    ("lib.pipeline",),
    ("lib.analysis", "lib.placement"),
    ("lib.benchalign",),
    ("lib.miniworld",),
    ("lib.plan", "lib.run", "lib.stagecache", "lib.kernel", "lib.failures", "lib.docblocks", "lib.leaderboard",
     "lib.export"),
)
