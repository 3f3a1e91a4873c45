"""R2D2: sequences built at episode boundaries (padding, masks, overlap, stored state), the
value rescaling and its inverse, the η-mixed priority of a sequence, n-step targets, a
burn-in that carries no gradient, the seam the loops call, and a cue remembered."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from apex.algorithms.r2d2.sequences import SequenceBuilder
from apex.algorithms.r2d2.targets import rescale, sequence_priorities, unrescale

GAMMA = 0.5  # exact in float32


def _builder(envs: int = 1, length: int = 4, period: int = 2) -> SequenceBuilder:
    return SequenceBuilder(
        envs, length, period, GAMMA, (1,), np.dtype(np.float32), (2, 1), burn_in=1
    )


def _play(builder: SequenceBuilder, episode_ends: dict[int, str], steps: int) -> list[dict]:
    """Steps one env whose observation at step t is t (the state before it -t, and the
    reward 10 t); ``episode_ends``: step -> "terminated" or "truncated". Returns what was
    emitted, in order, one sequence each."""
    emitted = []
    for t in range(steps):
        end = episode_ends.get(t)
        observation = np.array([[float(t)]], np.float32)
        following = np.array([[float(t + 1)]], np.float32)
        # After an ended episode the envs go on from a reset observation, here 1000 + t.
        next_observation = np.array([[1000.0 + t]], np.float32) if end else following
        state = np.full((1, 2, 1), -float(t), np.float32)
        ended = (np.array([end == "terminated"]), np.array([end == "truncated"]))
        out = builder.step(
            observation,
            state,
            np.array([t]),
            np.array([10.0 * t]),
            next_observation,
            following,
            *ended,
        )
        if out is not None:
            emitted += [
                {key: value[i] for key, value in out.items()} for i in range(len(out["mask"]))
            ]
    return emitted


def test_an_episode_s_sequences_overlap_by_half_and_carry_the_state_they_start_from() -> None:
    # Steps 0-7 of one episode, m = 4 and a period of 2: sequences start at 0, 2, 4.
    first, second, third = _play(_builder(), {}, steps=8)
    np.testing.assert_array_equal(first["obs"][:, 0], [0, 1, 2, 3, 4])  # s_4 to bootstrap
    np.testing.assert_array_equal(second["obs"][:, 0], [2, 3, 4, 5, 6])
    np.testing.assert_array_equal(third["obs"][:, 0], [4, 5, 6, 7, 8])
    np.testing.assert_array_equal(second["action"], [2, 3, 4, 5])
    np.testing.assert_array_equal(second["reward"], [20, 30, 40, 50])
    # The stored state is the one before the sequence's first step; the burn-in state
    # the one before its step 1 (the burn-in's end here).
    assert [s["state"][0, 0] for s in (first, second, third)] == [0.0, -2.0, -4.0]
    assert [s["burn_in_state"][0, 0] for s in (first, second, third)] == [-1.0, -3.0, -5.0]
    assert all((s["mask"] == 1).all() and (s["discount"] == GAMMA).all() for s in (first, second))
    assert [s["starts"] for s in (first, second, third)] == [1.0, 0.0, 0.0]


def test_an_ended_episode_s_window_is_padded_and_the_next_starts_afresh() -> None:
    # Terminated at step 2 (a sequence of 3 steps, padded), then a new episode from step 3.
    first, after = _play(_builder(), {2: "terminated"}, steps=7)
    # A sequence of one step has no step after its burn-in: its burn-in state is zeros.
    [single] = _play(_builder(), {0: "terminated"}, steps=1)
    assert (single["burn_in_state"] == 0).all() and single["mask"].tolist() == [1, 0, 0, 0]
    np.testing.assert_array_equal(first["mask"], [1, 1, 1, 0])
    np.testing.assert_array_equal(first["discount"], [GAMMA, GAMMA, 0, 0])
    np.testing.assert_array_equal(first["obs"][:, 0], [0, 1, 2, 3, 3])  # final obs, repeated
    np.testing.assert_array_equal(first["action"], [0, 1, 2, 0])
    np.testing.assert_array_equal(first["reward"], [0, 10, 20, 0])
    # The next episode's window: its first observation is the reset one the env went on
    # from... as the caller hands it at the next step (here step 3's own observation).
    np.testing.assert_array_equal(after["obs"][:, 0], [3, 4, 5, 6, 7])
    assert after["starts"] == 1.0 and after["state"][0, 0] == -3.0


def test_frame_references_follow_the_observations_padding_and_overlap_included() -> None:
    # Frame numbers as an actor's frame writer gives them: env 2's frame 10 + t at step t,
    # the episode's final frame 10 + t + 1 after its last step; terminated at step 4.
    builder = SequenceBuilder(
        1, 4, 2, GAMMA, (1,), np.dtype(np.float32), (2, 1), burn_in=1, references=True
    )
    emitted = []
    for t in range(5):
        observation = np.array([[float(t)]], np.float32)
        pairs = (np.array([[2, 10 + t]]), np.array([[2, 11 + t]]))
        out = builder.step(
            observation,
            np.zeros((1, 2, 1), np.float32),
            np.array([t]),
            np.ones(1),
            observation + 1,
            observation + 1,
            np.array([t == 4]),
            np.array([False]),
            pairs,
        )
        if out is not None:
            emitted.append(out)
    full, padded = emitted
    np.testing.assert_array_equal(full["refs"], [[2, 10, 11, 12, 13, 14]])
    # The window kept its last two steps; past the final frame, that frame again.
    np.testing.assert_array_equal(padded["refs"], [[2, 12, 13, 14, 15, 15]])
    np.testing.assert_array_equal(padded["obs"][0, :, 0], [2, 3, 4, 5, 5])
    np.testing.assert_array_equal(padded["mask"], [[1, 1, 1, 0]])


def test_a_truncated_episode_keeps_its_discount_and_final_observation_to_bootstrap() -> None:
    # Two full sequences, then truncated at step 4 (a window of steps 2-4 after the shift).
    sequences = _play(_builder(), {4: "truncated"}, steps=5)
    last = sequences[-1]
    np.testing.assert_array_equal(last["mask"], [1, 1, 1, 0])
    np.testing.assert_array_equal(last["discount"], [GAMMA, GAMMA, GAMMA, 0])
    np.testing.assert_array_equal(last["obs"][:, 0], [2, 3, 4, 5, 5])
    assert last["starts"] == 0.0 and last["state"][0, 0] == -2.0


def test_an_episode_that_ends_on_a_full_window_emits_it_once() -> None:
    first, nxt = _play(_builder(), {3: "terminated"}, steps=8)
    np.testing.assert_array_equal(first["mask"], [1, 1, 1, 1])
    np.testing.assert_array_equal(first["discount"], [GAMMA, GAMMA, GAMMA, 0])
    assert nxt["starts"] == 1.0 and nxt["obs"][0, 0] == 4.0


def test_envs_keep_windows_of_their_own() -> None:
    builder = SequenceBuilder(2, 3, 3, 1.0, (), np.dtype(np.int64), (1,))
    got = []
    for t in range(6):
        ended = np.array([t == 1, False])
        out = builder.step(
            np.array([t, 100 + t]),
            np.zeros((2, 1)),
            np.zeros(2, np.int64),
            np.ones(2),
            np.array([t + 1, 101 + t]),
            np.array([t + 1, 101 + t]),
            ended,
            np.zeros(2, bool),
        )
        if out is not None:
            got.append(out["obs"].tolist())
    # Env 0 ends after 2 steps (padded), then fills 2-4; env 1 fills 0-2 and 3-5.
    assert got == [[[0, 1, 2, 2]], [[100, 101, 102, 103]], [[2, 3, 4, 5]], [[103, 104, 105, 106]]]
    np.testing.assert_array_equal(builder.filled, [1, 0])


@pytest.mark.parametrize("bad", [{"length": 1}, {"period": 0}, {"period": 5}])
def test_bad_sequence_settings_are_refused(bad) -> None:
    settings = {"length": 4, "period": 2, **bad}
    with pytest.raises(ValueError, match="sequence"):
        SequenceBuilder(1, settings["length"], settings["period"], 0.9, (1,), np.float32, (1,))


def test_the_rescaling_is_inverted_on_numpy_and_torch() -> None:
    x = np.array([-1e4, -300.0, -1.0, -1e-3, 0.0, 1e-3, 0.5, 21.0, 1e5])
    np.testing.assert_allclose(unrescale(rescale(x)), x, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(
        rescale(np.array([0.0, 3.0, -8.0])), [0.0, 1.0 + 3e-3, -2.0 - 8e-3], rtol=1e-12
    )
    t = torch.as_tensor(x, dtype=torch.float64)
    torch.testing.assert_close(unrescale(rescale(t)), t, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(rescale(t), torch.as_tensor(rescale(x)))


def test_a_sequence_s_priority_mixes_its_largest_and_mean_error_over_its_real_steps() -> None:
    td = np.array([[1.0, 3.0, 2.0, 100.0], [0.5, 0.5, 0.5, 0.5], [9.0, 9.0, 9.0, 9.0]])
    mask = np.array([[1, 1, 1, 0], [1, 1, 1, 1], [0, 0, 0, 0]], np.float64)
    expected = [0.9 * 3 + 0.1 * 2, 0.5, 0.0]  # the padded 100 and an all-padded row count 0
    np.testing.assert_allclose(sequence_priorities(td, mask), expected)
    torch.testing.assert_close(
        sequence_priorities(torch.as_tensor(td), torch.as_tensor(mask)),
        torch.as_tensor(expected, dtype=torch.float64),
    )


def _network(units: int = 4, value: float | None = None):
    from apex.algorithms.r2d2.network import RecurrentQNetwork

    torch.manual_seed(0)
    network = RecurrentQNetwork((3,), 2, (8,), units)
    if value is not None:  # Q = value for every action of every step
        with torch.no_grad():
            for layer in (network.head.value[2], network.head.advantage[2]):
                layer.weight.zero_()
                layer.bias.zero_()
            network.head.value[2].bias.fill_(value)
    return network


def _sequences(batch: int = 2, length: int = 6, real: tuple[int, ...] = (6, 3)) -> dict:
    generator = torch.Generator().manual_seed(1)
    mask = torch.stack([(torch.arange(length) < r).float() for r in real])
    return {
        "obs": torch.randn(batch, length + 1, 3, generator=generator),
        "action": torch.randint(0, 2, (batch, length), generator=generator),
        "reward": torch.randn(batch, length, generator=generator) * mask,
        "discount": 0.5 * mask,
        "mask": mask,
        "state": torch.randn(batch, 2, 4, generator=generator),
        "starts": torch.zeros(batch),
    }


def test_the_n_step_targets_are_the_rescaled_returns_bootstrapped_within_the_episode() -> None:
    from apex.algorithms.r2d2.learning import sequence_td

    network, sequences = _network(value=2.0), _sequences()
    sequences["discount"][1, 2] = 0.0  # the second sequence's episode terminates at step 2
    found = sequence_td(network, network, sequences, burn_in=1, n_step=3)
    delta, mask = found.delta[:, 1:], found.mask[:, 1:]  # the burn-in's step: not trained
    assert not found.delta[:, 0].any() and not found.mask[:, 0].any()
    reward, discount = sequences["reward"], sequences["discount"]
    tail = unrescale(torch.tensor(2.0))
    expected = torch.zeros(2, 5)
    for row, real in ((0, 6), (1, 3)):
        for t in range(1, real):
            n = min(3, real - t)
            returns, carried = 0.0, 1.0
            for k in range(n):
                returns += carried * reward[row, t + k]
                carried *= discount[row, t + k]
            expected[row, t - 1] = rescale(returns + carried * tail) - 2.0
    torch.testing.assert_close(delta.detach(), expected)
    np.testing.assert_array_equal(mask.numpy(), sequences["mask"][:, 1:].numpy())


def _gradients(burn_in: int, starts: tuple[float, float]) -> dict:
    from apex.algorithms.r2d2.learning import sequence_td

    sequences = _sequences(real=(6, 6))
    sequences["starts"] = torch.tensor(starts)
    sequences["obs"].requires_grad_(True)
    sequences["state"].requires_grad_(True)
    sequence_td(
        _network(), _network(), sequences, burn_in, n_step=2
    ).delta.square().sum().backward()
    return {"obs": sequences["obs"].grad, "state": sequences["state"].grad}


def test_a_burn_in_carries_no_gradient() -> None:
    """The steps of the burn-in move the state forward and nothing else: no gradient
    reaches their observations, or the stored state; without a burn-in both get one."""
    grad = _gradients(2, starts=(0.0, 0.0))
    assert grad["obs"][:, :2].abs().sum() == 0 and grad["state"] is None
    assert (grad["obs"][:, 2:-1].abs().sum((1, 2)) > 0).all()
    grad = _gradients(0, starts=(0.0, 0.0))
    assert (grad["obs"][:, :-1].abs().sum((1, 2)) > 0).all()
    assert (grad["state"].abs().sum((1, 2)) > 0).all()


def test_a_sequence_that_starts_its_episode_trains_its_first_steps_beside_burnt_ones() -> None:
    """In one batch, the row that starts its episode trains from its first step (gradient
    on its first observations and its state); the other's burn-in still carries none."""
    grad = _gradients(2, starts=(1.0, 0.0))
    assert grad["obs"][0, :2].abs().sum() > 0 and grad["state"][0].abs().sum() > 0
    assert grad["obs"][1, :2].abs().sum() == 0 and grad["state"][1].abs().sum() == 0
    assert (grad["obs"][:, 2:-1].abs().sum((1, 2)) > 0).all()


