"""What a unit of the train-before-test pipeline computes: task selection, fine-tuning, evaluation,
perplexity, the two protocols. How the units are run (locally, in a process pool, on Slurm) is its
subpackage :mod:`lib.pipeline.launch`.

    tasks       lm-eval registry (built-ins + include_path folders), selection, split rule and plans,
                one document rendered as lm-eval scores it
    datasets    each task's dataset repository and revision, pinned revisions, a unit's record of its
                documents
    evaluate    model loading/resolution, lm-eval scoring of a preloaded model, per-item files
    finetune    the recipe (the paper's choices, named), tokenised training examples, one
                learning-rate unit (and its TensorBoard curves)
    training    the two training loops (pre-training, fine-tuning epochs with micro-batches,
                checkpointing and out-of-memory back-off), their optimiser step, the validation loss
    perplexity  local text corpora as loglikelihood_rolling tasks; bits-per-byte tables
    protocols   the paper's two protocols for one (model, benchmark), read top to bottom
    spec        what one job runs (JobSpec): what determines a result, its provenance
    reports     the tables and summaries of notebooks 02 and 03
    figures     the figures of notebooks 01-03
    tiny        tiny causal LMs built offline: tokenizer and model primitives
    localtasks  writes local lm-eval task YAML + JSONL
    device      torch device, CPU thread count and the pinned CPU arithmetic
    hub         whether the Hugging Face Hub can be used, found out once and within seconds
    launch      how units are run: the job grid, process pool, Slurm, locks, ``make preflight``

Heavy imports (torch, transformers, peft, lm_eval) happen inside functions, so importing a
module here is cheap.
"""
