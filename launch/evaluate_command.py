"""``apex evaluate RUN_DIR``: greedy episodes of a trained agent, played here on fresh copies of the
run's env with unclipped rewards, as the run's evaluator plays them; and, with ``--video``,
a recording of the first copy's (gymnasium's ``RecordVideo``, for envs of the gymnasium
family; moviepy writes the files).

The agent is the one that solved the run where the run kept it (the weights its
evaluator confirmed, ``apex.learning.kept_weights``), else the newest readable
checkpoint's; ``--weights`` and ``--checkpoint`` choose another."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import click

from launch.options import RUN_DIR
from launch.run_files import CHECKPOINTS_DIR, CONFIG_FILE


def trained_policy(run_dir: Path, checkpoint_path: Path | None = None, weights: str = "auto"):
    """The run's acting policy (in float) with the weights ``weights`` names: "solved" or
    "best" (those its evaluator kept, ``apex.learning.kept_weights``), "checkpoint" (those
    a checkpoint holds, ``checkpoint_path`` or the newest readable one: what the run
    published, its policy average where it kept one), or "auto" (solved where kept, else
    the checkpoint's). Returns the config, the policy, the file and what it says of them
    (``version``; and the evaluation's ``mean``, ``episodes`` for kept weights).

    Raises:
        click.UsageError: no run there, or no such weights.
    """
    import torch

    from apex.algorithms.registry import build_acting, build_algorithm
    from apex.envs.families import env_shape
    from apex.learning import checkpoint, kept_weights
    from apex.learning.checkpoint import LearnerCheckpoints
    from launch.config import ConfigError, read_resolved

    try:
        config = read_resolved(run_dir / CONFIG_FILE)
    except ConfigError as exc:
        raise click.UsageError(f"{run_dir}/config.json: {exc}") from exc
    shape = env_shape(config.env)
    acting = dataclasses.replace(config.actor_config(0), acting_precision="float32")
    policy = build_acting(acting, config.algorithms, shape).policy
    if checkpoint_path is None and weights != "checkpoint":
        name = kept_weights.BEST_FILE if weights == "best" else kept_weights.SOLVED_FILE
        path = run_dir / CHECKPOINTS_DIR / name
        if path.exists():
            try:
                arrays, facts = kept_weights.read(path)
                policy.load(arrays)
            except (OSError, ValueError, KeyError) as exc:
                raise click.UsageError(f"{path}: {exc}") from exc
            return config, policy, path, facts
        if weights != "auto":
            raise click.UsageError(f"{run_dir} kept no {weights} weights ({path} is missing)")
    if checkpoint_path is None:
        checkpoint_path, refused = checkpoint.latest_readable(run_dir / CHECKPOINTS_DIR)
        if checkpoint_path is None:
            reasons = "; ".join(refused) or "none written yet"
            raise click.UsageError(f"{run_dir} has no readable checkpoint ({reasons})")
    learner = dataclasses.replace(config.learner, device="cpu")
    algorithm = build_algorithm(learner, config.algorithms, shape, torch.device("cpu"))
    try:
        counters = LearnerCheckpoints.restore(checkpoint_path, algorithm)
    except (ValueError, KeyError, RuntimeError) as exc:
        raise click.UsageError(f"{checkpoint_path}: {exc}") from exc
    published = algorithm.policy.state_dict()
    policy.load({name: tensor.detach().cpu().numpy() for name, tensor in published.items()})
    return config, policy, checkpoint_path, {"version": counters.weight_version}


def _recording(env_name: str, episodes: int, video: Path):
    """``episodes`` copies of a gymnasium-family env drawing frames, the first recorded
    to ``video``.

    Raises:
        click.UsageError: an env of another family, or no moviepy to write the files.
    """
    import importlib.util

    import gymnasium as gym

    from apex.envs.families import make_env
    from apex.envs.presets import preset, register

    chosen = preset(env_name)
    if chosen.family != "gymnasium":
        raise click.UsageError(
            f"--video records envs of the gymnasium family; {env_name} "
            f"is of the {chosen.family} family"
        )
    if importlib.util.find_spec("moviepy") is None:
        raise click.UsageError("--video needs moviepy, which writes the files: pip install moviepy")
    register(dataclasses.replace(chosen, kwargs={**chosen.kwargs, "render_mode": "rgb_array"}))

    def recorded() -> gym.Env:
        return gym.wrappers.RecordVideo(
            make_env(env_name, training=False), str(video), episode_trigger=lambda _: True
        )

    def plain() -> gym.Env:
        return make_env(env_name, training=False)

    return gym.vector.SyncVectorEnv([recorded] + [plain] * (episodes - 1))


@click.command("evaluate")
@click.argument("run_dir", type=RUN_DIR)
@click.option(
    "--checkpoint",
    "checkpoint_path",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="This checkpoint, not the newest.",
)
@click.option(
    "--weights",
    type=click.Choice(["auto", "solved", "best", "checkpoint"]),
    default="auto",
    show_default=True,
    help="Which agent: the one whose solve the evaluator confirmed, the best evaluation's, "
    "or a checkpoint's (auto: solved where the run kept it, else the newest checkpoint).",
)
@click.option("--episodes", type=click.IntRange(1, 1000), default=10, show_default=True)
@click.option(
    "--seed", type=int, default=12345, show_default=True, help="Episode i starts from seed + i."
)
@click.option(
    "--video",
    type=click.Path(file_okay=False, path_type=Path),
    help="Record the episodes of the first copy into this directory.",
)
@click.option("--json", "as_json", is_flag=True, help="The returns as JSON.")
def evaluate(run_dir, checkpoint_path, weights, episodes, seed, video, as_json) -> None:
    """Greedy episodes of RUN_DIR's agent (the one that solved it where the run kept it,
    else its newest checkpoint's): each return, their mean, and the run's target."""
    import numpy as np

    from apex.envs.families import solved_return
    from apex.envs.guard import FaultTally
    from apex.envs.vector import evaluation_envs
    from apex.learning.evaluation import play_greedy

    config, policy, path, facts = trained_policy(run_dir, checkpoint_path, weights)
    envs = (
        _recording(config.env, episodes, video)
        if video
        else evaluation_envs(config.env, episodes, config.actor.env_stepping)
    )
    faults = FaultTally(say_first=False)  # said below, with what they cost
    try:
        returns = play_greedy(policy, envs, seed, config.learner.eval_epsilon, faults)
    finally:
        envs.close()
    target = solved_return(config.env, config.learner.target_return)
    result = {
        "run_dir": str(run_dir),
        "checkpoint": str(path),
        "env": config.env,
        "weights_version": facts.get("version"),
        "kept_mean": facts.get("mean"),
        "episodes": episodes,
        "seed": seed,
        "returns": returns.tolist(),
        "mean": float(np.mean(returns)),
        "target": target,
        "episodes_replayed": faults.replayed,
        "video": str(video) if video else None,
    }
    if as_json:
        click.echo(json.dumps(result))
        return
    target_text = f" (target {target:g})" if target is not None else ""
    kept = (
        f", which scored {facts['mean']:.2f} over {facts['episodes']} episodes in the run"
        if "mean" in facts
        else ""
    )
    click.echo(
        f"{config.env}, weights version {facts.get('version')} from {path.name}"
        f"{kept}: mean {result['mean']:.2f} over {episodes} greedy episodes"
        f"{target_text}"
    )
    click.echo("returns: " + ", ".join(f"{r:.2f}" for r in returns))
    if faults.total:
        click.echo(
            f"env faults {faults.total}: {faults.replayed} episodes played again "
            f"(the latest: {faults.latest})"
        )
    if video:
        click.echo(f"video of the first copy's episodes in {video}/")
