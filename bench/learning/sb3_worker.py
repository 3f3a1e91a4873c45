"""stable-baselines3 with the rl-zoo hyperparameters under the learning benchmark's
protocol (``bench.learning.learn_suite``): DQN on CartPole-v1, Acrobot-v1 and LunarLander-v3, TD3
on Pendulum-v1 and the MuJoCo tasks, PPO (IMPALA's peer, ``"algorithm": "ppo"``) on
CartPole-v1, LunarLander-v3 and MinAtar; DQN on MinAtar too.

``python -m bench.learning.sb3_worker '<json>'`` prints one JSON line. Every ``eval_every_steps``
env steps the greedy policy plays ``eval_episodes`` episodes on copies stepped together
(one episode each); one at the target is confirmed at once on ``confirm_episodes`` more,
on copies seeded apart, and a confirmed solve ends the run unless ``stop_when_solved`` is
false. Evaluation runs inline, as SB3's ``EvalCallback`` does: SB3 has no evaluator of its
own. Every event carries its wall-clock time (``time.time()``), so the benchmark times
both sides from the moment it spawned them, and as a fifth field the training seconds at
its weights: from the start of learning, without the evaluations' time.

For the scaling benchmark's single-node baseline, DQN's request may name ``step_cost``
(``{"cost_s", "cost_kind"}``: every training step and reset costs that, as
``bench.scaling.step_cost`` makes it; evaluations play the env without it), ``env_copies``
(SB3 steps them together, one transition each a step) and ``env_stepping = "processes"``
(each copy in a process of its own, SB3's ``SubprocVecEnv``).

The zoo's schedules are laid over the zoo's own step budget (``n_timesteps``): DQN's ε
decays over ``exploration_fraction`` of it, and a seed not solved by then trains on with ε
held at its final value (``reset_num_timesteps=False``), as the zoo's run would have
ended with. TD3 on Pendulum: 10K random steps first, Gaussian action noise σ 0.1, one
gradient step per env step after each episode, nets [400, 300].
"""

from __future__ import annotations

import time

STARTED_UNIX = time.time()

import json  # noqa: E402  (the clock starts before any import, as for `apex train`)
import sys  # noqa: E402

# rl-baselines3-zoo hyperparams/dqn.yml, "Tuned" entries; LunarLander-v2's for v3.
_ZOO_DQN_SMALL = {
    "learning_rate": 6.3e-4,
    "batch_size": 128,
    "buffer_size": 50_000,
    "learning_starts": 0,
    "gamma": 0.99,
    "target_update_interval": 250,
    "train_freq": 4,
    "gradient_steps": -1,
    "exploration_fraction": 0.12,
    "exploration_final_eps": 0.1,
    "policy_kwargs": {"net_arch": [256, 256]},
}
# env -> (DQN settings, the zoo's n_timesteps)
DQN_ZOO = {
    "CartPole-v1": (
        {
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
        },
        50_000,
    ),
    "Acrobot-v1": (_ZOO_DQN_SMALL, 100_000),
    "LunarLander-v3": (_ZOO_DQN_SMALL, 100_000),
}
# The rl-zoo has no MinAtar entry: the MinAtar paper's DQN (Young & Tian 2019) with its
# network (``minatar_torso``): 100K replay, batch 32, 5K steps first, an update per step,
# a target copy every 1,000, ε from 1 to 0.1 over the first 100K of its 5M frames. Its
# optimizer was RMSprop at 2.5e-4; SB3's DQN takes Adam at the same rate.
MINATAR_DQN = (
    {
        "learning_rate": 2.5e-4,
        "batch_size": 32,
        "buffer_size": 100_000,
        "learning_starts": 5_000,
        "gamma": 0.99,
        "target_update_interval": 1_000,
        "train_freq": 1,
        "gradient_steps": 1,
        "exploration_fraction": 0.02,
        "exploration_final_eps": 0.1,
    },
    5_000_000,
)
# rl-baselines3-zoo hyperparams/td3.yml. Pendulum's own entry; the MuJoCo tasks take
# SB3's TD3 defaults (lr 1e-3, 1M buffer, batch 256, one gradient step per env step, nets
# [400, 300]) with 10K random steps first, for 1M steps. Noise σ 0.1 is built below.
_ZOO_MUJOCO_TD3 = ({"learning_starts": 10_000}, 1_000_000)
TD3_ZOO = {
    "Pendulum-v1": (
        {
            "learning_rate": 1e-3,
            "buffer_size": 200_000,
            "learning_starts": 10_000,
            "gamma": 0.98,
            "train_freq": (1, "episode"),
            "gradient_steps": -1,
            "policy_kwargs": {"net_arch": [400, 300]},
        },
        20_000,
    ),
    "HalfCheetah-v5": _ZOO_MUJOCO_TD3,
    "Hopper-v5": _ZOO_MUJOCO_TD3,
}


