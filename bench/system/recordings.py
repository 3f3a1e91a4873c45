"""Transitions of real episodes, recorded once and replayed by synthetic actors (the
fleet, the cost model's unit costs): saved with ``numpy.savez`` and read back without
pickle."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from apex.envs.families import env_shape, make_env


def record(env_name: str, count: int, path: Path) -> Path:
    """``count`` transitions of real episodes of ``env_name`` under random actions."""
    spec = env_shape(env_name).transition_spec().to_dict()
    arrays = {name: np.empty((count, *shape), dtype) for name, (shape, dtype) in spec.items()}
    env = make_env(env_name, training=True)
    observation, _ = env.reset(seed=0)
    for i in range(count):
        action = env.action_space.sample()
        following, reward, terminated, truncated, _ = env.step(action)
        arrays["obs"][i], arrays["action"][i], arrays["reward"][i] = observation, action, reward
        arrays["discount"][i], arrays["next_obs"][i] = 0.0 if terminated else 0.99, following
        observation = env.reset()[0] if terminated or truncated else following
    env.close()
    np.savez(path, **arrays)
    return path