def test_the_stored_state_discrepancy_is_zero_where_the_burn_in_reaches_the_actor_s_state() -> None:
    """R2D2's ΔQ after the burn-in: 0 where the actor's state at step ``l`` is the one the
    burn-in from the stored state gives (the same weights); above 0 where it is not."""
    from apex.algorithms.r2d2.learning import sequence_td
    from apex.algorithms.r2d2.network import pack, unpack

    network, sequences = _network(), _sequences(real=(6, 6))
    with torch.no_grad():
        _, burnt = network(sequences["obs"][:, :2], unpack(sequences["state"]))
    sequences["burn_in_state"] = pack(burnt)
    exact = sequence_td(network, network, sequences, burn_in=2, n_step=2)
    torch.testing.assert_close(exact.discrepancy, torch.zeros(2), atol=1e-6, rtol=0)
    assert exact.measured.tolist() == [1.0, 1.0]
    sequences["burn_in_state"] = torch.zeros_like(sequences["state"])
    stale = sequence_td(network, network, sequences, burn_in=2, n_step=2)
    assert (stale.discrepancy > 0).all()
    short = _sequences(real=(6, 1))  # the second never reaches step 2: measured on one
    short["burn_in_state"] = torch.zeros_like(short["state"])
    assert sequence_td(network, network, short, burn_in=2, n_step=2).measured.tolist() == [1, 0]
    short["starts"] = torch.tensor([1.0, 0.0])  # nor does one with no burn-in
    assert sequence_td(network, network, short, burn_in=2, n_step=2).measured.tolist() == [0, 0]


