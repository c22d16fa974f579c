"""BenchAlign: learn one weight per benchmark item so that weighted accuracy reproduces a target
ranking; trained on small (source) models, tested on unseen larger ones (notebook 07).

    data         item matrices (leaderboard npz files joined by model name; our pipeline's per-item
                 files; published direct-eval scores), duplicates, validation, sizes from model ids
    rank         normalised weights, RankNet / LambdaRank / NDCG-Loss2 / pointwise losses, the exact
                 blockwise O(K M + K^2) gradient, metrics, the early-stopped Adam fit
    baselines    no alignment, random weights, best single benchmark, MetaBench-like IRT subset,
                 tinyBenchmarks-like anchor points
    experiments  size splits, method comparison with seeds and bootstrap, ablation, data needs,
                 the cross-paper experiment, summary pieces
    figures      the notebook's figures
"""
