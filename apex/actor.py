"""The Ape-X actor: k environments, one batched forward pass per step, n-step transitions
with priorities computed from the actor's own Q-values, pushed to the replay shards.

Per step: ``Q(s_t)`` for all k envs in one forward pass; ε-greedy with this actor's fixed
``ε_i``; the vector env steps (SAME_STEP autoreset); the n-step builder emits finished
transitions. Once ``insert_batch`` transitions are ready they get initial priorities

    p = |R + d · max_a Q(s', a) − Q(s, a)| + priority_epsilon

from the actor's copy of the network (Ape-X computes them actor-side so that the learner
never sees unprioritized data), and go to a shard stamped with the policy version the actor
acted with. Every ``weight_refresh_steps`` vector steps the actor loads the newest weights
that the learner published.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass

import gymnasium as gym
import numpy as np
import torch
import zmq

from apex.channels import EpisodeReporter, WeightSubscriber
from apex.envs import env_factories, env_shape
from apex.exploration import actor_epsilon, epsilon_greedy
from apex.networks import build_network
from apex.nstep import NStepBuilder
from replay.client import InsertClient, ReplayTimeout, ShardEndpoints

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ActorConfig:
    """Settings of one actor process.

    Attributes:
        env: environment preset or gymnasium id.
        actor_index: this actor's index ``i`` (sets its ε and seed).
        actor_count: actors in the run ``N``.
        envs_per_actor: environments stepped together ``k``.
        n_step: steps per transition.
        gamma: discount.
        epsilon: Ape-X base ε.
        epsilon_alpha: Ape-X α of the per-actor ε.
        insert_batch: transitions per insert message.
        weight_refresh_steps: vector steps between weight refreshes.
        hidden: MLP widths (must match the learner's).
        priority_epsilon: added to |TD| so no transition starts with priority 0.
        seed: the run's root seed; this actor uses ``seed + 1000 · (actor_index + 1)``.
        torch_threads: intra-op threads of this process's forward passes.
        max_steps: stop after this many vector steps (None: until stopped).
        insert_timeout_s: how long one insert attempt waits for a shard with room before
            the actor checks its stop flag and tries again.
        shard_start_timeout_s: how long the actor waits at start for every shard to answer
            (roles of a Slurm job all start at once).
    """

    env: str = "CartPole-v1"
    actor_index: int = 0
    actor_count: int = 1
    envs_per_actor: int = 8
    n_step: int = 3
    gamma: float = 0.99
    epsilon: float = 0.4
    epsilon_alpha: float = 7.0
    insert_batch: int = 50
    weight_refresh_steps: int = 400
    hidden: tuple[int, ...] = (256, 256)
    priority_epsilon: float = 1e-3
    seed: int = 0
    torch_threads: int = 1
    max_steps: int | None = None
    insert_timeout_s: float = 1.0
    shard_start_timeout_s: float = 300.0

    @property
    def actor_seed(self) -> int:
        return self.seed + 1000 * (self.actor_index + 1)


@dataclass(frozen=True)
class ActorEndpoints:
    shards: tuple[ShardEndpoints, ...]
    weights: str
    episodes: str


class Actor:
    """One actor; construct it in the process that runs it, then call :meth:`run`."""

    def __init__(self, config: ActorConfig, endpoints: ActorEndpoints) -> None:
        torch.set_num_threads(config.torch_threads)
        self.config = config
        shape = env_shape(config.env)
        self._shape = shape
        self._spec = shape.transition_spec()
        torch.manual_seed(config.actor_seed)
        self._network = build_network(shape.observation_shape, shape.actions, config.hidden)
        self._network.eval()
        self._epsilon = actor_epsilon(
            config.actor_index, config.actor_count, config.epsilon, config.epsilon_alpha
        )
        self._rng = np.random.default_rng(config.actor_seed)
        self._context = zmq.Context()
        self._weights = WeightSubscriber(self._context, endpoints.weights)
        self._episodes = EpisodeReporter(self._context, endpoints.episodes, config.actor_index)
        self._inserts = InsertClient(
            self._context,
            endpoints.shards,
            sender=config.actor_index,
            spec=self._spec,
            timeout_s=config.insert_timeout_s,
            start_timeout_s=config.shard_start_timeout_s,
            batch_hint=config.insert_batch,
        )
        self._builder = NStepBuilder(
            config.envs_per_actor,
            config.n_step,
            config.gamma,
            shape.observation_shape,
            shape.observation_dtype,
        )
        self._envs = gym.vector.SyncVectorEnv(
            env_factories(config.env, config.envs_per_actor, training=True),
            autoreset_mode=gym.vector.AutoresetMode.SAME_STEP,
        )
        self._stop = threading.Event()
        self.steps = 0
        self.transitions_sent = 0
        self.episodes_finished = 0
        self.insert_waits = 0

    def stop(self) -> None:
        """Asks :meth:`run` to return after its current step (safe from a signal handler)."""
        self._stop.set()

    def run(self) -> None:
        config = self.config
        logger.info(
            "actor %d: ε = %.4g, %d × %s",
            config.actor_index,
            self._epsilon,
            config.envs_per_actor,
            config.env,
        )
        seeds = [config.actor_seed + e for e in range(config.envs_per_actor)]
        observations, _ = self._envs.reset(seed=seeds)
        pending: list[dict[str, np.ndarray]] = []
        pending_count = 0
        episode_returns = np.zeros(config.envs_per_actor)
        episode_lengths = np.zeros(config.envs_per_actor, dtype=np.int64)
        started = time.monotonic()
        try:
            self._weights.poll(self._network, timeout_ms=0)
            while not self._stop.is_set():
                if config.max_steps is not None and self.steps >= config.max_steps:
                    break
                if self.steps % config.weight_refresh_steps == 0:
                    self._weights.poll(self._network)
                with torch.no_grad():
                    greedy = self._network(torch.from_numpy(observations)).argmax(dim=1).numpy()
                actions = epsilon_greedy(greedy, self._epsilon, self._shape.actions, self._rng)
                next_observations, rewards, terminated, truncated, info = self._envs.step(actions)
                ended = np.logical_or(terminated, truncated)
                transition_next = next_observations
                if ended.any():
                    transition_next = next_observations.copy()
                    for env in np.flatnonzero(ended):
                        transition_next[env] = info["final_obs"][env]
                out = self._builder.step(
                    observations, actions, rewards, transition_next, terminated, truncated
                )
                if len(out["action"]):
                    pending.append(out)
                    pending_count += len(out["action"])
                    if pending_count >= config.insert_batch:
                        self._send(pending)
                        pending, pending_count = [], 0
                episode_returns += rewards
                episode_lengths += 1
                if ended.any():
                    finished = np.flatnonzero(ended)
                    self._episodes.report(
                        episode_returns[finished].tolist(),
                        episode_lengths[finished].tolist(),
                        self._weights.version,
                        self.transitions_sent,
                    )
                    self.episodes_finished += finished.size
                    episode_returns[finished] = 0.0
                    episode_lengths[finished] = 0
                elif self._episodes.heartbeat_due():
                    self._episodes.report([], [], self._weights.version, self.transitions_sent)
                observations = next_observations
                self.steps += 1
        finally:
            elapsed = max(time.monotonic() - started, 1e-9)
            logger.info(
                "actor %d stopping: %d vector steps (%.0f env steps/s), %d transitions, "
                "%d episodes, policy version %d",
                config.actor_index,
                self.steps,
                self.steps * config.envs_per_actor / elapsed,
                self.transitions_sent,
                self.episodes_finished,
                self._weights.version,
            )
            self.close()

    def _send(self, parts: list[dict[str, np.ndarray]]) -> None:
        batch = {name: np.concatenate([part[name] for part in parts]) for name in parts[0]}
        with torch.no_grad():
            q = self._network(torch.from_numpy(batch["obs"]))
            q_next = self._network(torch.from_numpy(batch["next_obs"])).max(dim=1).values
        taken = q.gather(1, torch.from_numpy(batch["action"]).unsqueeze(1)).squeeze(1)
        targets = torch.from_numpy(batch["reward"]) + torch.from_numpy(batch["discount"]) * q_next
        priorities = (targets - taken).abs().double().numpy() + self.config.priority_epsilon
        # Shards push back (rate limiter, full queues): wait, but keep seeing the stop flag.
        while not self._stop.is_set():
            try:
                self._inserts.insert(batch, priorities, policy_version=self._weights.version)
            except ReplayTimeout:
                self.insert_waits += 1
                if self.insert_waits == 1:
                    logger.info(
                        "actor %d: shards are not taking data yet; waiting", self.config.actor_index
                    )
                continue
            self.transitions_sent += len(priorities)
            return

    def close(self) -> None:
        self._envs.close()
        # The last word: how many transitions this actor handed over in all.
        self._episodes.report([], [], self._weights.version, self.transitions_sent)
        self._inserts.close(linger_s=1.0)
        self._episodes.close()
        self._weights.close()
        self._context.term()
