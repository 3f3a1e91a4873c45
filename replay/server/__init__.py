"""The shard's side: one replay shard's loop, its settings, ingest, delivery lanes, credit,
rate limiter and snapshots."""
