"""The mini world: a controlled, CPU-sized replication where we know what every model saw.

- :mod:`lib.miniworld.world`: the generated world (knowledge base, corpus, six benchmarks with
  disjoint splits, held-out perplexity corpora) written as local lm-eval tasks
- :mod:`lib.miniworld.zoo`: 12 tiny causal LMs pre-trained on it (3 families x 4 capacity levels)
  and 6 twins prepared for some of its tasks at known doses; the mini profile's prepare hook
  (:func:`lib.miniworld.zoo.prepare`)
- :mod:`lib.miniworld.overview`: the tables and figure of notebook 00_world
- :mod:`lib.miniworld.analysis`: the prepared-vs-unprepared comparison at the end of notebooks 04-06
- :mod:`lib.miniworld.tables`: the docs tables of that comparison (registered in :mod:`lib.doctables`)
"""
