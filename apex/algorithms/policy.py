"""What an actor acts with: Q-values for a batch of observations, as numpy arrays.

Vector observations get the dueling MLP's forward pass in numpy. An actor then never
imports torch: it starts in 0.43 s instead of 1.65 s, holds about 106 MB instead of about
400 MB, and a forward pass over a handful of observations costs a few BLAS calls instead
of torch's per-operator dispatch (24 against 95 µs for one observation). Image
observations keep the torch convolutional networks, in int8 where the run asks for it
(``actor.acting_precision``, ``apex.algorithms.int8_policy``).

Both policies take the learner's weights by the names and shapes of its ``state_dict``,
as :class:`apex.weights.WeightSubscriber` delivers them.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from torch import nn

logger = logging.getLogger(__name__)


def _linear_init(rng: np.random.Generator, fan_in: int, fan_out: int):
    """Weights and bias drawn as torch's ``nn.Linear`` draws them (±1/√fan_in)."""
    bound = 1.0 / np.sqrt(fan_in)
    weight = rng.uniform(-bound, bound, (fan_out, fan_in)).astype(np.float32)
    return weight, rng.uniform(-bound, bound, fan_out).astype(np.float32)


class NumpyParameters:
    """What every numpy policy shares: its parameters by the torch module's ``state_dict``
    names, loaded as float32, after which ``_prepare`` lays them out for the forward pass."""

    _parameters: dict[str, np.ndarray]

    def _prepare(self) -> None:
        raise NotImplementedError

    def parameter_shapes(self) -> dict[str, tuple[int, ...]]:
        return {name: array.shape for name, array in self._parameters.items()}

    def arrays(self) -> dict[str, np.ndarray]:
        """The weights it holds, by ``state_dict`` name (copies)."""
        return {name: array.copy() for name, array in self._parameters.items()}

    def load(self, arrays: Mapping[str, np.ndarray]) -> None:
        """Takes new weights (names and shapes already checked by the caller)."""
        for name, array in arrays.items():
            self._parameters[name] = np.asarray(array, dtype=np.float32)
        self._prepare()


class NumpyDuelingMLP(NumpyParameters):
    """:class:`apex.algorithms.networks.DuelingMLP`'s forward pass in float32 numpy.

    Parameter names, order and shapes are the torch module's, so the learner's published
    ``state_dict`` loads as is. Before the first weights arrive it acts with weights drawn
    as torch's ``nn.Linear`` draws them (uniform within ±1/√fan_in).
    """

    def __init__(
        self, observation_size: int, actions: int, hidden: Sequence[int], seed: int
    ) -> None:
        widths = [observation_size, *hidden[:-1]]
        layers = [(f"torso.{2 * i}", widths[i], widths[i + 1]) for i in range(len(widths) - 1)]
        for stream, outputs in (("value", 1), ("advantage", actions)):
            layers.append((f"head.{stream}.0", widths[-1], hidden[-1]))
            layers.append((f"head.{stream}.2", hidden[-1], outputs))
        rng = np.random.default_rng(seed)
        self._parameters: dict[str, np.ndarray] = {}
        for prefix, fan_in, fan_out in layers:
            self._parameters[f"{prefix}.weight"], self._parameters[f"{prefix}.bias"] = _linear_init(
                rng, fan_in, fan_out
            )
        self._torso = [prefix for prefix, _, _ in layers if prefix.startswith("torso.")]
        self._prepare()

    def _prepare(self) -> None:
        # Transposed once per load, contiguous, so every forward pass is plain x @ W.
        p = self._parameters
        self._torso_layers = [
            (np.ascontiguousarray(p[f"{prefix}.weight"].T), p[f"{prefix}.bias"])
            for prefix in self._torso
        ]
        # Both head streams' hidden layers side by side: one matmul instead of two.
        self._head_hidden = (
            np.ascontiguousarray(
                np.concatenate([p["head.value.0.weight"], p["head.advantage.0.weight"]]).T
            ),
            np.concatenate([p["head.value.0.bias"], p["head.advantage.0.bias"]]),
        )
        self._value_out = (np.ascontiguousarray(p["head.value.2.weight"].T), p["head.value.2.bias"])
        self._advantage_out = (
            np.ascontiguousarray(p["head.advantage.2.weight"].T),
            p["head.advantage.2.bias"],
        )

    def q_values(self, observations: np.ndarray) -> np.ndarray:
        """Q(s, ·) for observations of shape (batch, d); float32 (batch, actions)."""
        x = np.asarray(observations, dtype=np.float32)
        for weight, bias in self._torso_layers:
            x = np.maximum(x @ weight + bias, 0.0)
        hidden = np.maximum(x @ self._head_hidden[0] + self._head_hidden[1], 0.0)
        width = hidden.shape[1] // 2
        value = hidden[:, :width] @ self._value_out[0] + self._value_out[1]
        advantage = hidden[:, width:] @ self._advantage_out[0] + self._advantage_out[1]
        return value + advantage - advantage.mean(axis=1, keepdims=True)


