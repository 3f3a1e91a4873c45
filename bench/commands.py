"""``apex bench``: the throughput benchmark suites, each writing JSON and markdown."""

from __future__ import annotations

from pathlib import Path

import click

from bench.cli_options import (
    LAYOUT,
    parse_peer_python,
    progress,
    report_options,
    run_bench,
    timing_options,
)
from bench.compare_command import bench_compare
from bench.fault_names import FAULTS
from bench.fuzz_command import bench_fuzz
from bench.race_command import bench_race
from bench.workers import REPO_ROOT


@click.group(context_settings={"show_default": True})
def bench() -> None:
    """Throughput benchmarks; each writes JSON records and a markdown table."""


@bench.command("replay")
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
    from bench import replay_suite

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


@bench.command("shard")
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
) -> None:
    """Shard ingest beside raw pyzmq, and the learner's sample service while actors insert."""
    from bench import shard_suite

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
        )

    run_bench(shard_suite.SUITE, run_suite, json_path, markdown_path)


@bench.command("solve")
@click.option("--quick", is_flag=True, help="One seed, 4 s each: checks the plumbing only.")
@click.option("--seed", "seeds", multiple=True, type=int, help="Seeds to run [0 1 2].")
@click.option(
    "--max-seconds",
    type=click.FloatRange(min=1),
    default=None,
    help="Time limit per run [180, 4 with --quick].",
)
@click.option(
    "--impl",
    "implementations",
    multiple=True,
    type=click.Choice(["apex", "sb3"]),
    help="Implementations to run [both].",
)
@click.option(
    "--env",
    type=click.Choice(["CartPole-v1", "Pendulum-v1"]),
    default="CartPole-v1",
    help="CartPole-v1 (against SB3 DQN) or Pendulum-v1 (against SB3 TD3).",
)
@report_options
def bench_solve(quick, seeds, max_seconds, implementations, env, json_path, markdown_path) -> None:
    """Wall-clock time to solve an env: apex train beside stable-baselines3 (rl-zoo)."""
    from bench import solve_suite

    def run_suite(memory_bytes: int | None) -> dict:
        return solve_suite.run(
            env=env,
            quick=quick,
            seeds=seeds or (0, 1, 2),
            max_seconds=max_seconds,
            implementations=implementations or ("apex", "sb3"),
            progress=progress,
        )

    run_bench(solve_suite.SUITE, run_suite, json_path, markdown_path)


@bench.command("learner")
@click.option("--quick", is_flag=True, help="Few batch sizes, short repeats.")
@click.option("--repeats", type=click.IntRange(min=1), default=5, help="Timed repeats per figure.")
@click.option("--threads", type=click.IntRange(min=1), default=2, help="torch threads on the CPU.")
@report_options
def bench_learner(quick, repeats, threads, json_path, markdown_path) -> None:
    """Learner updates/s by batch size (MLP and Nature CNN), CPU and CUDA when present."""
    from bench import learner_suite

    def run_suite(memory_bytes: int | None) -> dict:
        return learner_suite.run(
            quick=quick, repeats=repeats, torch_threads=threads, progress=progress
        )

    run_bench(learner_suite.SUITE, run_suite, json_path, markdown_path)


@bench.command("actor")
@click.option("--quick", is_flag=True, help="Few env counts, short repeats.")
@click.option("--repeats", type=click.IntRange(min=1), default=5, help="Timed repeats per figure.")
@report_options
def bench_actor(quick, repeats, json_path, markdown_path) -> None:
    """One actor's acting loop in env steps/s, CartPole and Pong, by env count."""
    from bench import actor_suite

    def run_suite(memory_bytes: int | None) -> dict:
        return actor_suite.run(quick=quick, repeats=repeats, progress=progress)

    run_bench(actor_suite.SUITE, run_suite, json_path, markdown_path)


@bench.command("snapshot")
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
    from bench import snapshot_suite

    def run_suite(memory_bytes: int | None) -> dict:
        return snapshot_suite.run(quick=quick, progress=progress, part=part)

    run_bench(snapshot_suite.SUITE, run_suite, json_path, markdown_path)


@bench.command("frames")
@click.option("--quick", is_flag=True, help="Few frames, small stores, a 20K fill.")
@report_options
def bench_frames(quick, json_path, markdown_path) -> None:
    """Atari-sized replay on real Pong frames: codecs, bytes per transition, sampling, RSS."""
    from bench import frames_suite

    def run_suite(memory_bytes: int | None) -> dict:
        return frames_suite.run(quick=quick, progress=progress)

    run_bench(frames_suite.SUITE, run_suite, json_path, markdown_path)


