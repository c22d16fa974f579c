"""The train-before-test pipeline: task selection, fine-tuning, evaluation, perplexity, job grid."""
