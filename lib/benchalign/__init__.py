"""BenchAlign: learn one weight per benchmark item so that weighted accuracy reproduces a target
ranking; trained on small (source) models, tested on unseen larger ones (notebook 07).

    data         item matrices (leaderboard npz files joined by model name; our pipeline's per-item
                 files; published direct-eval scores), duplicates, validation, sizes from model ids
    rank         normalised weights, RankNet / LambdaRank / NDCG-Loss2 / pointwise losses, the exact
                 blockwise O(K M + K^2) gradient, metrics, the early-stopped Adam fit
    baselines    no alignment, random weights, best single benchmark, MetaBench-like IRT subset,
                 tinyBenchmarks-like anchor points
    methods      size splits, the registry of methods and the cross-validated protocol they share,
                 the test metrics
    studies      method comparison with seeds and bootstrap intervals (lib.analysis.uncertainty),
                 ablation, data needs, the cross-paper experiment; align's worked example and its
                 noise / sparsity study (Bradley-Terry pairs from a known latent)
    arena        LMArena ratings as the target (read from two wheels, names matched by
                 arena_names.csv), on a size hold-out and cross-validated over all models
    experiments  notebook 07 in one call: its summary, tables and numbers
    memo         notebook 07's finished units of work kept on disk, so an interrupted run resumes
    figures      the notebook's figures
    align        the align / score command line and its Python API (your own preferences -> an
                 aligned benchmark file)
"""
