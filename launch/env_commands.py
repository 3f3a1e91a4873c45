"""``apex envs``: the environments a run can name, by family: each preset's name, gymnasium
id, solve threshold, the extra it needs and whether that is installed here, and the
patterns of ids a family takes beyond its named presets (every ALE game)."""

from __future__ import annotations

import json

import click

FAMILY_NOTES = {
    "gymnasium": "gymnasium.make; flat observations, or flattened to one (Discrete "
    "one-hot, Tuple, Dict, MultiBinary, MultiDiscrete)",
    "atari": "ale-py's C++ vector env with DQN's preprocessing, frames stored once",
    "minatar": "10x10 planes of objects as uint8, the MinAtar paper's network",
}
ANY_ID = (
    "any other gymnasium id, or package.module:Env-v0: the gymnasium family's "
    "defaults, solved at its spec's reward_threshold where it has one"
)


def env_rows() -> list[dict]:
    """One row per built-in preset and per family pattern, by family then name."""
    from apex.envs.presets import FAMILY_IDS, PRESETS, extra_installed

    rows = []
    for chosen in (*PRESETS.values(), *FAMILY_IDS.values()):
        rows.append(
            {
                "family": chosen.family,
                "name": chosen.name,
                "id": chosen.gym_id,
                "solved_return": chosen.solved_return,
                "extra": chosen.extra,
                "installed": extra_installed(chosen.extra),
                "preset_file": chosen.source.rsplit("/", 1)[-1],
                "pattern": "*" in chosen.name,
            }
        )
    order = list(FAMILY_NOTES)
    return sorted(rows, key=lambda r: (order.index(r["family"]), r["pattern"], r["name"]))


def _solved(value: float | None) -> str:
    return "–" if value is None else f"{value:g}"


@click.command("envs")
@click.option("--json", "as_json", is_flag=True, help="The rows as JSON.")
def envs(as_json: bool) -> None:
    """The environments --env takes, by family, and the extra each needs.

    A name here starts from its preset file's settings; an ALE game by ALE/<Game>-v5 or
    its bare name (Breakout) from the atari family's; any other gymnasium id from the
    defaults. A run config's [preset] table adds one of a user's own (launch/README.md)."""
    rows = env_rows()
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    width = max(len(r["name"]) for r in rows)
    for family, note in FAMILY_NOTES.items():
        click.echo(f"{family}: {note}")
        for row in (r for r in rows if r["family"] == family):
            extra = row["extra"] or "–"
            if row["extra"]:
                extra += "" if row["installed"] else " (not installed)"
            gym_id = "any game (or its bare name)" if row["pattern"] else row["id"]
            click.echo(
                f"  {row['name']:<{width}}  id {gym_id:<28} solved at "
                f"{_solved(row['solved_return']):<7} extra {extra:<16} "
                f"{row['preset_file']}"
            )
    click.echo(ANY_ID)