def _mlp_forward(layers: list[tuple[np.ndarray, np.ndarray]], x: np.ndarray) -> np.ndarray:
    for index, (weight, bias) in enumerate(layers):
        x = x @ weight + bias
        if index < len(layers) - 1:
            x = np.maximum(x, 0.0)
    return x


class NumpyActorCritic(NumpyParameters):
    """:class:`apex.algorithms.networks.ActorCritic` in float32 numpy: the DPG policy the actor acts
    with, and the critic it computes initial priorities with.

    Names, order and shapes are the torch module's ``state_dict``'s (the bounds travel as
    the policy's ``scale`` and ``offset`` buffers), so the published weights load as is.
    """

    def __init__(
        self,
        observation_size: int,
        low: Sequence[float],
        high: Sequence[float],
        hidden: Sequence[int],
        seed: int,
    ) -> None:
        low, high = np.asarray(low, np.float32), np.asarray(high, np.float32)
        rng = np.random.default_rng(seed)
        p: dict[str, np.ndarray] = {
            "policy.scale": (high - low) / 2,
            "policy.offset": (high + low) / 2,
        }
        for net, sizes in (
            ("policy.net", [observation_size, *hidden, low.size]),
            ("critic.net", [observation_size + low.size, *hidden, 1]),
        ):
            for i, (fan_in, fan_out) in enumerate(itertools.pairwise(sizes)):
                p[f"{net}.{2 * i}.weight"], p[f"{net}.{2 * i}.bias"] = _linear_init(
                    rng, fan_in, fan_out
                )
        self._parameters = p
        self._prepare()

    def _prepare(self) -> None:
        def layers(net: str) -> list[tuple[np.ndarray, np.ndarray]]:
            count = sum(1 for n in self._parameters if n.startswith(net) and n.endswith(".weight"))
            return [
                (
                    np.ascontiguousarray(self._parameters[f"{net}.{2 * i}.weight"].T),
                    self._parameters[f"{net}.{2 * i}.bias"],
                )
                for i in range(count)
            ]

        self._policy, self._critic = layers("policy.net"), layers("critic.net")
        self.scale, self.offset = (
            self._parameters["policy.scale"],
            self._parameters["policy.offset"],
        )

    def actions(self, observations: np.ndarray) -> np.ndarray:
        """π(s) for observations of shape (batch, d); float32 (batch, action size)."""
        x = np.asarray(observations, dtype=np.float32)
        return np.tanh(_mlp_forward(self._policy, x)) * self.scale + self.offset

    def q(self, observations: np.ndarray, actions: np.ndarray) -> np.ndarray:
        """Q1(s, a) of the published critic; float32 (batch,)."""
        x = np.concatenate([np.asarray(observations, np.float32), actions.astype(np.float32)], 1)
        return _mlp_forward(self._critic, x)[:, 0]


