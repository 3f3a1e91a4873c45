"""An actor's convolutional network in int8: the same forward pass at about three times the
speed on one CPU core (``apex bench actor``), for actors of image policies.

Static quantization (torch's FX graph mode, the x86 backend): weights per output channel
and activations per tensor in 8 bits, the activations' ranges calibrated on observations
the actor has just seen. A full quantization (calibration and conversion) costs about
0.3 s of CPU, so it is done at the first forward pass, once the calibration rows are
full, and then for every ``RECALIBRATE_SWAPS``-th set of weights; the sets between only
have their weights quantized again (per channel, as the conversion does: about 35 ms for
the Nature CNN) and keep the activation ranges of the last calibration, which move little
between the learner's successive weights.

An actor reads weights whenever they arrive (up to 20 times a second), and a learner may
publish that often: quantizing each set would cost most of a core. So new weights are
quantized at most once every ``requantize_every`` forward passes (the actor's
``weight_refresh_steps``, Ape-X's cadence of copying the learner's parameters); between,
the int8 network acts on the last weights it quantized.

What it changes is checked where it matters, in the greedy actions: ``tests/test_policy``
compares them with the float network's on real frames, and ``apex bench actor`` reports
the share that agree and the largest Q-value difference, per case.
"""

from __future__ import annotations

import contextlib
import copy
import operator
import warnings
from collections.abc import Iterator, Mapping

import numpy as np
import torch

# Observations kept for calibration: one row of each forward pass (each env copy's in
# turn), this many. Weights are quantized again once the first full set is in.
CALIBRATION_ROWS = 64
# Weight swaps between full calibrations.
RECALIBRATE_SWAPS = 32


def int8_available() -> bool:
    """Whether this torch has the x86 quantized backend and FX graph mode."""
    try:
        from torch.ao.quantization import quantize_fx  # noqa: F401
    except ImportError:
        return False
    return "x86" in torch.backends.quantized.supported_engines


@contextlib.contextmanager
def _no_stack_traces() -> Iterator[None]:
    """FX tracing without a Python stack trace kept on each graph node: the quantization
    tracer records them for debugging, and the first trace in a process spent about 2.4 s
    of an actor's start symbolizing them (a Nature CNN's first ``Int8Policy``: 2.61 s
    with them, 0.23 s without)."""
    try:
        import torch.fx.config as fx_config
    except ImportError:  # an older torch, which records none
        fx_config = None
    before = getattr(fx_config, "do_not_emit_stack_traces", None)
    if before is None:
        yield
        return
    fx_config.do_not_emit_stack_traces = True
    try:
        yield
    finally:
        fx_config.do_not_emit_stack_traces = before


