"""``python -m launch`` runs the ``apex`` command."""

from launch.cli import main

main()
