"""Which built-in network an observation gets, decided without torch (a run's preflight
asks before any process starts).

A flat ``(d,)`` vector gets an MLP. A uint8 image of two or three dimensions gets
convolutions sized to it by one rule:

- **channels**: ``(h, w)`` is one channel; ``(a, b, c)`` is channels-first where ``a`` is
  smaller than both ``b`` and ``c`` (the ALE pipeline's ``(4, 84, 84)`` stacks), else
  channels-last (gymnasium's ``(h, w, c)`` images, MinAtar's ``(10, 10, c)`` planes);
- **values** are divided by the observation space's upper bound, so pixels of 0-255 and
  planes of 0/1 both reach the network in [0, 1];
- **sides of 36 and more**: the Nature CNN's convolutions (8x8 stride 4, 4x4 stride 2,
  3x3 stride 1; Mnih et al. 2015), average-pooled down to at most 7x7 positions, then 512
  hidden units: exactly the Nature CNN at 84x84, and a raw 210x160 frame costs no more;
- **sides from 4 to 35**: the MinAtar network's one 3x3 convolution of 16 channels, then
  128 hidden units (Young & Tian 2019): exactly MinAtar's at 10x10.

The smaller side decides. Smaller images, and observations of any other shape, need a
user's ``learner.network``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from apex.envs.image_axes import channels_first

# The smallest side the Nature convolutions take (36 -> 8 -> 3 -> 1), and the smallest a
# 3x3 convolution leaves more than one position of.
NATURE_MIN_SIDE = 36
GRID_MIN_SIDE = 4
# The Nature CNN's positions at 84x84: larger images are pooled down to this.
NATURE_MAX_POSITIONS = 7


def _conv_side(side: int, kernel: int, stride: int) -> int:
    return (side - kernel) // stride + 1


@dataclass(frozen=True)
class ImageLayout:
    """How the built-in convolutions read one uint8 image observation."""

    channels: int
    height: int
    width: int
    channels_last: bool
    high: float  # the value that means 1.0 (the observation space's upper bound)
    rank: int = 3  # 2: ``(h, w)``, one channel without an axis of its own

    @property
    def torso(self) -> str:
        """ "nature" (sides of 36 and more) or "grid"."""
        return "nature" if min(self.height, self.width) >= NATURE_MIN_SIDE else "grid"

    @property
    def hidden(self) -> int:
        """Units of the layer after the convolutions (the head's, for DQN)."""
        return 512 if self.torso == "nature" else 128

    def convolved(self) -> tuple[int, int, int]:
        """Channels, height and width the convolutions leave (before any pooling)."""
        if self.torso == "grid":
            return 16, self.height - 2, self.width - 2
        sides = [self.height, self.width]
        for kernel, stride in ((8, 4), (4, 2), (3, 1)):
            sides = [_conv_side(side, kernel, stride) for side in sides]
        return 64, sides[0], sides[1]

    def pooled(self) -> tuple[int, int] | None:
        """The positions the Nature convolutions are average-pooled to (None: not pooled)."""
        _, height, width = self.convolved()
        if self.torso == "grid" or max(height, width) <= NATURE_MAX_POSITIONS:
            return None
        return min(height, NATURE_MAX_POSITIONS), min(width, NATURE_MAX_POSITIONS)

    @property
    def features(self) -> int:
        channels, height, width = self.convolved()
        height, width = self.pooled() or (height, width)
        return channels * height * width


def image_layout(observation_shape: Sequence[int], high: float = 255.0) -> ImageLayout | None:
    """The layout of an image of ``observation_shape`` (the module's rule); None where the
    shape is no image or one too small for the built-in convolutions."""
    shape = tuple(observation_shape)
    if len(shape) == 2:
        layout = ImageLayout(1, shape[0], shape[1], channels_last=False, high=high, rank=2)
    elif len(shape) == 3 and channels_first(shape):
        layout = ImageLayout(shape[0], shape[1], shape[2], channels_last=False, high=high)
    elif len(shape) == 3:
        layout = ImageLayout(shape[2], shape[0], shape[1], channels_last=True, high=high)
    else:
        return None
    return layout if min(layout.height, layout.width) >= GRID_MIN_SIDE else None


def builtin_layout(observation_shape: Sequence[int]) -> str | None:
    """ "image" or "vector"; None where no built-in network takes the shape."""
    if len(observation_shape) == 1:
        return "vector"
    return "image" if image_layout(observation_shape) is not None else None


def builtin_network_problems(observation_shape: Sequence[int], env: str) -> list[str]:
    if builtin_layout(observation_shape) is not None:
        return []
    return [
        f"{env} has observations of shape {tuple(observation_shape)}: the built-in "
        f"networks take flat (d,) vectors and uint8 images of {GRID_MIN_SIDE}x"
        f"{GRID_MIN_SIDE} and up; give learner.network, a factory of your own "
        "(launch/README.md)"
    ]
