"""The learner's side: the sampler over every shard, its pump, its view of each shard's
health, and the arithmetic of sampling across shards."""