def test_an_update_gives_each_sequence_its_eta_priority_and_starts_skip_the_burn_in() -> None:
    from apex.algorithms.r2d2.learning import R2D2, sequence_td
    from apex.algorithms.r2d2.settings import R2D2Settings
    from apex.learning.staging import DeviceBatch
    from apex.settings import LearnerConfig

    settings = R2D2Settings(burn_in=2, n_step=2, lstm_units=4, target_update_period=100)
    learner = R2D2(
        LearnerConfig(learning_rate=1e-3, priority_epsilon=1e-3),
        settings,
        _network(),
        torch.device("cpu"),
    )
    sequences = _sequences(batch=2)
    sequences["starts"] = torch.tensor([1.0, 0.0])
    expected = []
    for row, burn_in in ((0, 0), (1, 2)):
        part = {key: value[row : row + 1] for key, value in sequences.items()}
        found = sequence_td(learner.online, learner.target, part, burn_in, 2)
        expected.append(
            float(sequence_priorities(found.delta.detach().abs(), found.mask)[0]) + 1e-3
        )
    result = learner.step(DeviceBatch(sequences, torch.ones(2), None))
    np.testing.assert_allclose(result.new_priorities.numpy(), expected, rtol=1e-5)
    assert not result.skipped and np.isfinite(result.loss)


