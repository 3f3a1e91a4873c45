"""Ape-X roles: actors, the learner, networks and algorithms (built on ``replay``)."""
