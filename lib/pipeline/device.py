"""Where the pipeline computes: the torch device, the CPU thread count and the CPU arithmetic.

Tiny models gain nothing from several CPU threads, and on a busy 2-core machine OpenMP threads
that spin-wait for each other made one pre-training step 30x slower (1.35 s vs 0.047 s measured).
So on CPU the pipeline uses ``TBT_TORCH_THREADS`` threads (default 1); on a GPU the thread count
hardly matters and is left alone unless the variable is set.

Results must not depend on which machine computed them. On a CPU, torch picks its vectorised
kernels by the instruction set it finds (AVX-512 on one machine, AVX2 on another) and MKL its
matrix kernels the same way; the kernels round differently, and training amplifies a difference in
the last bit into a different model (one fine-tuning epoch of a mini-world model: validation loss
0.60689005 with AVX-512 kernels, 0.60689010 with AVX2). :func:`pin_arithmetic` fixes both to the
AVX2 code paths, which every x86-64 machine of the last decade has (``ATEN_CPU_CAPABILITY=avx2``,
and MKL's conditional numerical reproducibility in its strict form, ``MKL_CBWR=AVX2,STRICT``: on a
machine with AMX tiles the plain ``AVX2`` form still let results depend on memory alignment); it
measured no slower here.
numpy, scipy and scikit-learn compute with OpenBLAS, which picks its kernels by the CPU too (AVX-512
"SkylakeX" kernels on an Intel machine, "Haswell" ones on an AMD EPYC without AVX-512: the k-means
anchor points of 07 came out otherwise): ``OPENBLAS_CORETYPE=Haswell`` gives every x86-64 machine
with AVX2 the same kernels, and ``OPENBLAS_NUM_THREADS=1`` the same split of the work, whatever its
core count. MKL's strict AVX2 branch holds only on Intel CPUs (on others MKL falls back to its
automatic branch, Intel's documentation says); its portable branch (``MKL_CBWR=COMPATIBLE``) made
the mini world's training 1.7-2.3x slower here, so training's last bits still depend on the CPU
vendor, and the numbers quoted from it carry the spread measured between two CPUs
(``docs/spreads.json``, :mod:`runner.docblocks`). The variables are read when torch and numpy load,
so the runner, the Makefile and the tests set them before any import; a value set by the user (or
the machine) wins.
"""

from __future__ import annotations

import os

from ..util import PINNED_ARITHMETIC, pin_arithmetic  # noqa: F401  (in the ground floor: align pins before numpy)

THREADS_ENV = "TBT_TORCH_THREADS"


def cpu_capability() -> str:
    """The vectorised instruction set torch's CPU kernels use in this process (e.g. ``AVX2``)."""
    import torch

    return str(torch.backends.cpu.get_cpu_capability())


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