def test_r2d2_acts_sends_sequences_and_learns_through_the_seam_alone() -> None:
    """What the loops call, and nothing else: the actor's copy keeps a state per env copy
    and zeroes it at an episode's start; its sequences fit the spec with a priority each;
    an update on them gives a priority per sequence back."""
    from apex.algorithms.registry import build_acting, build_algorithm
    from apex.envs.families import env_shape
    from apex.learning.staging import DeviceBatch
    from launch.config import resolve

    config = resolve(
        {
            "algorithm": "r2d2",
            "learner": {"hidden": [16]},
            "actor": {"hidden": [16], "envs_per_actor": 3},
            "r2d2": {"sequence_length": 6, "sequence_period": 3, "burn_in": 2, "lstm_units": 8},
        }
    )
    shape = env_shape(config.env)
    learner = build_algorithm(config.learner, config.algorithms, shape, torch.device("cpu"))
    acting = build_acting(config.actor_config(0), config.algorithms, shape)
    acting.policy.load({k: v.numpy() for k, v in learner.policy.state_dict().items()})
    experience = acting.experience(config.actor_config(0), shape, lambda: 1, frame_refs=False)
    rng = np.random.default_rng(0)
    observations = rng.standard_normal((3, 4)).astype(np.float32)
    experience.begin(observations)
    sent = []
    for step in range(12):
        actions = experience.act(observations, np.full(3, 0.5), rng)
        following = rng.standard_normal((3, 4)).astype(np.float32)
        ended = np.array([step == 4, False, False])
        out = experience.step(
            observations,
            actions,
            np.ones(3, np.float32),
            following,
            following,
            ended,
            np.zeros(3, bool),
        )
        if ended[0]:  # env 0's next episode starts from a zero state
            assert not experience._state[0].any() and experience._state[1].any()
        if out is not None:
            sent.append(out)
        observations = following
    batch = {name: np.concatenate([part[name] for part in sent]) for name in sent[0]}
    spec = acting.transition_spec(shape, config.actor)
    assert spec.check_batch(batch) == len(batch["mask"]) >= 6
    batch, priorities = experience.priorities(batch, 1e-3)
    assert priorities.shape == (len(batch["mask"]),) and (priorities >= 1e-3).all()
    tensors = {name: torch.as_tensor(value) for name, value in batch.items()}
    result = learner.step(DeviceBatch(tensors, torch.ones(len(priorities)), None))
    assert result.new_priorities.shape == priorities.shape and np.isfinite(result.loss)
    # The actor's priorities are the learner's own rule on the same weights.
    np.testing.assert_allclose(result.new_priorities.numpy(), priorities, rtol=1e-4)


