"""Actor suite: env steps per second of one actor's loop, by env count, and for Pong where
its time goes, before and after the C++ vector env, the reuse of acting values and int8.

The loop is an actor's own per step (``apex.acting.experience.ExperienceMaker`` as
``apex.acting.actor`` runs it): a batched forward pass and exploration, the vector env's step,
the n-step builder, per ``insert_batch`` transitions their initial priorities and, for
Pong, the frame writer's message (frames LZ4-compressed, as for compressing frame
shards), and every ``weight_refresh_steps`` of the env's preset a load of new weights
(the int8 network quantizes them again); everything but the sockets. Pong is timed on
CPU seconds of the whole process (its emulator threads included), so its figures are env
steps per second *per core*:

* ``before``: gymnasium's ``SyncVectorEnv`` of ``AtariPreprocessing`` and
  ``FrameStackObservation`` envs, the float Nature CNN, and priorities from two more
  forward passes per transition, as actors ran until issue 30;
* ``ale``: ale-py's ``AtariVectorEnv`` (one emulator thread), priorities from the values
  the actor acted on; ``ale-int8``: the same with the int8 network;
  ``ale-int8-halves``: that loop with the envs in two groups taking turns
  (``apex.acting.env_group``: one group's emulators play while the actor finishes and acts on
  the other's), per core and per process (wall time).

And the parts alone: the env step with random actions (``env-gym``, ``env-ale``) and the
forward pass (``forward-float32``, ``forward-int8``) at the env count's batch; and the
emulator with the int8 forward pass, greedy, in lock-step (``play-sync``) and in ale-py's
async batch mode (``play-async``), per core and per process (wall time). Pong runs
only where ale-py is installed, HalfCheetah only where mujoco is; otherwise each is
reported unavailable.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

import gymnasium as gym
import numpy as np
import torch

from apex.acting.env_group import make_groups
from apex.acting.frame_writer import FrameWriter
from apex.algorithms.dqn.builder import DQNBuilder
from apex.algorithms.nstep_experience import NStepExperience
from apex.algorithms.registry import build_acting, default_sections
from apex.envs.families import env_factories, env_shape, preset
from apex.envs.vector import actor_envs, rom_name
from apex.settings import ActorConfig
from bench.timing import measure_rate

SUITE = "actor"
INSERT_BATCH = 50


class _SendTimePriorities(DQNBuilder):
    """DQN as actors had it before issue 30: priorities from forward passes over each sent
    transition, not from the values the policy acted on."""

    def build_experience(self, actor, settings, shape, policy, version, frame_refs):
        return NStepExperience(actor, shape, policy, frame_refs)


def _gymnasium_envs(env: str, count: int) -> gym.vector.VectorEnv:
    """The wrapper path actors took for ALE games until issue 30."""
    return gym.vector.SyncVectorEnv(
        env_factories(env, count, training=True),
        autoreset_mode=gym.vector.AutoresetMode.SAME_STEP,
    )


def acting_loop(env: str, count: int, hidden: tuple[int, ...], variant: str = "ale"):
    """One actor step of ``count`` envs of ``env`` (``variant``: before, ale, ale-int8, or
    ale-int8-halves: two env groups taking turns, ``apex.acting.env_group``), as the actor's loop
    takes it."""
    shape = env_shape(env)
    precision = "int8" if "int8" in variant else "float32"
    groups = 2 if variant.endswith("-halves") else 1
    config = ActorConfig(
        env=env,
        envs_per_actor=count,
        hidden=hidden,
        acting_precision=precision,
        insert_batch=INSERT_BATCH,
        env_groups=groups,
    )
    acting = build_acting(config, default_sections(), shape)
    policy = acting.policy
    weights = policy.network.arrays()  # what each refresh loads again
    make_envs = None
    if variant == "before":
        acting = dataclasses.replace(acting, builder=_SendTimePriorities())
        make_envs = _gymnasium_envs
    frames = None
    if len(shape.observation_shape) == 3 and shape.observation_shape[1:] == (84, 84):
        frames = FrameWriter(
            count,
            shape.observation_shape[0],
            config.n_step,
            history=INSERT_BATCH + 8,
            compress=True,
            rng=np.random.default_rng(0),
        )
    state = {"pending": [], "version": 0, "steps": 0}
    envs = make_groups(
        config, shape, acting, frames, lambda: state["version"], np.full(count, 0.1), envs=make_envs
    )
    refresh = (
        preset(env)
        .defaults.get("actor", {})
        .get("weight_refresh_steps", config.weight_refresh_steps)
    )
    rng = np.random.default_rng(0)
    for group in envs:
        group.begin(0)
        group.act(rng)

    def step() -> None:
        state["steps"] += 1
        if state["steps"] % refresh == 0:  # what the learner published: here, the same
            policy.load(weights)
            state["version"] += 1
        for group in envs:
            done = group.finish()
            if done.experience is not None:
                state["pending"].append(done.experience)
            group.act(rng)
            if sum(len(part["action"]) for part in state["pending"]) >= INSERT_BATCH:
                parts, state["pending"] = state["pending"], []
                batch = {name: np.concatenate([p[name] for p in parts]) for name in parts[0]}
                batch, priorities = envs[0].maker.priorities(batch, 1e-3)
                if frames is not None:
                    scalars = {name: batch[name] for name in ("action", "reward", "discount")}
                    frames.sent_to(0, frames.build(0, batch["refs"], scalars, priorities))

    return step


def env_alone(env: str, count: int, variant: str) -> Callable[[], None]:
    """The vector env's step alone, with random actions (``env-gym`` or ``env-ale``)."""
    envs = _gymnasium_envs(env, count) if variant == "env-gym" else actor_envs(env, count)
    envs.reset(seed=list(range(count)))
    rng = np.random.default_rng(0)
    actions = envs.single_action_space.n

    def step() -> None:
        envs.step(rng.integers(0, actions, count))

    return step


