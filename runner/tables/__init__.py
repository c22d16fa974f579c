"""The docs' results tables (registered in :mod:`runner.doctables`), one module per part of the study.

    analysis     stages 04-06 on the published data and the mini world
    pipeline     stages 01-03
    miniworld    the mini world's ground truth against what the protocols recover
    benchalign   stage 07 and the worked example of docs/align.md
    placement    a placement profile's new models (stage 08)
"""
