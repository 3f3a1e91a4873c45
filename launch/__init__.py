"""The ``apex`` command line, local supervisor and Slurm glue (uses ``apex`` and ``replay``)."""

import os

# Every role is its own process and the machine's cores are shared out between processes,
# so numerical libraries run single-threaded unless the user says otherwise. This runs
# before numpy loads OpenBLAS (``apex`` and ``python -m launch`` import this package
# first): left at one thread per core, an actor's idle BLAS threads spun and one CartPole
# actor used 1.13 cores, starving the learner.
for _variable in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_variable, "1")
