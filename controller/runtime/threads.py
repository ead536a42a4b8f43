"""How many CPU threads a replica's numeric libraries start.

OpenMP, OpenBLAS and MKL (numpy, scikit-learn, PyTorch's CPU kernels) start
a thread per core by default: four replicas on two cores would each start
two, and spend their time switching. A replica gets, in its environment,

- the deployment's own choice when its `runtime.env` sets `OMP_NUM_THREADS`
  (the other variables follow it);
- else `ceil(resources.num_cpus)` when the deployment sets it;
- else the host's cores shared by the replicas on it at the replica's start
  (this one included), at least 1.

`SERVEFLEET_CPU_THREADS` carries the same number for libraries that read no
variable of their own (ONNX Runtime: `intra_op_num_threads`), and any
variable the deployment sets itself is left as it is.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
                    "SERVEFLEET_CPU_THREADS")


def thread_env(user_env: Mapping[str, str], num_cpus: float, cores: int,
               replicas_on_host: int) -> dict[str, str]:
    """The variables to add to a replica's environment (none that it sets)."""
    threads = _positive_int(user_env.get("OMP_NUM_THREADS", ""))
    if threads is None and num_cpus > 0:
        threads = math.ceil(num_cpus)
    if threads is None:
        threads = max(1, cores // max(1, replicas_on_host))
    return {name: str(threads) for name in THREAD_VARIABLES if name not in user_env}


def _positive_int(text: str) -> int | None:
    try:
        value = int(text.strip())
    except ValueError:
        return None
    return value if value > 0 else None
