"""BenchAlign: learn one weight per benchmark item so that weighted accuracy reproduces a target
ranking; trained on small (source) models, tested on unseen larger ones (notebook 07).

    data         item matrices (leaderboard files, our pipeline's items, published direct-eval scores)
    rank         normalised weights, the ranking losses and their blockwise gradient, the Adam fit
    baselines    no alignment, random weights, best single benchmark, MetaBench- and tinyBenchmarks-like
    methods      size splits, the registry of methods and the cross-validated protocol they share
    studies      method comparison with bootstrap intervals, ablation, data needs, cross-paper, the
                 align example and its noise / sparsity study
    arena        LMArena ratings as the target (names matched by arena_names.csv)
    experiments  notebook 07 in one call: its summary, tables and numbers
    memo         notebook 07's finished units of work kept on disk, so an interrupted run resumes
    figures      the notebook's figures
    align        the align / score command line (your own preferences -> an aligned benchmark file)
"""
