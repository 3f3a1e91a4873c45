"""IMPALA's path through one queue shard, measured: one actor process pushes unrolls
(CartPole's sizes, T = 20, 8 a message as IMPALA's actors send them) as fast as the shard
takes them, and the learner's sampler takes batches of 32 unrolls, each handed out once,
as ready tensors. The queue holds the pusher back whenever the learner's side is behind,
so the figure is what the whole path carries: unrolls per second in, batches per second
out (see ``bench.parts.shard_suite``, whose helpers start the processes)."""

from __future__ import annotations

import time

from bench.parts.sample_service import sampled_windows
from bench.parts.shard_processes import START_TIMEOUT_S, start_pusher, start_shard
from launch.supervision.role_process import stop_all

UNROLL_BATCH = 32
UNROLLS_PER_MESSAGE = 8
QUEUE_CAPACITY = 1024


def measure_queue(timing: dict) -> tuple[list[float], list[float]]:
    """Per timed window: learner batches per second, and unrolls per second taken in."""
    from apex.learning.staging import DeviceStager
    from bench.parts.shard_worker import transition_spec
    from replay.protocol.requests import RequestClient
    from replay.sampling.pump import SamplerConfig
    from replay.sampling.sampler import make_sampler
    from replay.wire.security import SecurityConfig, make_context

    spec = transition_spec("unrolls")
    extra = ("--queue", "--min-size", str(UNROLL_BATCH))
    shard, ready = start_shard("unrolls", QUEUE_CAPACITY, extra=extra)
    context = make_context(SecurityConfig(None), need_server_secret=False)
    processes = [shard]
    try:
        budget = (
            START_TIMEOUT_S
            + timing["warmup_s"]
            + timing["repeats"] * timing["seconds_per_repeat"]
            + 30
        )
        processes.append(
            start_pusher("apex", "unrolls", 1, [ready], budget, batch=UNROLLS_PER_MESSAGE)
        )
        client = RequestClient(context, ready["request"], sender=97)
        deadline = time.monotonic() + START_TIMEOUT_S
        while client.info()["size"] < UNROLL_BATCH:
            if time.monotonic() > deadline:
                raise TimeoutError("no unrolls reached the queue")
            time.sleep(0.05)
        config = SamplerConfig(
            endpoints=(ready["request"],),
            batch_size=UNROLL_BATCH,
            prefetch=4,
            sender=96,
            security=SecurityConfig(None),
        )
        with make_sampler(config, spec, DeviceStager("cpu")) as sampler:
            batch_rates, unroll_rates = sampled_windows(
                sampler, lambda: client.info()["transitions_added"], timing
            )
        client.close()
    finally:
        context.destroy(linger=0)
        stop_all(processes)
    return batch_rates, unroll_rates
