"""Adam, as ``torch.optim.Adam(fused=True)`` computes it, without ``torch.optim``.

Why not ``torch.optim``: its first optimizer in a process imports ``torch._dynamo`` (every
``Optimizer`` method is wrapped to keep the compiler out), which takes 1.6 s of CPU on top
of torch's own 2 s: on every learner start and restart, before the first update, and on
the clock of every time-to-solve the learning benchmark measures. The update itself is
the same fused kernel ``torch.optim`` calls (``torch._fused_adam_``), or, on a device
without it, the same arithmetic in ``torch._foreach_*`` calls (torch's multi-tensor Adam).

The state dict has ``torch.optim.Adam``'s layout (``state``: per parameter index ``step``,
``exp_avg``, ``exp_avg_sq``; ``param_groups`` with ``lr``, ``betas``, ``eps``...), so a
checkpoint written by either loads into the other.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch

# The group keys torch.optim.Adam writes, with the values this Adam always has ("fused"
# is set to the path taken).
_FIXED_GROUP = {
    "weight_decay": 0.0,
    "amsgrad": False,
    "maximize": False,
    "foreach": None,
    "capturable": False,
    "differentiable": False,
    "decoupled_weight_decay": False,
}


class Adam:
    """Adam over one group of parameters (Kingma & Ba 2015; no weight decay, no AMSGrad).

    ``param_groups[0]["lr"]`` may be changed between steps (a learning-rate schedule).
    ``fused``: torch's fused kernel (None: where the device has one), else its multi-tensor
    arithmetic."""

    def __init__(
        self,
        parameters: Iterable[torch.nn.Parameter],
        lr: float,
        eps: float = 1e-8,
        betas: tuple[float, float] = (0.9, 0.999),
        fused: bool | None = None,
    ) -> None:
        self._parameters = list(parameters)
        if not self._parameters:
            raise ValueError("Adam got no parameters")
        if lr < 0.0 or eps < 0.0 or not all(0.0 <= beta < 1.0 for beta in betas):
            raise ValueError(
                f"Adam needs lr >= 0, eps >= 0 and betas in [0, 1): {lr}, {eps}, {betas}"
            )
        self._exp_avgs = [
            torch.zeros_like(p, memory_format=torch.preserve_format) for p in self._parameters
        ]
        self._exp_avg_sqs = [
            torch.zeros_like(p, memory_format=torch.preserve_format) for p in self._parameters
        ]
        # As torch's fused Adam keeps them: a float32 count on each parameter's device.
        self._steps = [
            torch.zeros((), dtype=torch.float32, device=p.device) for p in self._parameters
        ]
        on_kernel_devices = all(p.device.type in ("cpu", "cuda") for p in self._parameters)
        self._fused = on_kernel_devices if fused is None else fused
        self.param_groups = [
            {
                "params": self._parameters,
                "lr": lr,
                "betas": tuple(betas),
                "eps": eps,
                **_FIXED_GROUP,
                "fused": self._fused,
            }
        ]
        self._device_lr: torch.Tensor | None = None
        self._device_lr_value = lr

    def keep_learning_rate_on_device(self) -> None:
        """The step size in a tensor on the parameters' device, which the fused kernel
        reads when it runs: a CUDA graph that captured :meth:`step` replays the group's
        ``lr`` of the time, once :meth:`sync_learning_rate` has run before the replay (a
        Python float would be fixed in the graph)."""
        if not self._fused:
            raise ValueError("a step size on the device needs the fused kernel")
        self._device_lr_value = float(self.param_groups[0]["lr"])
        self._device_lr = torch.tensor(
            self._device_lr_value, dtype=torch.float32, device=self._parameters[0].device
        )

    def sync_learning_rate(self) -> None:
        """The device's step size set to the group's ``lr`` if a schedule changed it (one
        small copy, ordered on the stream before the next step)."""
        rate = float(self.param_groups[0]["lr"])
        if self._device_lr is not None and rate != self._device_lr_value:
            self._device_lr.fill_(rate)
            self._device_lr_value = rate

    def zero_grad(self, set_to_none: bool = True) -> None:
        for parameter in self._parameters:
            if set_to_none:
                parameter.grad = None
            elif parameter.grad is not None:
                parameter.grad.zero_()

    @torch.no_grad()
    def step(self, found_inf: torch.Tensor | None = None) -> None:
        """One Adam step for every parameter that has a gradient (the others keep their
        moments and count, as in torch.optim).

        Args:
            found_inf: a float scalar on the parameters' device; where it is 1 the step
                is skipped whole (parameters, moments and counts stay), decided on the
                device as torch's ``GradScaler`` has the fused kernel do, so a CUDA graph
                can record it."""
        chosen = [i for i, p in enumerate(self._parameters) if p.grad is not None]
        if not chosen:
            return
        params = [self._parameters[i] for i in chosen]
        grads = [p.grad for p in params]
        exp_avgs = [self._exp_avgs[i] for i in chosen]
        exp_avg_sqs = [self._exp_avg_sqs[i] for i in chosen]
        steps = [self._steps[i] for i in chosen]
        group = self.param_groups[0]
        (beta1, beta2), lr, eps = group["betas"], float(group["lr"]), float(group["eps"])
        if self._fused:
            torch._foreach_add_(steps, 1)
            self.sync_learning_rate()
            rate = lr if self._device_lr is None else self._device_lr
            torch._fused_adam_(
                params,
                grads,
                exp_avgs,
                exp_avg_sqs,
                [],
                steps,
                amsgrad=False,
                lr=rate,
                beta1=beta1,
                beta2=beta2,
                weight_decay=0.0,
                eps=eps,
                maximize=False,
                grad_scale=None,
                found_inf=found_inf,
            )
            if found_inf is not None:  # the kernel skipped the step; the counts go back
                torch._foreach_sub_(steps, [found_inf] * len(steps))
            return
        if found_inf is not None and bool(found_inf):
            return
        torch._foreach_add_(steps, 1)
        # torch's multi-tensor Adam, for a device without the fused kernel.
        torch._foreach_lerp_(exp_avgs, grads, 1 - beta1)
        torch._foreach_mul_(exp_avg_sqs, beta2)
        torch._foreach_addcmul_(exp_avg_sqs, grads, grads, 1 - beta2)
        counts = [float(step) for step in steps]
        step_sizes = [-lr / (1 - beta1**count) for count in counts]
        denominators = torch._foreach_sqrt(exp_avg_sqs)
        torch._foreach_div_(denominators, [math.sqrt(1 - beta2**count) for count in counts])
        torch._foreach_add_(denominators, eps)
        torch._foreach_addcdiv_(params, exp_avgs, denominators, step_sizes)

    def state_dict(self) -> dict:
        """``torch.optim.Adam``'s layout; a parameter not stepped yet has no state."""
        state = {}
        for index, step in enumerate(self._steps):
            if step.item() > 0:
                state[index] = {
                    "step": step.clone(),
                    "exp_avg": self._exp_avgs[index].clone(),
                    "exp_avg_sq": self._exp_avg_sqs[index].clone(),
                }
        group = {key: value for key, value in self.param_groups[0].items() if key != "params"}
        group["params"] = list(range(len(self._parameters)))
        return {"state": state, "param_groups": [group]}

    def load_state_dict(self, state_dict: dict) -> None:
        """Moments, counts and the group's ``lr``, ``betas`` and ``eps`` from a state dict of
        this class or of ``torch.optim.Adam`` over the same parameters (as torch.optim
        does, the saved step size replaces the one given)."""
        groups = state_dict.get("param_groups")
        if not isinstance(groups, list) or len(groups) != 1:
            raise ValueError("an Adam state dict with one parameter group is needed")
        saved = groups[0]
        if len(saved.get("params", ())) != len(self._parameters):
            raise ValueError(
                f"the saved optimizer has {len(saved.get('params', ()))} parameters, "
                f"this one {len(self._parameters)}"
            )
        if saved.get("amsgrad") or saved.get("weight_decay") or saved.get("maximize"):
            raise ValueError("the saved optimizer is not plain Adam (AMSGrad, decay or maximize)")
        position = {index: place for place, index in enumerate(saved["params"])}
        for index, entry in state_dict.get("state", {}).items():
            place = position.get(int(index))
            if place is None or not {"step", "exp_avg", "exp_avg_sq"} <= set(entry):
                raise ValueError(
                    f"the saved state of parameter {index} is not Adam's "
                    "(unknown index, or no step and moments)"
                )
            parameter = self._parameters[place]
            for name, kept in (("exp_avg", self._exp_avgs), ("exp_avg_sq", self._exp_avg_sqs)):
                value = entry[name]
                if value.shape != parameter.shape:
                    raise ValueError(
                        f"saved {name} of shape {tuple(value.shape)} for a "
                        f"parameter of shape {tuple(parameter.shape)}"
                    )
                kept[place].copy_(value)
            self._steps[place].fill_(float(entry["step"]))
        group = self.param_groups[0]
        group["lr"], group["eps"] = saved["lr"], saved["eps"]
        group["betas"] = tuple(saved["betas"])
