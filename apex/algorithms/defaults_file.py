"""An algorithm's own defaults, in the ``defaults.toml`` of its folder:

- ``[run]``: sections every run of it starts from, under the env preset's settings for it
  (IMPALA: queues of unrolls);
- ``[sized.KIND]``: sections a task without preset settings starts from, by the kind of
  its observations (``vector``, ``small_image``, ``image``), under the run-wide sizes of
  ``apex.algorithms.sized_defaults``.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

OBSERVATION_KINDS = ("vector", "small_image", "image")


@dataclass(frozen=True)
class AlgorithmDefaults:
    run: Mapping[str, object]
    sized: Mapping[str, Mapping[str, object]]
    path: Path


def load_defaults(module_file: str) -> AlgorithmDefaults:
    """The ``defaults.toml`` beside ``module_file`` (a builder's ``__file__``).

    Raises:
        ValueError: a kind of observation the rule does not know (a typo in the file).
    """
    path = Path(module_file).with_name("defaults.toml")
    values = tomllib.loads(path.read_text("utf-8"))
    sized = values.get("sized", {})
    unknown = set(sized) - set(OBSERVATION_KINDS)
    if unknown:
        raise ValueError(
            f"{path}: [sized.{sorted(unknown)[0]}] is not one of {', '.join(OBSERVATION_KINDS)}"
        )
    return AlgorithmDefaults(
        run=MappingProxyType(values.get("run", {})),
        sized=MappingProxyType(
            {kind: MappingProxyType(sized.get(kind, {})) for kind in OBSERVATION_KINDS}
        ),
        path=path,
    )
