"""Vector environments, one factory per family: what actors and evaluators step.

ALE games run in ale-py's C++ ``AtariVectorEnv``: a pool of emulators stepped on threads
of its own, with the DQN preprocessing built in (frame skip 4 with the last two frames
max-pooled, 84×84 grayscale, up to 30 no-op starts, 4 stacked frames, rewards clipped to
their sign while training). Every other env is a vector env of
``apex.envs.families.make_env`` copies stepped as ``actor.env_stepping`` says
(``apex.envs.stepping``: one after another by default; CartPole's numpy implementation for
a serial evaluation, which steps 20 copies in a third of the time).

The two Atari paths give the same stacks and rewards for the same seeds and actions
(``tests/test_vector_envs.py``) with two differences:

* **Stack padding.** ``AtariVectorEnv`` pads an episode's first stacks with black frames;
  gymnasium's ``FrameStackObservation`` and the replay's frame storage
  (``replay.frames.storage``) repeat the episode's first frame. :class:`AtariStacks`
  repeats it too, so an actor acts on exactly the stacks the learner later trains on.
* **No-op starts.** Each path draws its number of no-ops from a generator of its own, so
  the same seed starts an episode after different no-ops. Both draw uniformly from 0-30,
  which is what the starts are for (states the agent did not choose); learning sees the
  same distribution.
"""

from __future__ import annotations

import re

import gymnasium as gym
import numpy as np

from apex.envs.families import ATARI_MAX_FRAMES, NOOP_MAX, env_factories, preset, registered_spec
from apex.envs.stepping import EnvStepping, vector_env


def actor_envs(
    name: str, count: int, *, threads: int = 1, stepping: EnvStepping = "serial"
) -> gym.vector.VectorEnv:
    """``count`` training copies of ``name`` stepping in lock-step, autoresetting in the
    same step (the final observation in ``info["final_obs"]``), rewards as trained on.

    ``threads``: the emulator threads of an ALE game's vector env; ``stepping``: how any
    other env's copies step (``apex.envs.stepping``)."""
    if preset(name).atari:
        return AtariStacks(name, count, training=True, threads=threads)
    return vector_env(
        env_factories(name, count, training=True), stepping, gym.vector.AutoresetMode.SAME_STEP
    )


def evaluation_envs(
    name: str, count: int, stepping: EnvStepping = "serial"
) -> gym.vector.VectorEnv:
    """``count`` copies of ``name`` side by side with unclipped rewards, seeded by
    ``reset(seed=...)``; copy ``i`` seeded ``seed + i`` (CartPole's numpy version draws
    every copy's start from one generator seeded ``seed``). Evaluation plays one episode
    per copy, so how a copy resets after it is of no matter. ``stepping``: as the actors'
    (``apex.envs.stepping``), so an evaluation of a slow env keeps its cadence."""
    chosen = preset(name)
    if chosen.atari:
        return AtariStacks(name, count, training=False, threads=1)
    # gymnasium's own vector version, where it has one for the env as made here.
    plain = not (chosen.minatar or chosen.kwargs or chosen.make or chosen.stack != 1)
    if (
        stepping == "serial"
        and plain
        and registered_spec(chosen.gym_id).vector_entry_point is not None
    ):
        return gym.make_vec(chosen.gym_id, num_envs=count, vectorization_mode="vector_entry_point")
    return vector_env(env_factories(name, count, training=False), stepping)


def rom_name(gym_id: str) -> str:
    """ale-py's ROM name for a gymnasium ALE id: ``ALE/SpaceInvaders-v5`` →
    ``space_invaders``, as ale-py registers it (``ALE/TicTacToe3D-v5`` →
    ``tic_tac_toe_3d``); from the id's own words where ale-py does not have it."""
    import ale_py  # the atari extra

    gym.register_envs(ale_py)
    if gym_id in gym.registry:
        game = gym.spec(gym_id).kwargs.get("game")
        if isinstance(game, str):
            return game
    game = gym_id.removeprefix("ALE/").split("-")[0]
    return re.sub(r"(?<!^)(?=[A-Z])", "_", game).lower()


class AtariStacks(gym.vector.VectorWrapper):
    """An ALE game's ``AtariVectorEnv`` (SAME_STEP autoreset) whose stacks at an episode's
    start repeat its first frame instead of black ones (see the module's notes).

    Args:
        name: an Atari preset.
        count: emulators.
        training: clip rewards to their sign (evaluation plays the game's own).
        threads: emulator threads.
        noop_max, max_frames: as ``apex.envs.families.make_atari``'s (tests shorten them).
    """

    def __init__(
        self,
        name: str,
        count: int,
        *,
        training: bool,
        threads: int,
        noop_max: int = NOOP_MAX,
        max_frames: int = ATARI_MAX_FRAMES,
    ) -> None:
        from ale_py.vector_env import AtariVectorEnv  # the atari extra

        env = AtariVectorEnv(
            rom_name(preset(name).gym_id),
            count,
            num_threads=threads,
            autoreset_mode=gym.vector.AutoresetMode.SAME_STEP,
            max_num_frames_per_episode=max_frames,
            repeat_action_probability=0.0,
            noop_max=noop_max,
            frameskip=4,
            stack_num=4,
            reward_clipping=training,
            use_fire_reset=False,  # as gymnasium's AtariPreprocessing
        )
        super().__init__(env)
        self._stack = env.single_observation_space.shape[0]
        # Steps since each copy's episode began: its stack holds this many frames more
        # than the first one (all of them from `stack - 1` on).
        self._ages = np.zeros(count, dtype=np.int64)

    def reset(self, *, seed=None, options=None):
        if isinstance(seed, (list, tuple)):
            seed = np.asarray(seed, dtype=np.int64)
        observations, info = self.env.reset(seed=seed, options=options)
        mask = None if options is None else options.get("reset_mask")
        if mask is None:
            self._ages[:] = 0
        else:
            self._ages[mask] = 0
        self._pad(observations, self._ages)
        return observations, info

    def step(self, actions: np.ndarray):
        self.send(actions)
        return self.recv()

    def send(self, actions: np.ndarray) -> None:
        """Starts a step on the emulator threads and returns at once: the caller's thread
        is free until :meth:`recv` (``apex.acting.env_group`` overlaps two groups this way)."""
        self.env.send(np.asarray(actions, dtype=np.int64))

    def recv(self):
        """The step :meth:`send` started, once the emulators have played it."""
        observations, rewards, terminated, truncated, info = self.env.recv()
        self._ages += 1
        ended = np.logical_or(terminated, truncated)
        if ended.any():
            self._pad(info["final_obs"], np.where(ended, self._ages, self._stack))
            self._ages[ended] = 0
        self._pad(observations, self._ages)
        return observations, rewards, terminated, truncated, info

    def _pad(self, stacks: np.ndarray, ages: np.ndarray) -> None:
        for env in np.flatnonzero(ages < self._stack - 1):
            first = self._stack - 1 - ages[env]
            stacks[env, :first] = stacks[env, first]