class NumpyPolicyValueMLP(NumpyParameters):
    """:class:`apex.algorithms.networks.PolicyValueNet` for ``(d,)`` observations in float32 numpy:
    policy logits and state values, by the torch module's ``state_dict`` names."""

    def __init__(
        self, observation_size: int, actions: int, hidden: Sequence[int], seed: int
    ) -> None:
        rng = np.random.default_rng(seed)
        p: dict[str, np.ndarray] = {}
        sizes = [observation_size, *hidden]
        for i, (fan_in, fan_out) in enumerate(itertools.pairwise(sizes)):
            layer = f"torso.{2 * i}"
            p[f"{layer}.weight"], p[f"{layer}.bias"] = _linear_init(rng, fan_in, fan_out)
        p["policy.weight"], p["policy.bias"] = _linear_init(rng, hidden[-1], actions)
        p["value.weight"], p["value.bias"] = _linear_init(rng, hidden[-1], 1)
        self._parameters = p
        self._layers = len(hidden)
        self._prepare()

    def _prepare(self) -> None:
        p = self._parameters
        layers = [f"torso.{2 * i}" for i in range(self._layers)]
        self._torso = [
            (np.ascontiguousarray(p[f"{layer}.weight"].T), p[f"{layer}.bias"]) for layer in layers
        ]
        # Logits and value from one matmul: the value is the last column.
        self._heads = (
            np.ascontiguousarray(np.concatenate([p["policy.weight"], p["value.weight"]]).T),
            np.concatenate([p["policy.bias"], p["value.bias"]]),
        )

    def logits_and_values(self, observations: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Logits ``(batch, actions)`` and values ``(batch,)``, float32."""
        x = np.asarray(observations, dtype=np.float32)
        for weight, bias in self._torso:
            x = np.maximum(x @ weight + bias, 0.0)
        out = x @ self._heads[0] + self._heads[1]
        return out[:, :-1], out[:, -1]


class TorchPolicy:
    """A torch network (the convolutional ones, for images) behind the numpy policies'
    methods: ``q_values`` for a Q-network, ``logits_and_values`` for a policy-value one.

    Args:
        build: makes the network (called after seeding torch with ``seed``).
        seed: torch's seed for the initial weights.
        threads: torch's intra-op threads.
    """

    def __init__(self, build: Callable[[], nn.Module], seed: int, threads: int) -> None:
        import torch

        torch.set_num_threads(threads)
        torch.manual_seed(seed)
        self._torch = torch
        self.network = build()
        self.network.eval()

    def parameter_shapes(self) -> dict[str, tuple[int, ...]]:
        return {name: tuple(t.shape) for name, t in self.network.state_dict().items()}

    def arrays(self) -> dict[str, np.ndarray]:
        """The weights it holds, by ``state_dict`` name (copies)."""
        return {name: t.numpy().copy() for name, t in self.network.state_dict().items()}

    def load(self, arrays: Mapping[str, np.ndarray]) -> None:
        self.network.load_state_dict(
            {name: self._torch.from_numpy(np.array(array)) for name, array in arrays.items()}
        )

    def _forward(self, observations: np.ndarray):
        with self._torch.no_grad():
            return self.network(self._torch.from_numpy(observations))

    def q_values(self, observations: np.ndarray) -> np.ndarray:
        return self._forward(observations).numpy()

    def logits_and_values(self, observations: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        logits, values = self._forward(observations)
        return logits.numpy(), values.numpy()


def _numpy_or_torch(numpy_class, torch_network: Callable):
    """A builder of a policy: ``numpy_class`` for ``(d,)`` observations, else
    ``torch_network(observation_shape, actions, hidden, observation_high)`` behind
    :class:`TorchPolicy`; ``network``, where given, builds a user's network in its place."""

    def build(
        observation_shape: Sequence[int],
        actions: int,
        hidden: Sequence[int],
        seed: int,
        torch_threads: int = 1,
        precision: str = "float32",
        requantize_every: int = 1,
        network: Callable[[], nn.Module] | None = None,
        observation_high: float = 255.0,
    ):
        if network is not None:  # a user's (learner.network): in torch, in float
            return TorchPolicy(network, seed, torch_threads)
        if len(observation_shape) == 1:
            return numpy_class(observation_shape[0], actions, hidden, seed)

        def network():
            return torch_network(observation_shape, actions, hidden, observation_high)

        policy = TorchPolicy(network, seed, torch_threads)
        if precision != "int8":
            return policy
        from apex.algorithms.int8_policy import Int8Policy, int8_available

        if tuple(observation_shape[1:]) != (84, 84):
            # Measured only for the Nature convolutions; the MinAtar network is cheap in
            # float and lost half its Q spread to int8 in a trial.
            logger.warning("int8 acting is for 84x84 frames: acting in float32")
            return policy
        if not int8_available():
            logger.warning("this torch has no x86 int8 backend: acting in float32")
            return policy
        example = np.zeros((1, *observation_shape), dtype=np.uint8)
        return Int8Policy(policy, example, requantize_every)

    return build


def user_network_factory(entry_point: str, shape) -> Callable[[], nn.Module] | None:
    """What builds a user's network (``learner.network``) for an env of ``shape``
    (``apex.envs.families.EnvShape``); None for ""."""
    if not entry_point:
        return None

    def build() -> nn.Module:
        from apex.algorithms.networks import user_network  # torch: a user's network only

        return user_network(
            entry_point, shape.observation_shape, shape.observation_dtype, shape.actions
        )

    return build


def network_or_builtin(entry_point: str, shape, builtin: Callable[[], nn.Module]) -> nn.Module:
    """A user's network (``learner.network``, for an env of ``shape``), or ``builtin()``
    where there is none."""
    user = user_network_factory(entry_point, shape)
    return builtin() if user is None else user()


def _q_network(observation_shape, actions: int, hidden, observation_high: float):
    from apex.algorithms.networks import build_network  # torch: image policies only

    return build_network(observation_shape, actions, hidden, observation_high)


def _policy_value_network(observation_shape, actions: int, hidden, observation_high: float):
    from apex.algorithms.networks import PolicyValueNet  # torch: image policies only

    return PolicyValueNet(observation_shape, actions, hidden, observation_high)


# A Q-network (DQN): the numpy dueling MLP, or torch's convolutional network that fits.
build_policy = _numpy_or_torch(NumpyDuelingMLP, _q_network)
# A policy-value network (IMPALA).
build_policy_value = _numpy_or_torch(NumpyPolicyValueMLP, _policy_value_network)
