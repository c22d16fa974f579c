"""train-before-test: fair language-model evaluation as a notebook research repository.

Layers (imports point downward only):
    lib.util, lib.paths, lib.params, lib.store, lib.metadata, lib.plots, lib.report   ground floor
    lib.pipeline     select tasks, fine-tune, evaluate, perplexity, job grid, tiny test models
    lib.analysis     rank agreement, perplexity agreement, PCA structure
    lib.benchalign   item weights learned from pairwise preferences
    lib.miniworld    generated world + zoo of tiny pre-trained models
    lib.run          executes the notebooks of a profile through papermill
"""

__version__ = "0.1.0"
