"""Q-networks: a dueling MLP for vector observations and the Nature CNN for images.

Both end in a dueling head, ``Q(s, a) = V(s) + A(s, a) − mean_a A(s, a)`` (Wang et al.
2016). Image observations arrive as uint8 and are scaled to [0, 1] inside ``forward``, on
whatever device the network lives on, so frames travel and are stored as bytes.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import torch
from torch import nn

from apex.algorithms.network_choice import builtin_layout


class DuelingHead(nn.Module):
    """Value and advantage streams over a feature vector."""

    def __init__(self, features: int, hidden: int, actions: int) -> None:
        super().__init__()
        self.value = nn.Sequential(nn.Linear(features, hidden), nn.ReLU(), nn.Linear(hidden, 1))
        self.advantage = nn.Sequential(
            nn.Linear(features, hidden), nn.ReLU(), nn.Linear(hidden, actions)
        )

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        advantage = self.advantage(features)
        return self.value(features) + advantage - advantage.mean(dim=1, keepdim=True)


def nature_torso(channels: int) -> nn.Sequential:
    """The DQN Nature convolutions over ``(c, 84, 84)``: 3,136 features."""
    return nn.Sequential(
        nn.Conv2d(channels, 32, kernel_size=8, stride=4),
        nn.ReLU(),
        nn.Conv2d(32, 64, kernel_size=4, stride=2),
        nn.ReLU(),
        nn.Conv2d(64, 64, kernel_size=3, stride=1),
        nn.ReLU(),
        nn.Flatten(),
    )


def minatar_torso(channels: int) -> nn.Sequential:
    """The MinAtar paper's convolution over ``(c, 10, 10)``: 1,024 features."""
    return nn.Sequential(nn.Conv2d(channels, 16, kernel_size=3, stride=1), nn.ReLU(), nn.Flatten())


class DuelingMLP(nn.Module):
    """MLP torso plus dueling head, for observations of shape ``(d,)``.

    Args:
        observation_size: ``d``.
        actions: number of discrete actions.
        hidden: widths of the torso's layers; the head's hidden layer uses the last width.
    """

    def __init__(self, observation_size: int, actions: int, hidden: Sequence[int] = (256, 256)):
        super().__init__()
        layers: list[nn.Module] = []
        width = observation_size
        for size in hidden[:-1]:
            layers += [nn.Linear(width, size), nn.ReLU()]
            width = size
        self.torso = nn.Sequential(*layers)
        self.head = DuelingHead(width, hidden[-1], actions)

    def forward(self, observations: torch.Tensor) -> torch.Tensor:
        return self.head(self.torso(observations.float()))


class NatureCNN(nn.Module):
    """The DQN Nature torso (Mnih et al. 2015) plus dueling head, for ``(c, 84, 84)`` uint8.

    Args:
        channels: stacked frames ``c``.
        actions: number of discrete actions.
    """

    def __init__(self, channels: int, actions: int) -> None:
        super().__init__()
        self.torso = nature_torso(channels)
        self.head = DuelingHead(64 * 7 * 7, 512, actions)

    def forward(self, observations: torch.Tensor) -> torch.Tensor:
        return self.head(self.torso(observations.float() / 255.0))


class MinAtarCNN(nn.Module):
    """The MinAtar paper's network (Young & Tian 2019): one 3x3 convolution of 16 channels
    and a 128-unit layer, here as a dueling head, for ``(10, 10, c)`` uint8 planes
    (channels last, as MinAtar gives them).

    Args:
        channels: object planes ``c``.
        actions: number of discrete actions.
    """

    def __init__(self, channels: int, actions: int) -> None:
        super().__init__()
        self.torso = minatar_torso(channels)
        self.head = DuelingHead(16 * 8 * 8, 128, actions)

    def forward(self, observations: torch.Tensor) -> torch.Tensor:
        return self.head(self.torso(observations.float().permute(0, 3, 1, 2)))


