"""``apex bench`` commands that measure one part at a time: the replay core against its
peers (``replay``), a shard service (``shard``), snapshots (``snapshot``), Atari frame
storage (``frames``), the learner's update (``learner``) and an actor's loop (``actor``)."""

from __future__ import annotations

from pathlib import Path

import click

from bench.cli_options import parse_peer_python, progress, report_options, run_bench, timing_options


@click.command("replay")
@click.option("--quick", is_flag=True, help="Tiny stores and short repeats (seconds in all).")
@click.option(
    "--impl",
    "implementations",
    multiple=True,
    type=click.Choice(["apex", "apex-fresh", "cpprb", "torchrl"]),
    help="Implementations to measure (default: all).",
)
@click.option(
    "--case",
    "case_names",
    multiple=True,
    help="Cases to run, by name or kind (small, atari); default: all.",
)
@timing_options("repeat", 0.4, 0.05, 0.001)
@click.option(
    "--peer-python",
    multiple=True,
    metavar="NAME=PATH",
    help="Run a peer under another interpreter, e.g. torchrl=.venv-peers/bin/python.",
)
@report_options
def bench_replay(
    quick: bool,
    implementations: tuple[str, ...],
    case_names: tuple[str, ...],
    repeats: int,
    seconds_per_repeat: float | None,
    peer_python: tuple[str, ...],
    json_path: Path | None,
    markdown_path: Path | None,
) -> None:
    """Prioritized replay core beside cpprb and torchrl: insert, sample, update, loop."""
    from bench.parts import replay_suite

    peers = parse_peer_python(peer_python)

    def run_suite(memory_bytes: int | None) -> dict:
        return replay_suite.run(
            quick=quick,
            implementations=implementations or replay_suite.IMPLEMENTATIONS,
            case_names=case_names or None,
            repeats=repeats,
            seconds_per_repeat=seconds_per_repeat,
            peer_python=peers,
            memory_bytes=memory_bytes,
            progress=progress,
        )

    run_bench(replay_suite.SUITE, run_suite, json_path, markdown_path)


@click.command("shard")
@click.option("--quick", is_flag=True, help="One pusher, short windows, small stores.")
@timing_options("window", 1.0, 0.2, 0.01)
@click.option(
    "--pushers", multiple=True, type=click.IntRange(min=1), help="Pusher process counts [1 2 4]."
)
@click.option(
    "--kind",
    "kinds",
    multiple=True,
    type=click.Choice(["small", "atari", "atari-frames"]),
    help="Transition kinds to ingest [all three]: atari-frames sends each Pong frame once, "
    "LZ4-compressed, to frame shards.",
)
@report_options
@click.option(
    "--ingest-rate",
    type=click.FloatRange(min=0),
    default=100_000.0,
    help="Transitions/s inserted during the sample-service figure (0: unpaced).",
)
@click.option("--curve", is_flag=True, help="Also the CURVE cases: with keys beside without.")
@click.option(
    "--part",
    "parts",
    multiple=True,
    type=click.Choice(["ingest", "sample", "queue", "sequences"]),
    help="Only these parts [all]: ingest by kind, the sample service, IMPALA's queue, R2D2's "
    "sequences (a store of 10M steps, and batches of 64 x 80 from one shard).",
)
def bench_shard(
    quick,
    repeats,
    seconds_per_repeat,
    pushers,
    kinds,
    json_path,
    markdown_path,
    ingest_rate,
    curve,
    parts,
) -> None:
    """Shard ingest beside raw pyzmq, and the learner's sample service while actors insert."""
    from bench.parts import shard_suite

    def run_suite(memory_bytes: int | None) -> dict:
        return shard_suite.run(
            quick=quick,
            repeats=repeats,
            seconds_per_repeat=seconds_per_repeat,
            pusher_counts=pushers or None,
            kinds=kinds or ("small", "atari", "atari-frames"),
            ingest_rate=ingest_rate,
            progress=progress,
            curve=curve,
            parts=parts or shard_suite.PARTS,
        )

    run_bench(shard_suite.SUITE, run_suite, json_path, markdown_path)


