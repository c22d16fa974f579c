"""Where the pipeline computes: the torch device and CPU thread count.

Tiny models gain nothing from several CPU threads, and on a busy 2-core machine OpenMP threads
that spin-wait for each other made one pre-training step 30x slower (1.35 s vs 0.047 s measured).
So on CPU the pipeline uses ``TBT_TORCH_THREADS`` threads (default 1); on a GPU the thread count
hardly matters and is left alone unless the variable is set.
"""

from __future__ import annotations

import os

THREADS_ENV = "TBT_TORCH_THREADS"


def setup_torch() -> str:
    """Set the CPU thread count (see module doc) and return the device name ("cuda" or "cpu")."""
    import torch

    cuda = torch.cuda.is_available()
    threads = os.environ.get(THREADS_ENV)
    if threads or not cuda:
        n = int(threads or 1)
        if torch.get_num_threads() != n:
            torch.set_num_threads(n)
    return "cuda" if cuda else "cpu"


def free_memory() -> None:
    """Give back what a failed or finished piece of work held: Python garbage and cached GPU memory."""
    import gc

    import torch

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