def build_network(
    observation_shape: Sequence[int], actions: int, hidden: Sequence[int]
) -> nn.Module:
    """The network that fits an observation shape: the Nature CNN for ``(c, 84, 84)``, the
    MinAtar CNN for ``(10, 10, c)``, the MLP for ``(d,)``.

    Raises:
        ValueError: an observation shape that neither network takes.
    """
    shape, layout = tuple(observation_shape), builtin_layout(observation_shape)
    if layout == "frames":
        return NatureCNN(shape[0], actions)
    if layout == "planes":
        return MinAtarCNN(shape[2], actions)
    if layout == "vector":
        return DuelingMLP(shape[0], actions, hidden)
    raise ValueError(f"no network for observations of shape {shape}: use (d,), (c, 84, 84) "
                     "or (10, 10, c)")  # fmt: skip


def mlp(sizes: Sequence[int]) -> nn.Sequential:
    """Linear layers of ``sizes`` with ReLU between them (none after the last)."""
    layers: list[nn.Module] = []
    for index, (fan_in, fan_out) in enumerate(itertools.pairwise(sizes)):
        layers.append(nn.Linear(fan_in, fan_out))
        if index < len(sizes) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


class DeterministicPolicy(nn.Module):
    """DPG's policy: an MLP whose tanh output is scaled into the action bounds.

    The bounds are buffers, so they travel in the ``state_dict`` with the weights and an
    actor's numpy copy needs nothing else to act.
    """

    def __init__(self, observation_size: int, low, high, hidden: Sequence[int]) -> None:
        super().__init__()
        low, high = (
            torch.as_tensor(low, dtype=torch.float32),
            torch.as_tensor(high, dtype=torch.float32),
        )
        self.net = mlp([observation_size, *hidden, low.numel()])
        self.register_buffer("scale", (high - low) / 2)
        self.register_buffer("offset", (high + low) / 2)

    def forward(self, observations: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.net(observations.float())) * self.scale + self.offset