def play_loop(env: str, count: int, variant: str) -> Callable[[], None]:
    """The emulator and the int8 forward pass together, greedy, nothing else (``play-sync``
    or ``play-async``). Sync: one emulator thread steps all ``count`` envs, then the
    network acts on all. Async (ale-py's batch mode, as EnvPool's): two emulator threads,
    and each step acts on whichever ``count // 2`` envs are ready while the others
    emulate, so one call is ``count // 2`` env steps."""
    shape = env_shape(env)
    config = ActorConfig(env=env, envs_per_actor=count, acting_precision="int8")
    policy = build_acting(config, default_sections(), shape).policy
    if variant == "play-sync":
        envs, batch = actor_envs(env, count), count
    else:
        from ale_py.vector_env import AtariVectorEnv  # the atari extra

        batch = count // 2
        envs = AtariVectorEnv(
            rom_name(preset(env).gym_id),
            count,
            batch_size=batch,
            num_threads=2,
            frameskip=4,
            stack_num=4,
            autoreset_mode=gym.vector.AutoresetMode.SAME_STEP,
            use_fire_reset=False,
        )
    observations = [envs.reset(seed=0)[0]]

    def step() -> None:
        actions = policy.values(observations[0]).argmax(1)
        observations[0] = envs.step(actions)[0]

    step.env_steps_per_call = batch  # type: ignore[attr-defined]
    return step


def forward_alone(env: str, count: int, variant: str) -> tuple[Callable[[], None], dict]:
    """The Q-network's forward pass at batch ``count`` on real frames, and for int8 how
    its answers compare with the float network's on 256 frames of random play (a fresh
    network's, whose actions are closer to ties than a trained one's)."""
    shape = env_shape(env)
    precision = variant.removeprefix("forward-")
    config = ActorConfig(env=env, envs_per_actor=count, acting_precision=precision)
    policy = build_acting(config, default_sections(), shape).policy
    envs = actor_envs(env, 8)
    frames = [envs.reset(seed=list(range(8)))[0]]
    rng = np.random.default_rng(0)
    for _ in range(32):  # frames of play, and the int8 network's calibration on them
        frames.append(envs.step(rng.integers(0, shape.actions, 8))[0])
        policy.values(frames[-1])
    envs.close()
    frames = np.concatenate(frames[1:])
    observations = frames[:count]
    extras = {}
    if precision == "int8":
        float_config = dataclasses.replace(config, acting_precision="float32")
        float_policy = build_acting(float_config, default_sections(), shape).policy
        expected, answered = float_policy.values(frames), policy.values(frames)
        extras = {
            "greedy_agreement": float((expected.argmax(1) == answered.argmax(1)).mean()),
            "max_q_error_over_q_std": float(np.abs(expected - answered).max() / expected.std()),
        }

    def step() -> None:
        policy.values(observations)

    return step, extras


def _plan(quick: bool) -> list[tuple[str, tuple[int, ...], tuple[int, ...], tuple[str, ...]]]:
    pong = (
        "before",
        "ale",
        "ale-int8",
        "ale-int8-halves",
        "env-gym",
        "env-ale",
        "forward-float32",
        "forward-int8",
        "play-sync",
        "play-async",
    )
    return [
        ("CartPole-v1", (1, 8) if quick else (1, 8, 32), (256, 256), ("ale",)),
        ("Pong", (4,) if quick else (1, 4, 16, 32, 64), (512,), pong),
        # Ape-X DPG actors (policy and critic 256x256, as the presets).
        ("Pendulum-v1", (1, 4) if quick else (1, 4, 16), (256, 256), ("ale",)),
        ("HalfCheetah-v5", (1,) if quick else (1, 4), (256, 256), ("ale",)),
    ]


