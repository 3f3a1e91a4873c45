"""The throughput benchmark suite (``apex bench``).

One module per suite, a common runner (warm-up, repeats, medians, machine info) and a
report writer. Results are JSON records, one per (suite, case, implementation, metric),
under a header that names the machine, package versions and git commit, so runs can be
compared later.
"""
