"""What every launcher of roles shares (``launch.local``'s supervisor, ``launch.slurm``'s
tasks, the learner's evaluator keeper) and the views read: a role as a child process and
the reasons in its log, restart streaks and budgets, stop signals, and the processes of a
run with their figures."""