@bench.command("faults")
@click.option("--quick", is_flag=True, help="5 s stops and full disks instead of 30 s.")
@click.option("--fault", "faults", multiple=True, type=click.Choice(FAULTS), help="[all]")
@click.option("--slurm", is_flag=True, help="Jobs on 3 namespace hosts under a real Slurm (root).")
@report_options
def bench_faults(quick, faults, slurm, json_path, markdown_path) -> None:
    """Kill, stop, corrupt and fill under a real run: recovery time and what was lost."""
    from bench import faults_suite, slurm_faults

    def run_suite(memory_bytes: int | None) -> dict:
        if slurm:
            return slurm_faults.run(quick, faults or None, progress)
        return faults_suite.run(quick, faults or None, progress)

    run_bench(faults_suite.SUITE, run_suite, json_path, markdown_path)


@bench.command("fleet")
@click.option("--quick", is_flag=True, help="Fleets of 16 and 64, 6 s windows.")
@click.option("--env", "env_name", type=click.Choice(["CartPole-v1", "Pong"]),
              default="CartPole-v1", help="Whose recorded transitions it sends.")  # fmt: skip
@click.option("--actors", "fleet_sizes", multiple=True, type=click.IntRange(min=1),
              help="Fleet sizes [64 256 1024 2048].")  # fmt: skip
@click.option("--shards", type=click.IntRange(min=1), default=4, help="Replay shards.")
@click.option("--seconds", type=click.FloatRange(min=1), default=None, help="Window [40].")
@click.option("--hosts", is_flag=True, help="Shards, learner, fleet on 3 namespace hosts (root).")
@report_options
def bench_fleet(quick, env_name, fleet_sizes, shards, seconds, hosts, json_path,
                markdown_path) -> None:  # fmt: skip
    """Logical actors replaying recorded transitions at the Ape-X paper's rate: the largest
    fleet S shards and a real learner sustain."""
    from bench import fleet_suite

    def run_suite(memory_bytes: int | None) -> dict:
        return fleet_suite.run(quick, env_name, fleet_sizes, shards, seconds, progress, hosts)

    run_bench(fleet_suite.SUITE, run_suite, json_path, markdown_path)


@bench.command("model")
@click.option("--env", "envs", multiple=True, type=click.Choice(["CartPole-v1", "Pong"]),
              help="Envs whose unit costs to measure [both].")  # fmt: skip
@click.option("--seconds", type=click.FloatRange(min=0.5), default=3.0, help="Per unit cost.")
@click.option("--repeats", type=click.IntRange(min=1), default=3, help="Median of this many.")
@click.option("--measured", multiple=True, help="bench system/fleet JSON [bench/results/].",
              type=click.Path(exists=True, dir_okay=False, path_type=Path))  # fmt: skip
@click.option("--learner-rate", "learner_rates", multiple=True, type=click.FloatRange(min=0.1),
              help="Learner updates/s to plan for [19: the Ape-X paper's GPU].")  # fmt: skip
@click.option("--plot", "plot_dir", type=click.Path(file_okay=False, path_type=Path),
              help="Write model-checks.png and model-plan.png here.")  # fmt: skip
@report_options
def bench_model(envs, seconds, repeats, measured, learner_rates, plot_dir, json_path,
                markdown_path) -> None:  # fmt: skip
    """Unit costs measured here, the cost model checked against measured runs, and the
    shards, actor cores and bandwidth 360, 1,000 and 4,000 Ape-X actors need."""
    from bench import cost_model, model_suite, plots

    results = REPO_ROOT / "bench" / "results"
    measured = measured or sorted([*results.glob("system-*.json"), *results.glob("fleet-*.json")])

    def run_suite(memory_bytes: int | None) -> dict:
        result = model_suite.run(envs or ("CartPole-v1", "Pong"), seconds, measured,
                                 learner_rates or (cost_model.PAPER_LEARNER_UPDATES,),
                                 progress, repeats)  # fmt: skip
        if plot_dir:
            for path in plots.plot_model(result["config"], plot_dir):
                progress(f"wrote {path}")
        return result

    run_bench(model_suite.SUITE, run_suite, json_path, markdown_path)


@bench.command("system")
@click.option("--quick", is_flag=True, help="One small configuration, a 3 s window.")
@click.option(
    "--actors",
    "actor_counts",
    multiple=True,
    type=click.IntRange(min=1),
    help="Actor counts [1 2 4 ... 64].",
)
@click.option(
    "--shards",
    "shard_counts",
    multiple=True,
    type=click.IntRange(min=1),
    help="Shard counts [1 2 4].",
)
@click.option(
    "--seconds",
    type=click.FloatRange(min=1),
    default=None,
    help="Measured window per configuration [12].",
)
@click.option("--envs-per-actor", type=click.IntRange(min=1), default=4, help="Per process.")
@click.option("--layout", "layouts", multiple=True, type=LAYOUT,
              help="PROCESSESxENVS, e.g. 4x64 (replaces --actors).")  # fmt: skip
