"""The built-in networks: Q-networks (a dueling MLP for vectors, convolutions sized to
an image), DPG's policy and critic, IMPALA's policy-value network, and a user's own.

Q-networks end in a dueling head, ``Q(s, a) = V(s) + A(s, a) − mean_a A(s, a)`` (Wang et
al. 2016). Image observations arrive as uint8 and are scaled to [0, 1] inside ``forward``,
on whatever device the network lives on, so frames travel and are stored as bytes.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import torch
from torch import nn

from apex.algorithms.network_choice import ImageLayout, builtin_layout, image_layout


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


def image_torso(layout: ImageLayout) -> nn.Sequential:
    """The convolutions ``layout`` gets (``apex.algorithms.network_choice``), flattened to
    ``layout.features``."""
    if layout.torso == "grid":
        layers = [nn.Conv2d(layout.channels, 16, kernel_size=3, stride=1), nn.ReLU()]
    else:
        layers = [
            nn.Conv2d(layout.channels, 32, kernel_size=8, stride=4),
            nn.ReLU(),
            nn.Conv2d(32, 64, kernel_size=4, stride=2),
            nn.ReLU(),
            nn.Conv2d(64, 64, kernel_size=3, stride=1),
            nn.ReLU(),
        ]
    if layout.pooled() is not None:
        layers.append(nn.AdaptiveAvgPool2d(layout.pooled()))
    return nn.Sequential(*layers, nn.Flatten())


def image_input(observations: torch.Tensor, layout: ImageLayout) -> torch.Tensor:
    """A batch of uint8 images as the convolutions take them: float, ``[B, c, h, w]``, in
    [0, 1]. Decided by ``layout`` alone (no branch on the tensor: FX traces it for int8)."""
    inputs = observations.float()
    if layout.rank == 2:
        inputs = inputs.unsqueeze(1)
    elif layout.channels_last:
        inputs = inputs.permute(0, 3, 1, 2)
    return inputs if layout.high == 1.0 else inputs / layout.high


def checked_layout(observation_shape: Sequence[int], observation_high: float) -> ImageLayout:
    layout = image_layout(observation_shape, observation_high)
    if layout is None:
        raise ValueError(
            f"no network for observations of shape {tuple(observation_shape)}: "
            "use (d,) vectors or uint8 images of 4x4 and up"
        )
    return layout


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


class ImageQNetwork(nn.Module):
    """Convolutions sized to the image (``apex.algorithms.network_choice``'s rule) plus a
    dueling head: the Nature CNN (Mnih et al. 2015) for ``(4, 84, 84)`` frame stacks, the
    MinAtar network (Young & Tian 2019) for ``(10, 10, c)`` planes.

    Args:
        layout: how the observations are read (``image_layout``).
        actions: number of discrete actions.
    """

    def __init__(self, layout: ImageLayout, actions: int) -> None:
        super().__init__()
        self.layout = layout
        self.torso = image_torso(layout)
        self.head = DuelingHead(layout.features, layout.hidden, actions)

    def forward(self, observations: torch.Tensor) -> torch.Tensor:
        return self.head(self.torso(image_input(observations, self.layout)))


def build_network(
    observation_shape: Sequence[int],
    actions: int,
    hidden: Sequence[int],
    observation_high: float = 255.0,
) -> nn.Module:
    """The Q-network that fits an observation shape: the MLP for ``(d,)``, convolutions
    for uint8 images (``observation_high``: the value that means 1.0).

    Raises:
        ValueError: an observation shape that no built-in network takes.
    """
    if builtin_layout(observation_shape) == "vector":
        return DuelingMLP(observation_shape[0], actions, hidden)
    return ImageQNetwork(checked_layout(observation_shape, observation_high), actions)


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


def feature_torso(
    observation_shape: Sequence[int], hidden: Sequence[int], observation_high: float = 255.0
) -> tuple[nn.Sequential, int, ImageLayout | None]:
    """Layers that give an observation's features, their count, and the image layout they
    read (None: a vector): an MLP of ``hidden`` (ReLU after each layer) for ``(d,)``
    vectors; for uint8 images the convolutions of ``apex.algorithms.network_choice``'s
    rule and their hidden layer (512 units after the Nature convolutions, 128 after the
    MinAtar one). What IMPALA's and R2D2's networks stand on; :func:`torso_input` makes
    their input.

    Raises:
        ValueError: an observation shape no torso takes.
    """
    if builtin_layout(observation_shape) == "vector":
        return nn.Sequential(*mlp([observation_shape[0], *hidden]), nn.ReLU()), hidden[-1], None
    layout = checked_layout(observation_shape, observation_high)
    convolutions = image_torso(layout)
    layers = nn.Sequential(*convolutions, nn.Linear(layout.features, layout.hidden), nn.ReLU())
    return layers, layout.hidden, layout


def torso_input(observations: torch.Tensor, layout: ImageLayout | None) -> torch.Tensor:
    """Observations as :func:`feature_torso`'s layers take them."""
    return observations.float() if layout is None else image_input(observations, layout)


class PolicyValueNet(nn.Module):
    """IMPALA's network: a torso, then policy logits and a state value side by side.

    The torso is :func:`feature_torso`'s.

    Raises:
        ValueError: an observation shape no torso takes.
    """

    def __init__(
        self,
        observation_shape: Sequence[int],
        actions: int,
        hidden: Sequence[int],
        observation_high: float = 255.0,
    ) -> None:
        super().__init__()
        self.torso, width, self.layout = feature_torso(observation_shape, hidden, observation_high)
        self.policy = nn.Linear(width, actions)
        self.value = nn.Linear(width, 1)

    def forward(self, observations: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Logits ``[B, actions]`` and values ``[B]``."""
        features = self.torso(torso_input(observations, self.layout))
        return self.policy(features), self.value(features).squeeze(1)


def user_network(
    entry_point: str, observation_shape: Sequence[int], observation_dtype, actions: int
) -> nn.Module:
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
        raise ValueError(
            f"learner.network {entry_point!r} raised {type(exc).__name__}: {exc}"
        ) from exc
    if not isinstance(network, nn.Module):
        raise ValueError(
            f"learner.network {entry_point!r} returned a "
            f"{type(network).__name__}, not a torch.nn.Module"
        )
    return network


def output_problems(
    network: nn.Module,
    observation_shape: Sequence[int],
    observation_dtype,
    actions: int,
    outputs: str,
) -> list[str]:
    """What is wrong with ``network``'s answer to two observations: ``outputs`` "q" (a
    tensor ``[2, actions]``) or "logits and values" (``[2, actions]`` and ``[2]``)."""
    import numpy as np

    batch = torch.from_numpy(np.zeros((2, *observation_shape), dtype=observation_dtype))
    try:
        with torch.no_grad():
            answer = network(batch)
    except Exception as exc:  # a user's code: its failure is the problem reported
        return [
            f"learner.network failed on a batch of 2 observations of shape "
            f"{tuple(observation_shape)}: {type(exc).__name__}: {exc}"
        ]
    wanted = ((2, actions),) if outputs == "q" else ((2, actions), (2,))
    got = answer if isinstance(answer, tuple) else (answer,)
    shapes = tuple(
        tuple(part.shape) if isinstance(part, torch.Tensor) else type(part).__name__ for part in got
    )
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
        network = user_network(
            entry_point, shape.observation_shape, shape.observation_dtype, shape.actions
        )
    except ValueError as exc:
        return [str(exc)]
    return output_problems(
        network, shape.observation_shape, shape.observation_dtype, shape.actions, outputs
    )