def _linear(start: float):
    """The zoo's ``lin_X``: X scaled by the progress remaining (1 to 0)."""
    return lambda progress_remaining: progress_remaining * start


# rl-baselines3-zoo hyperparams/ppo.yml: CartPole-v1's tuned entry, LunarLander-v2's for
# v3; MinAtar has no entry, so its Atari one (8 copies, 128 steps, 4 epochs of 256, Adam
# and clip range decaying linearly from 2.5e-4 and 0.1) with the MinAtar paper's network
# (``minatar_torso``) below both heads. env -> (PPO settings, env copies, the zoo's
# n_timesteps)
PPO_ATARI = {
    "n_steps": 128,
    "batch_size": 256,
    "n_epochs": 4,
    "vf_coef": 0.5,
    "ent_coef": 0.01,
    "learning_rate": _linear(2.5e-4),
    "clip_range": _linear(0.1),
}
PPO_ZOO = {
    "CartPole-v1": (
        {
            "n_steps": 32,
            "batch_size": 256,
            "gae_lambda": 0.8,
            "gamma": 0.98,
            "n_epochs": 20,
            "ent_coef": 0.0,
            "learning_rate": _linear(1e-3),
            "clip_range": _linear(0.2),
        },
        8,
        100_000,
    ),
    "LunarLander-v3": (
        {
            "n_steps": 1024,
            "batch_size": 64,
            "gae_lambda": 0.98,
            "gamma": 0.999,
            "n_epochs": 4,
            "ent_coef": 0.01,
        },
        16,
        1_000_000,
    ),
    **{
        env: (PPO_ATARI, 8, 10_000_000)
        for env in ("MinAtar/Breakout-v1", "MinAtar/SpaceInvaders-v1")
    },
}
# sb3-contrib's RecurrentPPO for the partially observed tasks: the zoo has no POPGym
# entry, so its defaults (an LSTM of 256 cells before both heads, 128 steps a rollout,
# 10 epochs of 128), on 8 env copies. (settings, env copies)
RECURRENT_PPO = ({}, 8)
# Evaluation copies are seeded apart from training's, confirmations apart from both.
EVAL_SEED_OFFSET = 10**6
CONFIRM_SEED_OFFSET = 2 * 10**6


def without_log_folder(model) -> None:
    """Gives ``model`` a logger that writes nothing: SB3's default makes a folder in /tmp
    for every model that learns, even with nothing to log."""
    from stable_baselines3.common.logger import Logger

    model.set_logger(Logger(folder=None, output_formats=[]))


