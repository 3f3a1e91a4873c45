"""What the sides say to each other: one message class per kind, and the request client
every requester uses."""
