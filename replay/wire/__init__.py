"""Bytes on the wire and who may send them: the frame layout (``layout``), the one place
that makes sockets (``transport``), CURVE security and a run's keys."""
