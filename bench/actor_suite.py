"""Actor suite: environment steps per second of one actor's acting loop, by env count.

Times what an actor does per vector step (one batched forward pass of the actor's own
policy, numpy for vector observations and torch for images; ε-greedy, or for Ape-X DPG
the policy's action plus Gaussian noise; the vector env's step; the n-step builder)
without sending, so it is one actor process's ceiling. Pong runs only where ale-py is
installed, HalfCheetah only where mujoco is; otherwise each is reported unavailable.
"""

from __future__ import annotations

from collections.abc import Callable

import gymnasium as gym
import numpy as np
import torch

from apex.envs import env_factories, env_shape
from apex.exploration import epsilon_greedy, gaussian_noise
from apex.nstep import NStepBuilder
from apex.policy import NumpyActorCritic, build_policy
from bench.timing import measure_rate

SUITE = "actor"


def acting_loop(env: str, env_count: int, hidden: tuple[int, ...]) -> Callable[[], None]:
    shape = env_shape(env)
    envs = gym.vector.SyncVectorEnv(
        env_factories(env, env_count, training=True),
        autoreset_mode=gym.vector.AutoresetMode.SAME_STEP,
    )
    rng = np.random.default_rng(0)
    if shape.continuous:  # Ape-X DPG: π(s) plus Gaussian noise, float action vectors
        policy = NumpyActorCritic(shape.observation_shape[0], shape.action_low,
                                  shape.action_high, hidden, seed=0)  # fmt: skip
        action_shape, action_dtype = (len(shape.action_low),), np.dtype(np.float32)

        def explore(observations: np.ndarray) -> np.ndarray:
            return gaussian_noise(policy.actions(observations), 0.1, policy.scale,
                                  policy.offset, rng)  # fmt: skip
    else:
        policy = build_policy(shape.observation_shape, shape.actions, hidden, seed=0)
        action_shape, action_dtype = (), np.dtype(np.int64)

        def explore(observations: np.ndarray) -> np.ndarray:
            greedy = policy.q_values(observations).argmax(axis=1)
            return epsilon_greedy(greedy, 0.1, shape.actions, rng)

    builder = NStepBuilder(env_count, 3, 0.99, shape.observation_shape, shape.observation_dtype,
                           action_shape, action_dtype)  # fmt: skip
    state = {"obs": envs.reset(seed=list(range(env_count)))[0]}

    def step() -> None:
        actions = explore(state["obs"])
        next_obs, rewards, terminated, truncated, info = envs.step(actions)
        final = next_obs
        ended = np.logical_or(terminated, truncated)
        if ended.any():
            final = next_obs.copy()
            for e in np.flatnonzero(ended):
                final[e] = info["final_obs"][e]
        builder.step(state["obs"], actions, rewards, final, terminated, truncated)
        state["obs"] = next_obs

    return step


def run(
    *,
    quick: bool = False,
    repeats: int = 5,
    seconds_per_repeat: float | None = None,
    progress: Callable[[str], None] | None = None,
) -> dict[str, object]:
    torch.set_num_threads(1)  # as an actor process runs
    per_repeat = seconds_per_repeat or (0.05 if quick else 0.5)
    plan = [
        ("CartPole-v1", (1, 8) if quick else (1, 8, 32), (256, 256)),  # the preset's net
        ("Pong", (1,) if quick else (1, 4), ()),
        # Ape-X DPG actors (policy and critic 256x256, as the presets).
        ("Pendulum-v1", (1, 4) if quick else (1, 4, 16), (256, 256)),
        ("HalfCheetah-v5", (1,) if quick else (1, 4), (256, 256)),
    ]
    records = []
    for env, counts, hidden in plan:
        for count in counts:
            case = f"{env}-k{count}"
            if progress:
                progress(f"actor {case}")
            params = {"env": env, "envs_per_actor": count, "torch_threads": 1}
            base = {"suite": SUITE, "case": case, "implementation": "apex", "params": params}
            try:
                step = acting_loop(env, count, hidden or (256,))
            except (ImportError, gym.error.Error) as exc:
                records.append(
                    {**base, "status": "unavailable", "reason": f"{type(exc).__name__}: {exc}"}
                )
                continue
            measurement = measure_rate(
                "env_steps",
                "env steps/s",
                step,
                items_per_call=count,
                repeats=repeats,
                seconds_per_repeat=per_repeat,
                warmup_calls=5,
            )
            records.append({**base, "status": "ok", **measurement.to_record()})
    return {
        "records": records,
        "ratios": [],
        "config": {"quick": quick, "repeats": repeats, "seconds_per_repeat": per_repeat},
    }
