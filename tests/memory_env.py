"""A task that needs memory, registered for gymnasium's ``module:Id`` form:
``tests.memory_env:Cue-v0``: the user tasks' cue corridor
(``bench.learning.user_envs.CueCorridor``) of 4 steps. The first observation shows a cue
(one of two); the next ones only the time; at the last step the action that names the
cue pays +1, the other -1. Without memory the best expected return is 0; with it, 1."""

from __future__ import annotations

import gymnasium as gym

from bench.learning.user_envs import CueCorridor

STEPS = 4

gym.register("Cue-v0", entry_point=CueCorridor, kwargs={"length": STEPS})
