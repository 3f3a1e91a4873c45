"""stable-baselines3 with the rl-zoo hyperparameters, timed to solve: DQN on CartPole-v1,
TD3 on Pendulum-v1.

``python -m bench.sb3_worker '<json>'`` prints one JSON line: wall-clock seconds from this
process's start (imports included) to the evaluation that solved it, or to the step
limit. Solved means a greedy mean return at the target over 20 episodes, evaluated every
2,000 environment steps on 20 copies stepped together (one episode each, as apex
evaluates).

TD3 on Pendulum-v1 is the zoo's (hyperparams/td3.yml): 20K steps, the first 10K random,
Gaussian action noise σ 0.1, one gradient step per env step after each episode, nets
[400, 300]. A seed not solved by then trains on with the same settings.

The zoo trains CartPole-v1 for ``n_timesteps`` 5e4, so its ε schedule (``exploration_fraction``
0.16) is laid over exactly those 50K steps, as here. A seed not solved by then goes on
training with ε held at its final value (``reset_num_timesteps=False``), as the zoo's own run
would have ended with. Laying the schedule over a longer budget (200K once) makes SB3 explore
four times longer and is not the zoo's baseline.
"""

from __future__ import annotations

import time

STARTED = time.monotonic()

import json  # noqa: E402  (the clock starts before any import, as for `apex train`)
import sys  # noqa: E402

# The rl-zoo (rl-baselines3-zoo hyperparams/dqn.yml) settings for CartPole-v1.
RL_ZOO_CARTPOLE = {
    "learning_rate": 2.3e-3,
    "batch_size": 64,
    "buffer_size": 100_000,
    "learning_starts": 1000,
    "gamma": 0.99,
    "target_update_interval": 10,
    "train_freq": 256,
    "gradient_steps": 128,
    "exploration_fraction": 0.16,
    "exploration_final_eps": 0.04,
    "policy_kwargs": {"net_arch": [256, 256]},
}
RL_ZOO_CARTPOLE_STEPS = 50_000
# The rl-zoo (hyperparams/td3.yml) settings for Pendulum-v1; noise_std 0.1 is the action
# noise, built below.
RL_ZOO_PENDULUM_TD3 = {
    "learning_rate": 1e-3,
    "buffer_size": 200_000,
    "learning_starts": 10_000,
    "gamma": 0.98,
    "train_freq": (1, "episode"),
    "gradient_steps": -1,
    "policy_kwargs": {"net_arch": [400, 300]},
}
RL_ZOO_PENDULUM_STEPS = 20_000
# The zoo's MuJoCo defaults in td3.yml (HalfCheetah, Hopper, ...): SB3's TD3 defaults (lr
# 1e-3, 1M buffer, batch 256, one gradient step per env step, nets [400, 300]) with 10K
# random steps first and noise σ 0.1, for 1M steps.
RL_ZOO_MUJOCO_TD3 = {"learning_starts": 10_000}
RL_ZOO_MUJOCO_STEPS = 1_000_000
# env -> (TD3 settings, the zoo's step budget)
TD3_ZOO = {
    "Pendulum-v1": (RL_ZOO_PENDULUM_TD3, RL_ZOO_PENDULUM_STEPS),
    "HalfCheetah-v5": (RL_ZOO_MUJOCO_TD3, RL_ZOO_MUJOCO_STEPS),
    "Hopper-v5": (RL_ZOO_MUJOCO_TD3, RL_ZOO_MUJOCO_STEPS),
}
EVAL_EPISODES = 20


def main() -> None:
    request = json.loads(sys.argv[1])
    import gymnasium as gym
    import numpy as np
    import torch
    from stable_baselines3 import DQN, TD3
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.evaluation import evaluate_policy
    from stable_baselines3.common.noise import NormalActionNoise

    env_id = request.get("env", "CartPole-v1")
    torch.set_num_threads(request.get("torch_threads", 2))
    # 20 copies stepped together, one episode each, as apex evaluates: one env played 20
    # episodes in a row costs the baseline seconds per evaluation once it balances.
    episodes = request.get("eval_episodes", EVAL_EPISODES)
    evaluation_env = make_vec_env(env_id, n_envs=episodes, seed=request["seed"] + 10**6)
    # curve: [seconds since start, env steps, greedy mean] at every evaluation.
    result = {"solved": False, "seconds": None, "steps": None, "last_eval": None, "curve": []}

    class StopWhenSolved(BaseCallback):
        def _on_step(self) -> bool:
            if self.num_timesteps % request["eval_every_steps"]:
                return True
            mean, _ = evaluate_policy(
                self.model, evaluation_env, n_eval_episodes=episodes, deterministic=True
            )
            result["last_eval"] = float(mean)
            result["curve"].append([time.monotonic() - STARTED, self.num_timesteps, float(mean)])
            if mean >= request["target_return"]:
                result.update(
                    solved=True, seconds=time.monotonic() - STARTED, steps=self.num_timesteps
                )
                return False
            return time.monotonic() - STARTED < request["max_seconds"]

    env = gym.make(env_id)
    if env_id in TD3_ZOO:
        settings, zoo_steps = TD3_ZOO[env_id]
        size = env.action_space.shape[0]
        noise = NormalActionNoise(np.zeros(size), 0.1 * np.ones(size))
        model = TD3("MlpPolicy", env, seed=request["seed"], verbose=0, action_noise=noise,
                    **settings)  # fmt: skip
    else:
        model = DQN("MlpPolicy", env, seed=request["seed"], verbose=0, **RL_ZOO_CARTPOLE)
        zoo_steps = RL_ZOO_CARTPOLE_STEPS
    model.learn(total_timesteps=zoo_steps, callback=StopWhenSolved())
    more_steps = request["max_steps"] - model.num_timesteps
    if (
        not result["solved"]
        and more_steps > 0
        and time.monotonic() - STARTED < request["max_seconds"]
    ):
        if isinstance(model, DQN):
            final_eps = RL_ZOO_CARTPOLE["exploration_final_eps"]
            # SB3 recomputes progress over the extended total, which would raise ε again.
            model.exploration_schedule = lambda _progress_remaining: final_eps
        model.learn(
            total_timesteps=more_steps, callback=StopWhenSolved(), reset_num_timesteps=False
        )
    if not result["solved"]:
        result.update(seconds=time.monotonic() - STARTED, steps=model.num_timesteps)
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
