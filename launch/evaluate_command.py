"""``apex evaluate RUN_DIR``: greedy episodes of a trained agent from one of its run's
checkpoints (the newest readable one unless named), played here on fresh copies of the
run's env with unclipped rewards, as the run's evaluator plays them; and, with ``--video``,
a recording of the first copy's (gymnasium's ``RecordVideo``, for envs of the gymnasium
family; moviepy writes the files)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import click

from launch.options import RUN_DIR


def trained_policy(run_dir: Path, checkpoint_path: Path | None = None):
    """The run's acting policy (in float) with the weights a checkpoint holds: those the
    run published (its policy average where it kept one); and the checkpoint's path.

    Raises:
        click.UsageError: no run there, or no readable checkpoint.
    """
    import torch

    from apex.algorithms.registry import build_acting, build_algorithm
    from apex.envs.families import env_shape
    from apex.learning import checkpoint
    from apex.learning.checkpoint import LearnerCheckpoints
    from launch.config import ConfigError, read_resolved

    try:
        config = read_resolved(run_dir / "config.json")
    except ConfigError as exc:
        raise click.UsageError(f"{run_dir}/config.json: {exc}") from exc
    if checkpoint_path is None:
        checkpoint_path, refused = checkpoint.latest_readable(run_dir / "checkpoints")
        if checkpoint_path is None:
            reasons = "; ".join(refused) or "none written yet"
            raise click.UsageError(f"{run_dir} has no readable checkpoint ({reasons})")
    shape = env_shape(config.env)
    learner = dataclasses.replace(config.learner, device="cpu", cuda_graph=False)
    algorithm = build_algorithm(learner, config.algorithms, shape, torch.device("cpu"))
    try:
        LearnerCheckpoints.restore(checkpoint_path, algorithm)
    except (ValueError, KeyError, RuntimeError) as exc:
        raise click.UsageError(f"{checkpoint_path}: {exc}") from exc
    published = algorithm.policy.state_dict()
    acting = dataclasses.replace(config.actor_config(0), acting_precision="float32")
    policy = build_acting(acting, config.algorithms, shape).policy
    policy.load({name: tensor.detach().cpu().numpy() for name, tensor in published.items()})
    return config, policy, checkpoint_path


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
        raise click.UsageError(f"--video records envs of the gymnasium family; {env_name} "
                               f"is of the {chosen.family} family")  # fmt: skip
    if importlib.util.find_spec("moviepy") is None:
        raise click.UsageError("--video needs moviepy, which writes the files: pip install "
                               "moviepy")  # fmt: skip
    register(dataclasses.replace(chosen, kwargs={**chosen.kwargs, "render_mode": "rgb_array"}))

    def recorded() -> gym.Env:
        return gym.wrappers.RecordVideo(make_env(env_name, training=False), str(video),
                                        episode_trigger=lambda _: True)  # fmt: skip

    def plain() -> gym.Env:
        return make_env(env_name, training=False)

    return gym.vector.SyncVectorEnv([recorded] + [plain] * (episodes - 1))


@click.command("evaluate")
@click.argument("run_dir", type=RUN_DIR)
@click.option("--checkpoint", "checkpoint_path", type=click.Path(exists=True, dir_okay=False,
              path_type=Path), help="This checkpoint, not the newest.")  # fmt: skip
@click.option("--episodes", type=click.IntRange(1, 1000), default=10, show_default=True)
@click.option("--seed", type=int, default=12345, show_default=True,
              help="Episode i starts from seed + i.")  # fmt: skip
@click.option(
    "--video",
    type=click.Path(file_okay=False, path_type=Path),
    help="Record the episodes of the first copy into this directory.",
)
@click.option("--json", "as_json", is_flag=True, help="The returns as JSON.")
def evaluate(run_dir, checkpoint_path, episodes, seed, video, as_json) -> None:
    """Greedy episodes of RUN_DIR's agent from its newest checkpoint: each return, their
    mean, and the run's target."""
    import numpy as np

    from apex.envs.families import solved_return
    from apex.envs.vector import evaluation_envs
    from apex.learning.evaluation import play_greedy

    config, policy, path = trained_policy(run_dir, checkpoint_path)
    envs = (_recording(config.env, episodes, video) if video
            else evaluation_envs(config.env, episodes, config.actor.env_stepping))  # fmt: skip
    try:
        returns = play_greedy(policy, envs, seed, config.learner.eval_epsilon)
    finally:
        envs.close()
    target = solved_return(config.env, config.learner.target_return)
    result = {"run_dir": str(run_dir), "checkpoint": str(path), "env": config.env,
              "episodes": episodes, "seed": seed, "returns": returns.tolist(),
              "mean": float(np.mean(returns)), "target": target,
              "video": str(video) if video else None}  # fmt: skip
    if as_json:
        click.echo(json.dumps(result))
        return
    target_text = f" (target {target:g})" if target is not None else ""
    click.echo(f"{config.env} from {path.name}: mean {result['mean']:.2f} over {episodes} "
               f"greedy episodes{target_text}")  # fmt: skip
    click.echo("returns: " + ", ".join(f"{r:.2f}" for r in returns))
    if video:
        click.echo(f"video of the first copy's episodes in {video}/")
