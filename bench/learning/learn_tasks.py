"""The learning benchmark's tasks: what solves each, how often both sides evaluate, the
wall-clock budget of a run, and the peer it is measured against.

Evaluation seeds are 0-9 (MuJoCo: 0-4). Presets are tuned on seeds 100 and up, never on
these.
"""

from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True)
class Task:
    """One task of the learning benchmark.

    Attributes:
        env: the apex preset and gymnasium id.
        peer: the implementation apex is measured against (``bench.learning.sb3_worker``).
        target: the greedy mean that solves it (confirmed on ``confirm_episodes``); None:
            no solve, only returns at the budgets.
        budget_s: wall-clock seconds of one run, from spawning it.
        eval_every_steps: env steps between evaluations, on both sides.
        eval_episodes: episodes of a periodic evaluation.
        confirm_episodes: episodes of a confirmation.
        seeds: the evaluation seeds of a full run.
        checkpoints_s: wall-clock times at which each run's return is read.
        peer_max_steps: the peer's env-step limit (its zoo budget, or more to fill the
            wall clock).
        apex_settings: ``--set`` settings every apex run of the task gets (its algorithm).
        name: what ``--task`` calls it and records name it by; the env if empty.
        env_kwargs: the env's arguments (``[env] kwargs``), the same on both sides, as
            ``(name, value)`` pairs.
    """

    env: str
    peer: str
    target: float | None
    budget_s: float
    eval_every_steps: int
    eval_episodes: int
    confirm_episodes: int
    seeds: tuple[int, ...]
    checkpoints_s: tuple[float, ...]
    peer_max_steps: int
    apex_settings: tuple[str, ...] = ()
    name: str = ""
    env_kwargs: tuple[tuple[str, object], ...] = ()

    @property
    def case(self) -> str:
        return self.name or self.env