@pytest.mark.slow
def test_r2d2_remembers_a_cue_that_a_memoryless_policy_cannot_see() -> None:
    """``tests.memory_env:Cue-v0`` in this process: sequences from the actor's experience
    builder, updates of the learner, greedy episodes of the actor's copy. R2D2 names the
    cue shown three steps before nearly every time; any policy of the last observation
    alone is right half the time."""
    from apex.algorithms.registry import build_acting, build_algorithm
    from apex.envs.families import env_shape
    from apex.envs.vector import evaluation_envs
    from apex.learning.evaluation import play_greedy
    from apex.learning.staging import DeviceBatch
    from launch.config import resolve
    from replay import PrioritizedReplay

    name = "tests.memory_env:Cue-v0"
    config = resolve(
        {
            "env": name,
            "algorithm": "r2d2",
            "learner": {"hidden": [32], "learning_rate": 3e-3},
            "actor": {"hidden": [32], "envs_per_actor": 8},
            "r2d2": {
                "sequence_length": 4,
                "sequence_period": 4,
                "burn_in": 0,
                "n_step": 1,
                "lstm_units": 16,
                "target_update_period": 50,
            },
        }
    )
    shape = env_shape(name)
    torch.manual_seed(0)
    learner = build_algorithm(config.learner, config.algorithms, shape, torch.device("cpu"))
    acting = build_acting(config.actor_config(0), config.algorithms, shape)
    spec = acting.transition_spec(shape, config.actor)
    experience = acting.experience(config.actor_config(0), shape, lambda: 1, frame_refs=False)
    store = PrioritizedReplay(spec, capacity=4096, rng=0)
    envs = gym.vector.SyncVectorEnv(
        [lambda: gym.make(name) for _ in range(8)],
        autoreset_mode=gym.vector.AutoresetMode.SAME_STEP,
    )
    rng = np.random.default_rng(0)
    observations, _ = envs.reset(seed=0)
    experience.begin(observations)
    for update in range(400):
        for _ in range(2):  # env steps between updates
            actions = experience.act(observations, np.full(8, 0.3), rng)
            following, rewards, terminated, truncated, info = envs.step(actions)
            final = following.copy()
            ended = terminated | truncated
            if ended.any():
                final[ended] = np.stack(info["final_obs"][ended])
            out = experience.step(
                observations,
                actions,
                rewards.astype(np.float32),
                following,
                final,
                terminated,
                truncated,
            )
            if out is not None:
                sent, priorities = experience.priorities(out, 1e-3)
                store.add(sent, priorities)
            observations = following
        if store.size >= 64:
            sample = store.sample(32, 0.4)
            tensors = {key: torch.as_tensor(value) for key, value in sample.transitions.items()}
            result = learner.step(
                DeviceBatch(tensors, torch.as_tensor(sample.weights).float(), None)
            )
            store.update_priorities(
                sample.indices, sample.generations, result.new_priorities.numpy()
            )
        if update % 25 == 0:
            acting.policy.load({k: v.numpy() for k, v in learner.policy.state_dict().items()})
    acting.policy.load({k: v.numpy() for k, v in learner.policy.state_dict().items()})
    returns = play_greedy(acting.policy, evaluation_envs(name, 50), seed=7)
    assert returns.mean() > 0.8, returns.mean()


