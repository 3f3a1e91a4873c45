"""Run settings for a flat-vector env that has no preset settings of its own (a gymnasium
id, a user's env, or a named env run on its family's defaults), sized to the task.

The run-wide defaults are the Ape-X paper's, for Atari: a replay of 1M, 50K transitions
before the first update, batches of 512, a target copy every 2,500 updates. On a small
vector task they spend minutes warming up and hundreds of MB on a replay it never fills.
A vector task here gets instead, from its episode limit ``T`` (the spec's
``max_episode_steps``; 1,000 where it has none):

- ``replay.capacity`` 200 episodes (``200 T``), from 50K to 1M;
- ``replay.min_size`` two episodes (``2 T``), from 1,000 to 50K;
- ``learner.eval_every_steps`` ten episodes (``10 T``), from 2,000 to 50K;
- one actor process of 8 env copies: a vector env's steps are cheap, and the learner is
  what such a run waits on;
- for DQN, a learner of two 256-unit layers, batches of 128, Adam at 1e-3, clipped at
  norm 10, weights published every 20 updates, a target copy every 250 updates, and 4
  samples per inserted transition (other algorithms keep their own learners' defaults).

Which envs take it: those whose preset has no settings for every algorithm (settings of
one algorithm's go over these), with observations of one dimension after flattening
(``apex.envs.families``). Images keep the run-wide defaults.
"""

from __future__ import annotations

import functools
import json

from apex.envs.families import make_env, shape_of
from apex.envs.presets import preset

# Where a spec gives no episode limit.
UNLIMITED_EPISODE_STEPS = 1_000


def _clamped(value: int, low: int, high: int) -> int:
    return max(low, min(high, value))


def vector_defaults(episode_limit: int | None, dqn: bool) -> dict:
    """The module's rule for a vector task of ``episode_limit`` steps (None: none);
    ``dqn``: the learner's settings too (other algorithms keep their own)."""
    steps = episode_limit or UNLIMITED_EPISODE_STEPS
    settings: dict = {
        "actors": 1,
        "shards": 1,
        "replay": {
            "capacity": _clamped(200 * steps, 50_000, 1_000_000),
            "min_size": _clamped(2 * steps, 1_000, 50_000),
        },
        "actor": {"envs_per_actor": 8},
        "learner": {"eval_every_steps": _clamped(10 * steps, 2_000, 50_000)},
    }
    if dqn:
        settings["replay"].update(samples_per_insert=4.0, error_buffer=20_000.0)
        settings["learner"].update(batch_size=128, learning_rate=1e-3, max_grad_norm=10.0,
                                   publish_period=20, hidden=[256, 256])  # fmt: skip
        settings["actor"]["hidden"] = [256, 256]
        settings["dqn"] = {"target_update_period": 250}
    return settings


def task_defaults(name: str, algorithm: str) -> dict:
    """:func:`vector_defaults` for ``name`` run by ``algorithm`` (a name, or "auto")
    where they apply (the module's docstring); ``{}`` otherwise, and where the env cannot
    be made here (the run's preflight says why)."""
    chosen = preset(name)
    if chosen.defaults or chosen.family != "gymnasium":
        return {}
    key = json.dumps([chosen.gym_id, chosen.make, dict(chosen.kwargs), chosen.stack],
                     sort_keys=True, default=str)  # fmt: skip
    return _probed(name, key, algorithm)


@functools.lru_cache(maxsize=64)
def _probed(name: str, key: str, algorithm: str) -> dict:
    try:
        env = make_env(name, training=True)
    except Exception:  # any failure is the preflight's to report
        return {}
    try:
        shape = shape_of(env, name)
        limit = env.spec.max_episode_steps if env.spec is not None else None
    except ValueError:
        return {}
    finally:
        env.close()
    if len(shape.observation_shape) != 1:
        return {}
    dqn = algorithm == "dqn" or (algorithm == "auto" and not shape.continuous)
    return vector_defaults(limit, dqn)
