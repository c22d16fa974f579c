"""train-before-test: fair language-model evaluation as a notebook research repository.

Layers, lowest first (:data:`LAYERS`). A module imports only from its own layer or the layers below
it, lazy imports inside functions included, and no modules import each other in a circle
(``tests/test_layers.py`` checks both):

    ground floor     util (atomic files, digests, stamps), paths, progress, params (profiles), store
                     (results store), layout (the work folder), metadata, figreview (figure checks), plots,
                     report, doctables (the docs' results tables: registry, formats, summaries), data
                     (`make data`), published (importer of the published results)
    lib.pipeline     tasks (lm-eval registry, selection, split plans, rendering), finetune, training,
                     evaluate, the two protocols, job specs and grid, locks, cluster, tiny test models
    lib.analysis     rank agreement, noise and uncertainty, perplexity agreement, PCA structure, budget;
                     lib.placement (new models ranked among a reference's, after a calibration check)
    lib.benchalign   item weights learned from pairwise preferences
    lib.miniworld    generated world + zoo of tiny pre-trained models
    lib.plan, lib.run  what a run will do and for about how long; executes the notebooks of a profile
                     through papermill; lib.docblocks (the docs' results tables), lib.leaderboard (a
                     profile's leaderboard page)

So the analyses (04-06) never import the pipeline: editing the launcher re-runs no analysis.
"""

__version__ = "0.1.0"

LAYERS = (
    ("lib.errors", "lib.util", "lib.paths", "lib.progress", "lib.params", "lib.store", "lib.layout", "lib.metadata",
     "lib.figreview", "lib.plots", "lib.report", "lib.doctables", "lib.data", "lib.published"),
    ("lib.pipeline",),
    ("lib.analysis", "lib.placement"),
    ("lib.benchalign",),
    ("lib.miniworld",),
    ("lib.plan", "lib.run", "lib.stagecache", "lib.kernel", "lib.failures", "lib.docblocks", "lib.leaderboard"),
)