def gradient_steps(model) -> int:
    """The gradient steps ``model`` has taken. SB3 counts them in ``_n_updates`` for DQN
    and TD3, but PPO adds its epochs there (``n_epochs`` a rollout), each of which takes
    a gradient step per minibatch: 256 on LunarLander (16 copies x 1,024 steps in 64s);
    sb3-contrib's RecurrentPPO counts as PPO does."""
    from stable_baselines3.common.on_policy_algorithm import OnPolicyAlgorithm

    if not isinstance(model, OnPolicyAlgorithm):
        return int(model._n_updates)
    rollout = model.n_steps * model.n_envs
    return int(model._n_updates) * -(-rollout // model.batch_size)


def minatar_torso():
    """The MinAtar paper's network below SB3's heads (DQN's Q head, PPO's policy and
    value heads): a 3x3 convolution of 16 channels and 128 units, over (10, 10, C)
    planes; with ``net_arch=[]`` each head is one linear layer, as in the paper."""
    from stable_baselines3.common.torch_layers import BaseFeaturesExtractor
    from torch import nn

    class MinAtarTorso(BaseFeaturesExtractor):
        def __init__(self, space) -> None:
            super().__init__(space, features_dim=128)
            self.net = nn.Sequential(
                nn.Conv2d(space.shape[2], 16, kernel_size=3),
                nn.ReLU(),
                nn.Flatten(),
                nn.Linear(16 * 8 * 8, 128),
                nn.ReLU(),
            )

        def forward(self, observations):
            return self.net(observations.float().permute(0, 3, 1, 2))

    return {"features_extractor_class": MinAtarTorso, "net_arch": []}


def env_source(env_id: str, env_kwargs: dict, step_cost: dict | None = None):
    """What SB3's ``make_vec_env`` makes the env from: its id, or a function that makes it
    with ``env_kwargs`` (MinAtar's through apex, which registers the games, makes their
    planes uint8 and takes ``hidden_planes``, as apex's side gets them); with
    ``step_cost`` (``{"cost_s", "cost_kind"}``), every step and reset costs that
    (``bench.scaling.step_cost``), made by a function a subprocess can unpickle."""
    if step_cost:
        import functools

        from bench.scaling.step_cost import make

        return functools.partial(
            make, env_id, step_cost["cost_s"], step_cost["cost_kind"], **env_kwargs
        )
    if env_id.startswith("MinAtar/"):
        import dataclasses

        from apex.envs.families import make_env
        from apex.envs.presets import preset, register

        register(dataclasses.replace(preset(env_id), kwargs=dict(env_kwargs)))
        return lambda: make_env(env_id, training=True)
    if env_kwargs:
        import gymnasium as gym

        return lambda: gym.make(env_id, **env_kwargs)
    return env_id


def main() -> None:
    request = json.loads(sys.argv[1])
    import numpy as np
    import torch
    from stable_baselines3 import DQN, PPO, TD3
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.evaluation import evaluate_policy
    from stable_baselines3.common.noise import NormalActionNoise

    env_id, seed = request["env"], request["seed"]
    source = env_source(env_id, request.get("env_kwargs") or {}, request.get("step_cost"))
    # A step cost is latency that changes no episode: evaluations play the env without it,
    # and their time is left out of the training seconds below either way.
    eval_source = env_source(env_id, request.get("env_kwargs") or {})
    minatar = env_id.startswith("MinAtar/")
    copies = request.get("env_copies", 1)
    vec_options = {}
    if request.get("env_stepping") == "processes":
        from stable_baselines3.common.vec_env import SubprocVecEnv

        vec_options = {
            "vec_env_cls": SubprocVecEnv,
            "vec_env_kwargs": {"start_method": "forkserver"},
        }

    torch.set_num_threads(request.get("torch_threads", 2))
    deadline = STARTED_UNIX + request["max_seconds"]
    target = request.get("target_return")
    every = request["eval_every_steps"]
    periodic_env = make_vec_env(
        eval_source, n_envs=request["eval_episodes"], seed=seed + EVAL_SEED_OFFSET
    )
    confirm_env = None
    # [unix time, env steps, gradient steps, greedy mean] per evaluation.
    result = {"started_unix": STARTED_UNIX, "evaluations": [], "confirmations": [], "solved": False}

    # Seconds spent evaluating so far: an event's fifth field is the training seconds at
    # its weights, the clock from the start of learning without its evaluations.
    evaluating = {"s": 0.0}

    def greedy_mean(model, env) -> float:
        started = time.time()
        mean, _ = evaluate_policy(model, env, n_eval_episodes=env.num_envs, deterministic=True)
        evaluating["s"] += time.time() - started
        return float(mean)

    def training_s(at: float) -> float | None:
        if "learn_started_unix" not in result:
            return None
        return at - result["learn_started_unix"] - evaluating["s"]

    next_evaluation = every

    class Protocol(BaseCallback):
        def _on_step(self) -> bool:
            # With several env copies (PPO) a step adds their count: the first step at or
            # past each multiple of ``every`` evaluates, as apex's evaluator does.
            nonlocal confirm_env, next_evaluation
            if time.time() >= deadline:
                return False
            if self.num_timesteps < next_evaluation:
                return True
            next_evaluation += every * ((self.num_timesteps - next_evaluation) // every + 1)
            steps, updates = self.num_timesteps, gradient_steps(self.model)
            trained = training_s(time.time())
            mean = greedy_mean(self.model, periodic_env)
            result["evaluations"].append([time.time(), steps, updates, mean, trained])
            if target is None or mean < target or not request["confirm_episodes"]:
                return True
            if confirm_env is None:
                confirm_env = make_vec_env(
                    eval_source, n_envs=request["confirm_episodes"], seed=seed + CONFIRM_SEED_OFFSET
                )
            confirmed = greedy_mean(self.model, confirm_env)
            result["confirmations"].append([time.time(), steps, updates, confirmed, trained])
            if confirmed >= target and not result["solved"]:
                result["solved"] = True
                return not request.get("stop_when_solved", True)
            return True

    extra = {"policy_kwargs": minatar_torso()} if minatar else {}
    if request.get("algorithm") == "recurrent-ppo":
        from sb3_contrib import RecurrentPPO  # the bench extra

        settings, copies = RECURRENT_PPO
        zoo_steps = request["max_steps"]
        model = RecurrentPPO(
            "MlpLstmPolicy",
            make_vec_env(source, n_envs=copies, seed=seed),
            seed=seed,
            verbose=0,
            **settings,
        )
    elif request.get("algorithm") == "ppo":
        settings, copies, zoo_steps = PPO_ZOO[env_id]
        model = PPO(
            "MlpPolicy",
            make_vec_env(source, n_envs=copies, seed=seed),
            seed=seed,
            verbose=0,
            **settings,
            **extra,
        )
    elif env_id in TD3_ZOO:
        settings, zoo_steps = TD3_ZOO[env_id]
        env = make_vec_env(source, n_envs=1, seed=seed)
        size = env.action_space.shape[0]
        noise = NormalActionNoise(np.zeros(size), 0.1 * np.ones(size))
        model = TD3("MlpPolicy", env, seed=seed, verbose=0, action_noise=noise, **settings)
    else:
        settings, zoo_steps = MINATAR_DQN if minatar else DQN_ZOO[env_id]
        env = make_vec_env(source, n_envs=copies, seed=seed, **vec_options)
        model = DQN("MlpPolicy", env, seed=seed, verbose=0, **settings, **extra)
    without_log_folder(model)
    callback = Protocol()
    result["learn_started_unix"] = time.time()
    model.learn(total_timesteps=zoo_steps, callback=callback)
    more_steps = request["max_steps"] - model.num_timesteps
    finished = result["solved"] and request.get("stop_when_solved", True)
    if not finished and more_steps > 0 and time.time() < deadline:
        if isinstance(model, DQN):
            final_eps = settings["exploration_final_eps"]
            # SB3 recomputes progress over the extended total, which would raise ε again.
            model.exploration_schedule = lambda _progress_remaining: final_eps
        model.learn(total_timesteps=more_steps, callback=callback, reset_num_timesteps=False)
    result.update(
        ended_unix=time.time(), env_steps=model.num_timesteps, updates=gradient_steps(model)
    )
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