@click.command("learner")
@click.option("--quick", is_flag=True, help="Few batch sizes, short repeats.")
@click.option("--repeats", type=click.IntRange(min=1), default=5, help="Timed repeats per figure.")
@click.option("--threads", type=click.IntRange(min=1), default=2, help="torch threads on the CPU.")
@click.option(
    "--device",
    "devices",
    type=click.Choice(["cpu", "cuda"]),
    multiple=True,
    help="Only these devices (repeatable) [the CPU, and CUDA where torch sees it].",
)
@click.option(
    "--network",
    "networks",
    multiple=True,
    help="Only this network's cases (repeatable; mlp, nature-cnn, r2d2-mlp, ...) [all].",
)
@report_options
def bench_learner(quick, repeats, threads, devices, networks, json_path, markdown_path) -> None:
    """Learner updates/s by batch size (MLP and Nature CNN), CPU and CUDA when present,
    and where a DQN update's time goes (staging, forward, backward, optimizer, read back)."""
    from bench.parts import learner_suite

    if "cuda" in devices:
        import torch

        if not torch.cuda.is_available():
            raise click.UsageError(f"--device cuda: torch {torch.__version__} sees no CUDA device")
    unknown = sorted(set(networks) - set(learner_suite.NETWORKS))
    if unknown:
        raise click.UsageError(
            f"--network: no {', '.join(unknown)}; there are {', '.join(learner_suite.NETWORKS)}"
        )

    def run_suite(memory_bytes: int | None) -> dict:
        return learner_suite.run(
            quick=quick,
            repeats=repeats,
            torch_threads=threads,
            progress=progress,
            device_types=tuple(devices) or ("cpu", "cuda"),
            networks=tuple(networks),
        )

    run_bench(learner_suite.SUITE, run_suite, json_path, markdown_path)


@click.command("actor")
@click.option("--quick", is_flag=True, help="Few env counts, short repeats.")
@click.option("--repeats", type=click.IntRange(min=1), default=5, help="Timed repeats per figure.")
@report_options
def bench_actor(quick, repeats, json_path, markdown_path) -> None:
    """One actor's acting loop in env steps/s, CartPole and Pong, by env count."""
    from bench.parts import actor_suite

    def run_suite(memory_bytes: int | None) -> dict:
        return actor_suite.run(quick=quick, repeats=repeats, progress=progress)

    run_bench(actor_suite.SUITE, run_suite, json_path, markdown_path)


@click.command("snapshot")
@click.option("--quick", is_flag=True, help="Small shards, 2 s windows.")
@click.option(
    "--part",
    type=click.Choice(["all", "service", "fill"]),
    default="all",
    show_default=True,
    help="service: what snapshots cost the sample service; fill: snapshot size, time and "
    "restore peak memory at 5%, 50% and 100% fill.",
)
@report_options
def bench_snapshot(quick, part, json_path, markdown_path) -> None:
    """What shard snapshots cost the sample service (p99), what they weigh against what
    the shard holds, and the time and memory to restore."""
    from bench.parts import snapshot_suite

    def run_suite(memory_bytes: int | None) -> dict:
        return snapshot_suite.run(quick=quick, progress=progress, part=part)

    run_bench(snapshot_suite.SUITE, run_suite, json_path, markdown_path)


@click.command("frames")
@click.option("--quick", is_flag=True, help="Few frames, small stores, a 20K fill.")
@report_options
def bench_frames(quick, json_path, markdown_path) -> None:
    """Atari-sized replay on real Pong frames: codecs, bytes per transition, sampling, RSS."""
    from bench.parts import frames_suite

    def run_suite(memory_bytes: int | None) -> dict:
        return frames_suite.run(quick=quick, progress=progress)

    run_bench(frames_suite.SUITE, run_suite, json_path, markdown_path)