@pytest.mark.slow
def test_apex_train_solves_the_cue_with_r2d2_over_sockets(tmp_path) -> None:
    """The whole run: actors send sequences over ZeroMQ to a prioritized shard, the
    learner samples them and sends priorities back, the evaluator plays with its own
    recurrent state; the run ends at its confirmed solve, its progress records carrying
    the stored state's discrepancy. Sequences of 3 with a period of 2 split each 4-step
    episode: the step that pays is learned only in the second, whose stored state is
    all that holds the cue."""
    import subprocess
    import sys
    from pathlib import Path

    from apex.learning.metrics import read_metrics

    run_dir = tmp_path / "cue"
    settings = [
        "algorithm=r2d2",
        "learner.target_return=0.8",
        "learner.confirm_episodes=20",
        "learner.eval_every_steps=2000",
        "learner.eval_episodes=20",
        "learner.hidden=[32]",
        "actor.hidden=[32]",
        "learner.learning_rate=3e-3",
        "learner.batch_size=32",
        "learner.metrics_interval_s=0.5",
        "replay.min_size=64",
        "r2d2.sequence_length=3",
        "r2d2.sequence_period=2",
        "r2d2.burn_in=1",
        "r2d2.n_step=1",
        "r2d2.lstm_units=16",
        "r2d2.target_update_period=50",
    ]
    command = [
        sys.executable,
        "-m",
        "launch",
        "train",
        "--env",
        "tests.memory_env:Cue-v0",
        "--run-dir",
        str(run_dir),
        "--plain",
        "--no-curves",
        "--max-time",
        "120",
        *(part for setting in settings for part in ("--set", setting)),
    ]
    done = subprocess.run(
        command,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        cwd=Path(__file__).parents[1],
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    records = read_metrics(run_dir)
    [end] = [r for r in records if r.get("event") == "end"]
    assert end["reason"] == "solved", done.stdout[-2000:]
    assert end["delivery"]["transitions_lost"] == 0
    # Its replay items are sequences, and the run's lines say so.
    assert "sequences trained: " in done.stdout and " sequences/s | " in done.stdout
    learner_log = (run_dir / "logs" / "learner.log").read_text()
    assert " sequences/s | " in learner_log and "transitions/s" not in learner_log
    measured = [r["stored_state_dq"] for r in records if "stored_state_dq" in r]
    assert measured and all(value >= 0 for value in measured)
