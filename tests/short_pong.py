"""Short Pong for the frame-path tests: one env group of ale-py envs whose episodes end at
200 frames (50 steps, a time limit), so a run of a hundred steps crosses a few."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from apex.acting.env_group import make_groups
from apex.acting.experience import ExperienceMaker
from apex.acting.frame_writer import FrameWriter
from apex.algorithms.protocols import Acting
from apex.envs.families import env_shape
from apex.envs.vector import AtariStacks
from apex.settings import ActorConfig

SHORT_FRAMES = 200


def short_pong(name: str, count: int) -> AtariStacks:
    return AtariStacks(name, count, training=True, threads=1, max_frames=SHORT_FRAMES)


def group_experience(
    config: ActorConfig,
    acting: Acting,
    frames: FrameWriter | None,
    scales: np.ndarray,
    rounds: int,
) -> Iterator[tuple[ExperienceMaker, dict[str, np.ndarray]]]:
    """What one env group of ``config``'s Pong envs makes in ``rounds`` steps, each batch
    as it is made (an actor sends it before its frames leave the writer's ring), with the
    group's experience maker."""
    [group] = make_groups(
        config, env_shape("Pong"), acting, frames, lambda: 7, scales, envs=short_pong
    )
    try:
        group.begin(config.actor_seed)
        group.act(np.random.default_rng(0))
        for _ in range(rounds):
            done = group.finish()
            group.act(np.random.default_rng(0))
            if done.experience is not None and len(done.experience["action"]):
                yield group.maker, done.experience
    finally:
        group.close()
