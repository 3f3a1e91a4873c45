"""The actors' side: the insert client and its lane to each shard."""