# --quick: one seed, a budget of seconds: the plumbing of both sides, never a figure.
MINATAR_GAMES = ("Breakout", "SpaceInvaders", "Asterix", "Freeway", "Seaquest")
QUICK_BUDGET_S = 8.0
TEN_SEEDS = tuple(range(10))
# The game, its budget in seconds, the times its returns are read. RepeatPreviousEasy is
# not one: its cue is 4 steps back, inside a 4-stack, so it needs no memory past one.
POPGYM_GAMES = (
    ("RepeatFirstEasy", 300.0, (30.0, 60.0, 120.0, 300.0)),
    ("PositionOnlyCartPoleEasy", 300.0, (30.0, 60.0, 120.0, 300.0)),
)
# Memory against a stack against neither, by the "r2d2/", "dqn-stack4/" and "dqn/" tasks.
MEMORY_ARMS = (
    ("r2d2", ("algorithm=r2d2",)),
    ("dqn", ("algorithm=dqn",)),
    ("dqn-stack4", ("algorithm=dqn", "env.stack=4")),
)
# MinAtar Breakout without its trail plane (where the ball was a step before): a single
# frame shows the ball but not where it goes.
NO_TRAIL = (("hidden_planes", ("trail",)),)
# A user's own tasks (bench.learning.user_envs), with no preset: every algorithm on the
# sized defaults (apex.algorithms.sized_defaults), set on other tasks. Three minutes each
# (R2D2's two), the time a user gives a first try.
USER = "bench.learning.user_envs"
USER_CHECKPOINTS_S = (30.0, 60.0, 120.0, 180.0)
# fmt: off
TASKS = {
    task.case: task
    for task in (
        # Partially observed (the popgym extra): R2D2 against sb3-contrib's RecurrentPPO,
        # DQN on the same task (apex's own side of the "dqn/" task) as the memoryless
        # control, and DQN on the newest 4 observations ("dqn-stack4/"). Returns at the
        # budgets: POPGym gives no thresholds. RepeatFirst's cue is the episode's first
        # card, past any stack; PositionOnlyCartPole hides the velocities, which a stack
        # of positions gives back and a single observation does not.
        *(Task(f"popgym:popgym-{game}-v0", "sb3-recurrent-ppo", None, budget_s, 5_000, 20,
               0, TEN_SEEDS, checkpoints_s, 10_000_000, settings, f"{name}/popgym-{game}")
          for game, budget_s, checkpoints_s in POPGYM_GAMES
          for name, settings in MEMORY_ARMS),
        # gymnasium's definition: 475 over 100 consecutive episodes.
        Task("CartPole-v1", "sb3-dqn", 475.0, 180.0, 2_000, 20, 100, TEN_SEEDS,
             (15.0, 30.0, 60.0, 120.0), 500_000),
        # gymnasium's reward_threshold for both.
        Task("Acrobot-v1", "sb3-dqn", -100.0, 300.0, 5_000, 20, 100, TEN_SEEDS,
             (30.0, 60.0, 120.0, 240.0), 1_000_000),
        Task("LunarLander-v3", "sb3-dqn", 200.0, 900.0, 10_000, 10, 100, TEN_SEEDS,
             (60.0, 120.0, 300.0, 600.0), 2_000_000),
        Task("Pendulum-v1", "sb3-td3", -200.0, 300.0, 2_000, 10, 100, TEN_SEEDS,
             (30.0, 60.0, 120.0, 240.0), 1_000_000),
        Task("HalfCheetah-v5", "sb3-td3", None, 1200.0, 10_000, 10, 0, tuple(range(5)),
             (300.0, 600.0, 900.0, 1200.0), 1_000_000),
        # Pixels on a CPU: no solve, returns at the checkpoints; 3 seeds of 20 minutes.
        # The MinAtar preset is the paper's DQN settings with Ape-X's n-step and priorities,
        # searched on no game: all five run it untuned.
        *(Task(env, "sb3-dqn", None, 1200.0, 50_000, 10, 0, (0, 1, 2),
               (300.0, 600.0, 900.0, 1200.0), 5_000_000)
          for env in (f"MinAtar/{game}-v1" for game in MINATAR_GAMES)),
        # Breakout on single frames: the same arms as POPGym's, the peer SB3's DQN (the
        # MinAtar paper's settings) on single frames too.
        *(Task("MinAtar/Breakout-v1", "sb3-dqn", None, 1200.0, 50_000, 10, 0, (0, 1, 2),
               (300.0, 600.0, 900.0, 1200.0), 5_000_000, settings,
               f"{name}/MinAtar/Breakout-no-trail", NO_TRAIL)
          for name, settings in MEMORY_ARMS),
        Task(f"{USER}:Catch-v0", "sb3-dqn", 4.5, 180.0, 2_000, 20, 100, TEN_SEEDS,
             USER_CHECKPOINTS_S, 1_000_000, ("algorithm=dqn",), "user/Catch-v0"),
        Task(f"{USER}:CatchVector-v0", "sb3-dqn", 4.5, 180.0, 2_000, 20, 100, TEN_SEEDS,
             USER_CHECKPOINTS_S, 1_000_000, ("algorithm=dqn",), "user/CatchVector-v0"),
        Task(f"{USER}:CueCorridor-v0", "sb3-recurrent-ppo", 0.9, 120.0, 2_000, 20, 100,
             TEN_SEEDS, (30.0, 60.0, 120.0), 1_000_000, ("algorithm=r2d2",),
             "r2d2/user/CueCorridor-v0"),
        Task(f"{USER}:GridWalk-v0", "sb3-dqn", 0.7, 180.0, 2_000, 20, 100, TEN_SEEDS,
             USER_CHECKPOINTS_S, 1_000_000, ("algorithm=dqn",), "user/GridWalk-v0"),
        Task(f"{USER}:TwoCues-v0", "sb3-recurrent-ppo", 0.9, 120.0, 2_000, 20, 100,
             TEN_SEEDS, (30.0, 60.0, 120.0), 1_000_000, ("algorithm=r2d2",),
             "r2d2/user/TwoCues-v0"),
        *(Task(f"{USER}:{env}", "sb3-ppo", None, 180.0, 5_000, 20, 0, TEN_SEEDS,
               USER_CHECKPOINTS_S, 1_000_000, ("algorithm=impala",), f"impala/user/{env}")
          for env in ("Catch-v0", "CatchVector-v0", "GridWalk-v0")),
        Task(f"{USER}:PointReach-v0", "sb3-td3", None, 180.0, 5_000, 10, 0, TEN_SEEDS,
             USER_CHECKPOINTS_S, 1_000_000, ("algorithm=dpg",), "user/PointReach-v0"),
        # IMPALA (V-trace on queued unrolls) against SB3's PPO, same protocol.
        Task("CartPole-v1", "sb3-ppo", 475.0, 180.0, 2_000, 20, 100, TEN_SEEDS,
             (15.0, 30.0, 60.0, 120.0), 1_000_000, ("algorithm=impala",),
             "impala/CartPole-v1"),
        Task("LunarLander-v3", "sb3-ppo", 200.0, 900.0, 10_000, 10, 100, TEN_SEEDS,
             (60.0, 120.0, 300.0, 600.0), 5_000_000, ("algorithm=impala",),
             "impala/LunarLander-v3"),
        *(Task(env, "sb3-ppo", None, 1200.0, 50_000, 10, 0, (0, 1, 2),
               (300.0, 600.0, 900.0, 1200.0), 10_000_000, ("algorithm=impala",),
               f"impala/{env}")
          for env in ("MinAtar/Breakout-v1", "MinAtar/SpaceInvaders-v1")),
    )
}
# fmt: on


def task(name: str) -> Task:
    """The task called ``name``.

    Raises:
        ValueError: no such task.
    """
    if name not in TASKS:
        raise ValueError(f"no learning task {name!r}: one of {', '.join(TASKS)}")
    return TASKS[name]


def quick_task(task: Task) -> Task:
    """``task`` shrunk to the plumbing check: seed 0, :data:`QUICK_BUDGET_S`."""
    return replace(task, budget_s=QUICK_BUDGET_S, seeds=(0,), checkpoints_s=(QUICK_BUDGET_S,))
