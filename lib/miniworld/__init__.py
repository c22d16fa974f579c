"""The mini world: a controlled, CPU-sized replication where we know what every model saw.

    world        the generated world: knowledge base, corpus, six benchmarks with disjoint splits,
                 held-out perplexity corpora, written as local lm-eval tasks
    zoo          tiny causal LMs pre-trained on it (a trunk per family and capacity level) and models
                 prepared for some of its tasks in named kinds and at known doses; the mini profile's
                 prepare hook (:func:`lib.miniworld.zoo.prepare`)
    overview     the tables and figure of notebook 00_world
    analysis     the prepared-vs-unprepared comparison at the end of notebooks 04-06
    causal       why direct evaluation disagrees: the tests only a controlled world allows (notebook 04)
"""