@report_options
def bench_system(quick, actor_counts, shard_counts, seconds, envs_per_actor, layouts, json_path,
                 markdown_path) -> None:  # fmt: skip
    """Whole-system throughput, policy lag, start, CPU and memory per role as actors grow."""
    from bench import system_suite

    def run_suite(memory_bytes: int | None) -> dict:
        return system_suite.run(
            quick=quick, actor_counts=actor_counts or None, shard_counts=shard_counts or None,
            envs_per_actor=envs_per_actor, layouts=layouts, seconds_per_window=seconds,
            memory_bytes=memory_bytes, progress=progress,
        )  # fmt: skip

    run_bench(system_suite.SUITE, run_suite, json_path, markdown_path)


SUITES = ("replay", "shard", "learner", "actor", "system", "solve", "frames")
# What `apex bench run` runs when no suite is named: frames fills a 2M store, so it runs
# when asked for.
DEFAULT_SUITES = SUITES[:-1]


@bench.command("run")
@click.argument("suites", nargs=-1, type=click.Choice(SUITES))
@click.option("--quick", is_flag=True, help="Every suite tiny: about a minute in all.")
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("bench-results"),
    help="Directory for one JSON per suite, REPORT.md and the plots.",
)
@click.option("--plots/--no-plots", default=True, help="Write PNG plots (needs matplotlib).")
def bench_run(suites, quick, out, plots) -> None:
    """Run several suites (default: all but frames) into one directory, with a report and
    plots."""
    from apex.envs import EnvUnavailable
    from bench import (
        actor_suite,
        frames_suite,
        learner_suite,
        replay_suite,
        report,
        shard_suite,
        solve_suite,
        system_suite,
    )

    chosen = suites or DEFAULT_SUITES
    runners = {
        "replay": lambda memory: replay_suite.run(
            quick=quick, memory_bytes=memory, progress=progress,
            implementations=("apex", "cpprb", "torchrl") if quick else replay_suite.IMPLEMENTATIONS,
            repeats=2 if quick else 5,
        ),
        "shard": lambda memory: shard_suite.run(
            quick=quick, progress=progress, repeats=2 if quick else 5,
            seconds_per_repeat=0.1 if quick else None, ingest_rate=20_000.0 if quick else 100_000.0,
        ),
        "learner": lambda memory: learner_suite.run(
            quick=quick, repeats=2 if quick else 5, progress=progress
        ),
        "actor": lambda memory: actor_suite.run(
            quick=quick, repeats=2 if quick else 5, progress=progress
        ),
        "system": lambda memory: system_suite.run(
            quick=quick, memory_bytes=memory, progress=progress
        ),
        "solve": lambda memory: solve_suite.run(
            quick=quick, max_seconds=6.0 if quick else None, progress=progress
        ),
        "frames": lambda memory: frames_suite.run(quick=quick, progress=progress),
    }  # fmt: skip
    out.mkdir(parents=True, exist_ok=True)
    sections, problems = [], []
    for suite in chosen:
        document = report.new_document(REPO_ROOT)
        try:
            result = runners[suite](document["machine"]["memory_bytes"])
        except (ImportError, EnvUnavailable) as exc:  # a peer or extra its cases did not name
            reason = f"{type(exc).__name__}: {exc}"
            progress(f"{suite}: unavailable ({reason})")
            result = {"records": [report.unavailable_record(suite, "all", "apex", reason)],
                      "ratios": [], "config": {}}  # fmt: skip
        report.add_suite(document, suite, result)
        problems += [f"{suite}: {p}" for p in report.validate(document)]
        report.write_json(document, out / f"{suite}.json")
        sections.append(report.markdown(document))
        if plots:
            from bench.plots import plot_document

            for path in plot_document(document, out / "plots"):
                sections.append(f"![{path.stem}](plots/{path.name})\n")
    (out / "REPORT.md").write_text("# Benchmark report\n\n" + "\n".join(sections))
    click.echo(f"wrote {', '.join(f'{s}.json' for s in chosen)} and REPORT.md to {out}")
    if problems:
        raise click.ClickException("benchmark documents failed validation: " + "; ".join(problems))


bench.add_command(bench_compare, "compare")
bench.add_command(bench_race, "race")
bench.add_command(bench_fuzz, "fuzz")
