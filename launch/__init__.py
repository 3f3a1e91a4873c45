"""The ``apex`` command line, local supervisor and Slurm glue (uses ``apex`` and ``replay``)."""
