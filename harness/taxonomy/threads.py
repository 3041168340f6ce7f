"""CPU threads for the taxonomy's numeric work (torch for embeddings, BLAS/OpenMP for k-means).

Default: one thread. On a shared machine whose cores are already busy, busy-waiting thread pools
made the k-means sweep 4-10x and embedding 3x slower with 2 threads than with 1 (2-core machine,
load average ~10); one thread also keeps floating-point reductions in a fixed order, so results
do not depend on the machine's load. ``--threads N`` uses more on an idle machine.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

from threadpoolctl import threadpool_limits


@contextmanager
def limit_threads(n: int = 1) -> Iterator[int]:
    """Run the block with `n` threads in torch, BLAS and OpenMP; restores torch's setting."""
    # sklearn (~1.4 s, not at CLI start-up) loads OpenMP, so the limit reaches it
    import sklearn.cluster._k_means_lloyd  # noqa: F401
    import torch

    if n < 1:
        raise ValueError(f"threads must be >= 1, got {n}")
    old = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        with threadpool_limits(limits=n):
            yield n
    finally:
        torch.set_num_threads(old)
