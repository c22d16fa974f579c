"""The analyses of notebooks 04-06, on the results store alone (they never import the pipeline).

    agreement    rank agreement between benchmarks: Kendall tau of the rankings they induce, per protocol
    noise        measurement noise: how reliably a benchmark ranks models, how high agreement could be
    uncertainty  bootstrap intervals over models for the headline numbers, all draws at once
    robustness   whether an effect hinges on a few models: the tau and PC1 gains on subsets of models
    budget       how much fine-tuning it takes before benchmarks agree (along the validation curves)
    perplexity   whether perplexity ranks models the way downstream benchmarks do
    cheaper      cheaper protocols (direct evaluation, perplexity alone) against train-before-test: agreement, cost
    structure    low-dimensional structure of the model x benchmark matrix: PCA, standardised columns
    figures      the figures of notebooks 04-06
"""
