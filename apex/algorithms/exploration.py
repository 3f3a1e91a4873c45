"""Ape-X exploration: each actor acts ε-greedily with its own fixed ε (discrete actions), or
with Gaussian noise of its own fixed scale σ (continuous actions, DPG).

``ε_i = ε^(1 + α·i/(N−1))`` for actor ``i`` of ``N`` (Horgan et al. 2018, with ε = 0.4 and
α = 7), so actors span a range from mostly random (ε) to nearly greedy (ε^(1+α)). A single
actor gets ``ε``.
"""

from __future__ import annotations

import numpy as np


def actor_epsilon(
    actor_index: int, actor_count: int, base: float = 0.4, alpha: float = 7.0
) -> float:
    """ε of actor ``actor_index`` among ``actor_count``.

    Raises:
        ValueError: an index outside ``[0, actor_count)`` or ``base`` outside ``[0, 1]``.
    """
    if not 0 <= actor_index < actor_count:
        raise ValueError(f"actor index {actor_index} is outside [0, {actor_count})")
    if not 0.0 <= base <= 1.0:
        raise ValueError(f"base epsilon must be in [0, 1], got {base}")
    if actor_count == 1:
        return base
    return base ** (1.0 + alpha * actor_index / (actor_count - 1))


def env_epsilons(
    actor_index: int, actor_count: int, envs_per_actor: int, base: float = 0.4, alpha: float = 7.0
) -> np.ndarray:
    """ε of each env copy of actor process ``actor_index`` among ``actor_count``.

    An Ape-X actor is one environment with its own ε_i, i over all N actors of the run. A
    process here steps ``envs_per_actor`` copies, so the run has N = ``actor_count`` ·
    ``envs_per_actor`` Ape-X actors: copy j of process p is actor j · ``actor_count`` + p.
    Interleaved rather than in blocks, so that every process spans the whole range of ε:
    a dead process, or a run of one process, still explores and exploits.
    """
    total = actor_count * envs_per_actor
    return np.array(
        [
            actor_epsilon(j * actor_count + actor_index, total, base, alpha)
            for j in range(envs_per_actor)
        ]
    )


def epsilon_greedy(
    greedy_actions: np.ndarray,
    epsilon: float | np.ndarray,
    action_count: int,
    rng: np.random.Generator,
) -> np.ndarray:
    """Replaces each greedy action by a uniform random one with probability ``epsilon``
    (one for all, or one per row)."""
    explore = rng.random(greedy_actions.shape[0]) < epsilon
    random_actions = rng.integers(0, action_count, greedy_actions.shape[0])
    return np.where(explore, random_actions, greedy_actions)


def gaussian_noise(
    actions: np.ndarray,
    scale: float | np.ndarray,
    half_range: np.ndarray,
    centre: np.ndarray,
    rng: np.random.Generator,
) -> np.ndarray:
    """``actions`` plus N(0, σ²) noise per element, σ = ``scale`` (one for all, or one per
    row) times half the action range, clipped to the bounds ``centre ± half_range``."""
    sigma = np.asarray(scale, dtype=np.float32).reshape(-1, 1) * half_range
    noisy = actions + rng.standard_normal(actions.shape, dtype=np.float32) * sigma
    return np.clip(noisy, centre - half_range, centre + half_range).astype(np.float32)


def run_actors(resolved_config: dict) -> dict[str, int]:
    """A run's actor processes and its Ape-X actors (env copies), from its resolved config
    (what the start record, the summary and ``apex slurm status`` show)."""
    processes = resolved_config.get("actors", 0)
    envs = resolved_config.get("actor", {}).get("envs_per_actor", 0)
    return {"actor_processes": processes, "ape_x_actors": processes * envs}