class Int8Policy:
    """A :class:`apex.algorithms.policy.TorchPolicy` whose forward passes run quantized (it builds
    this one, so this module does not import it).

    Args:
        float_policy: the float policy; it takes the weights.
        example: one observation batch, to trace the network with.
        requantize_every: forward passes between quantizations of new weights, at least.
    """

    def __init__(self, float_policy, example: np.ndarray, requantize_every: int = 1) -> None:
        from torch.ao.quantization import get_default_qconfig_mapping
        from torch.ao.quantization.quantize_fx import prepare_fx

        torch.backends.quantized.engine = "x86"
        self._float = float_policy
        network = float_policy.network
        # The arithmetic after the last layers (the dueling head's V + A − mean A) stays
        # in float: it is a few numbers a row, and quantized adds that broadcast resize
        # their outputs (torch warns on every call).
        mapping = get_default_qconfig_mapping("x86")
        self._weight_observer = mapping.global_qconfig.weight
        for arithmetic in (operator.add, operator.sub, torch.add, torch.sub, "mean"):
            mapping.set_object_type(arithmetic, None)
        with warnings.catch_warnings(), _no_stack_traces():
            warnings.simplefilter("ignore")  # FX graph mode announces its successor, torchao
            self._observed = prepare_fx(
                copy.deepcopy(network), mapping, example_inputs=(torch.from_numpy(example),)
            )
        # The observed graph fuses modules (a convolution and its ReLU): their weights
        # live one level down ("torso.0.0.weight" for the float "torso.0.weight").
        sources = network.state_dict()
        self._names: dict[str, str] = {}
        for name, tensor in self._observed.state_dict().items():
            if "activation_post_process" in name:
                continue
            module, _, field = name.rpartition(".")
            source = name if name in sources else f"{module.removesuffix('.0')}.{field}"
            if source not in sources or sources[source].shape != tensor.shape:
                raise ValueError(f"the observed graph's {name} matches no float parameter")
            self._names[name] = source
        if len(self._names) != len(sources):
            raise ValueError("the observed graph does not hold every float parameter")
        self._rows = np.zeros((CALIBRATION_ROWS, *example.shape[1:]), dtype=example.dtype)
        self._row_count = 0
        self._quantized: torch.nn.Module | None = None
        self._calibrated_on = 0
        self._swaps_since_calibration = 0
        self._requantize_every = requantize_every
        self._forwards_since_quantized = 0
        self._new_weights = False
        self.quantizations = 0
        self.weight_swaps = 0

    def parameter_shapes(self) -> dict[str, tuple[int, ...]]:
        return self._float.parameter_shapes()

    def arrays(self) -> dict[str, np.ndarray]:
        return self._float.arrays()

    def load(self, arrays: Mapping[str, np.ndarray]) -> None:
        self._float.load(arrays)
        self._new_weights = True

    def q_values(self, observations: np.ndarray) -> np.ndarray:
        return self._forward(observations).numpy()

    def logits_and_values(self, observations: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        logits, values = self._forward(observations)
        return logits.numpy(), values.numpy()

    def _forward(self, observations: np.ndarray):
        self._keep(observations)
        self._forwards_since_quantized += 1
        due = self._new_weights and self._forwards_since_quantized >= self._requantize_every
        if (
            self._quantized is None
            or self._calibrated_on < CALIBRATION_ROWS <= self._row_count
            or (due and self._swaps_since_calibration + 1 >= RECALIBRATE_SWAPS)
        ):
            self._quantized = self._quantize()
        elif due:
            self._swap_weights()
        with torch.no_grad():
            return self._quantized(torch.from_numpy(observations))

    def _keep(self, observations: np.ndarray) -> None:
        if len(observations):
            row = observations[self._row_count % len(observations)]
            self._rows[self._row_count % CALIBRATION_ROWS] = row
            self._row_count += 1

    def _quantize(self) -> torch.nn.Module:
        from torch.ao.quantization.quantize_fx import convert_fx

        observed = copy.deepcopy(self._observed)  # observers that have seen nothing yet
        weights = self._float.network.state_dict()
        observed.load_state_dict(
            {name: weights[source] for name, source in self._names.items()}, strict=False
        )
        self._calibrated_on = min(self._row_count, CALIBRATION_ROWS)
        with torch.no_grad():
            observed(torch.from_numpy(self._rows[: self._calibrated_on]))
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                quantized = convert_fx(observed)
        self.quantizations += 1
        self._swaps_since_calibration = 0
        self._forwards_since_quantized = 0
        self._new_weights = False
        return quantized

    def _swap_weights(self) -> None:
        """The float network's weights, quantized per channel, into the converted layers
        (the activation ranges stay)."""
        weights = self._float.network.state_dict()
        for name, module in self._quantized.named_modules():
            if not hasattr(module, "set_weight_bias") or f"{name}.weight" not in weights:
                continue  # (a layer's packed parameters are a module of their own)
            weight, bias = weights[f"{name}.weight"], weights[f"{name}.bias"]
            observer = self._weight_observer()
            observer(weight)
            scales, zero_points = observer.calculate_qparams()
            quantized = torch.quantize_per_channel(
                weight, scales.float(), zero_points, observer.ch_axis, observer.dtype
            )
            # A copy: the float network's own bias changes in place with its next load.
            module.set_weight_bias(quantized, bias.detach().clone())
        self.weight_swaps += 1
        self._swaps_since_calibration += 1
        self._forwards_since_quantized = 0
        self._new_weights = False