class Critic(nn.Module):
    """Q(s, a): an MLP over the observation and the action side by side."""

    def __init__(self, observation_size: int, action_size: int, hidden: Sequence[int]) -> None:
        super().__init__()
        self.net = mlp([observation_size + action_size, *hidden, 1])

    def forward(self, observations: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        return self.net(torch.cat([observations.float(), actions], dim=1)).squeeze(1)


class ActorCritic(nn.Module):
    """What DPG publishes to its actors: the policy they act with and the critic they
    give their transitions' initial priorities with (Ape-X DPG computes them actor-side,
    as Ape-X DQN does). Calling it is the policy."""

    def __init__(self, observation_size: int, low, high, hidden: Sequence[int]) -> None:
        super().__init__()
        self.policy = DeterministicPolicy(observation_size, low, high, hidden)
        self.critic = Critic(observation_size, len(low), hidden)

    def forward(self, observations: torch.Tensor) -> torch.Tensor:
        return self.policy(observations)


class PolicyValueNet(nn.Module):
    """IMPALA's network: a torso, then policy logits and a state value side by side.

    The torso is the one its observations take elsewhere here: the Nature convolutions
    and 512 units for ``(c, 84, 84)``, the MinAtar convolution and 128 units for
    ``(10, 10, c)``, an MLP of ``hidden`` for ``(d,)``.

    Raises:
        ValueError: an observation shape no torso takes.
    """

    def __init__(
        self, observation_shape: Sequence[int], actions: int, hidden: Sequence[int]
    ) -> None:
        super().__init__()
        shape, self._layout = tuple(observation_shape), builtin_layout(observation_shape)
        if self._layout == "frames":
            convolutions, width = nature_torso(shape[0]), 512
            self.torso = nn.Sequential(*convolutions, nn.Linear(64 * 7 * 7, width), nn.ReLU())
        elif self._layout == "planes":
            convolutions, width = minatar_torso(shape[2]), 128
            self.torso = nn.Sequential(*convolutions, nn.Linear(16 * 8 * 8, width), nn.ReLU())
        elif self._layout == "vector":
            width = hidden[-1]
            self.torso = nn.Sequential(*mlp([shape[0], *hidden]), nn.ReLU())
        else:
            raise ValueError(f"no network for observations of shape {shape}: use (d,), "
                             "(c, 84, 84) or (10, 10, c)")  # fmt: skip
        self.policy = nn.Linear(width, actions)
        self.value = nn.Linear(width, 1)

    def forward(self, observations: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Logits ``[B, actions]`` and values ``[B]``."""
        if self._layout == "frames":
            inputs = observations.float() / 255.0
        elif self._layout == "planes":
            inputs = observations.float().permute(0, 3, 1, 2)
        else:
            inputs = observations.float()
        features = self.torso(inputs)
        return self.policy(features), self.value(features).squeeze(1)


def user_network(entry_point: str, observation_shape: Sequence[int], observation_dtype,
                 actions: int) -> nn.Module:  # fmt: skip
    """A user's network (``learner.network``): the factory ``entry_point`` names, called
    with the observation space as the replay stores it (a ``Box`` of its shape and dtype:
    [0, 255] for uint8, unbounded else) and the ``Discrete`` action space.

    Raises:
        ValueError: the factory cannot be loaded, raised, or returned no torch module.
    """
    import gymnasium as gym
    import numpy as np

    from apex.envs.user_code import load_entry_point

    factory = load_entry_point(entry_point, "learner.network")
    dtype = np.dtype(observation_dtype)
    low, high = (0, 255) if dtype == np.uint8 else (-np.inf, np.inf)
    observations = gym.spaces.Box(low, high, tuple(observation_shape), dtype)
    try:
        network = factory(observations, gym.spaces.Discrete(actions))
    except Exception as exc:  # a user's code: any error refuses the network, said once
        raise ValueError(f"learner.network {entry_point!r} raised {type(exc).__name__}: "
                         f"{exc}") from exc  # fmt: skip
    if not isinstance(network, nn.Module):
        raise ValueError(f"learner.network {entry_point!r} returned a "
                         f"{type(network).__name__}, not a torch.nn.Module")  # fmt: skip
    return network


def output_problems(network: nn.Module, observation_shape: Sequence[int], observation_dtype,
                    actions: int, outputs: str) -> list[str]:  # fmt: skip
    """What is wrong with ``network``'s answer to two observations: ``outputs`` "q" (a
    tensor ``[2, actions]``) or "logits and values" (``[2, actions]`` and ``[2]``)."""
    import numpy as np

    batch = torch.from_numpy(np.zeros((2, *observation_shape), dtype=observation_dtype))
    try:
        with torch.no_grad():
            answer = network(batch)
    except Exception as exc:  # a user's code: its failure is the problem reported
        return [f"learner.network failed on a batch of 2 observations of shape "
                f"{tuple(observation_shape)}: {type(exc).__name__}: {exc}"]  # fmt: skip
    wanted = ((2, actions),) if outputs == "q" else ((2, actions), (2,))
    got = answer if isinstance(answer, tuple) else (answer,)
    shapes = tuple(tuple(part.shape) if isinstance(part, torch.Tensor) else type(part).__name__
                   for part in got)  # fmt: skip
    if shapes != wanted:
        return [
            f"learner.network gives {' and '.join(map(str, shapes))} for 2 observations; "
            f"this algorithm needs {outputs} of {' and '.join(map(str, wanted))}"
        ]
    return []


def user_network_problems(entry_point: str, shape, outputs: str) -> list[str]:
    """Whether a user's network (``learner.network``) builds for an env of ``shape``
    (``EnvShape``) and gives ``outputs`` (:func:`output_problems`)."""
    try:
        network = user_network(entry_point, shape.observation_shape, shape.observation_dtype,
                               shape.actions)  # fmt: skip
    except ValueError as exc:
        return [str(exc)]
    return output_problems(network, shape.observation_shape, shape.observation_dtype,
                           shape.actions, outputs)  # fmt: skip