def _case(env: str, count: int, variant: str) -> str:
    return f"{env}-k{count}" if env != "Pong" else f"{env}-k{count}-{variant}"


def run(
    *,
    quick: bool = False,
    repeats: int = 5,
    seconds_per_repeat: float | None = None,
    progress: Callable[[str], None] | None = None,
) -> dict[str, object]:
    torch.set_num_threads(1)  # as an actor process runs
    per_repeat = seconds_per_repeat or (0.05 if quick else 0.5)
    records = []
    for env, counts, hidden, variants in _plan(quick):
        for count in counts:
            for variant in variants:
                case = _case(env, count, variant)
                if progress:
                    progress(f"actor {case}")
                per_core = env == "Pong"
                clock = "process cpu" if per_core else "wall"
                params = {
                    "env": env,
                    "envs_per_actor": count,
                    "torch_threads": 1,
                    "variant": variant,
                    "clock": clock,
                }
                base = {"suite": SUITE, "case": case, "implementation": "apex", "params": params}
                extras: dict = {}
                halves = variant.startswith("play-") or variant.endswith("-halves")
                if halves and count < 2:
                    continue  # async mode acts on half the envs
                try:
                    if variant.startswith("play-"):
                        step = play_loop(env, count, variant)
                    elif variant.startswith("env-"):
                        step = env_alone(env, count, variant)
                    elif variant.startswith("forward-"):
                        step, extras = forward_alone(env, count, variant)
                    else:
                        step = acting_loop(env, count, hidden, variant)
                except (ImportError, gym.error.Error) as exc:
                    records.append(
                        {**base, "status": "unavailable", "reason": f"{type(exc).__name__}: {exc}"}
                    )
                    continue
                unit = "env steps/s per core" if per_core else "env steps/s"
                if variant.startswith("forward-"):
                    unit = "observations/s per core"
                items = getattr(step, "env_steps_per_call", count)
                timing = {
                    "items_per_call": items,
                    "repeats": repeats,
                    "warmup_calls": 5,
                    "seconds_per_repeat": per_repeat,
                }
                measurement = measure_rate(
                    "env_steps" if not variant.startswith("forward-") else "observations",
                    unit,
                    step,
                    clock=time.process_time if per_core else time.perf_counter,
                    **timing,
                )
                records.append({**base, "status": "ok", **measurement.to_record(), **extras})
                if halves or variant == "ale-int8":  # where async pays: a process's wall time
                    wall = measure_rate("env_steps_per_process", "env steps/s", step, **timing)
                    records.append(
                        {
                            **base,
                            "status": "ok",
                            **wall.to_record(),
                            "params": {**params, "clock": "wall"},
                        }
                    )
    return {
        "records": records,
        "ratios": _ratios(records),
        "config": {"quick": quick, "repeats": repeats, "seconds_per_repeat": per_repeat},
    }


def _ratios(records: list[dict]) -> list[dict]:
    """Per Pong env count: each variant's per-core rate over the ``before`` loop's, and
    the env groups' over one group's, per core and per process."""
    rates = {
        r["case"]: r["median"]
        for r in records
        if r["status"] == "ok" and r["metric"] == "env_steps"
    }
    ratios = []
    for case, rate in rates.items():
        if not case.startswith("Pong-") or not case.endswith("-before"):
            continue
        prefix = case.removesuffix("before")
        for variant in ("ale", "ale-int8", "ale-int8-halves"):
            after = rates.get(prefix + variant)
            if after is not None:
                ratios.append(
                    {
                        "suite": SUITE,
                        "case": prefix + variant,
                        "metric": "env_steps",
                        "numerator": variant,
                        "denominator": "before",
                        "ratio": after / rate,
                    }
                )
    # The groups against one group, per core and per process, same envs and network.
    walls = {
        r["case"]: r["median"]
        for r in records
        if r["status"] == "ok" and r["metric"] == "env_steps_per_process"
    }
    for case in rates:
        if not case.endswith("-ale-int8-halves"):
            continue
        one = case.removesuffix("-halves")
        for metric, table in (("env_steps", rates), ("env_steps_per_process", walls)):
            if one in table and case in table:
                ratios.append(
                    {
                        "suite": SUITE,
                        "case": case,
                        "metric": metric,
                        "numerator": "ale-int8-halves",
                        "denominator": "ale-int8",
                        "ratio": table[case] / table[one],
                    }
                )
    return ratios
