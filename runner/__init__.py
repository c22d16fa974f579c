"""What runs the notebooks and reports on them: nothing here is imported by a notebook or by lib.

    run           the runner: a profile's notebooks in order through papermill (`make all`)
    plan          what a run will do and for about how long, said before it starts
    stagecache    whether a stage's last run still holds: its key, the inputs it read, its results
    kernel        the kernel a notebook runs in, and the console's heartbeat meanwhile
    failures      the one console line and the log file of a run that failed
    doctables     the docs' results tables: their registry and the summaries they read
    tables        the tables themselves, one module per part of the study
    docblocks     the docs' results tables written and checked (`make docs`, `make check-docs`)
    figreview     the checks of a saved figure as a reviewer of a two-column paper reads it
    contactsheet  a profile's figures checked and shown at print size (`make check-figures`)
    leaderboard   a profile's leaderboard page
    align         `make align` / `make score`: BenchAlign on your own preferences, from the command line
    download      `make data`: the published reference data downloaded and converted
    published     the published results imported into a store (a prepare hook); a first run compared with them
    preflight     `make preflight`: GPU-hours, memory and jobs of a profile's notebook 02 before submission
    fetch         `make models`: every model and dataset of a profile fetched and checked before GPU jobs
    realmodel     the real_cpu profile's prepare hook: a real pretrained LM and lm-eval's own task configs, offline
    status        `make status`: units done / running / pending / failed per stage, from the store and Slurm
    export        a profile's results as Every Eval Ever records (`make export`); TensorBoard on its curves
"""
