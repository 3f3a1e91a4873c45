"""PNG plots of a benchmark document: one figure per suite (needs matplotlib)."""

from __future__ import annotations

from pathlib import Path


def plot_document(document: dict, directory: Path) -> list[Path]:
    """Bar charts of every ok figure's median (with its min–max range), one PNG per
    suite and unit, plus the ratio bars when a suite has ratios. Returns the files."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for suite in document["suites"]:
        records = [r for r in document["records"] if r["suite"] == suite and r["status"] == "ok"]
        for unit in sorted({r["unit"] for r in records}):
            chosen = [r for r in records if r["unit"] == unit]
            labels = [f"{r['case']}\n{r['implementation']} {r['metric']}" for r in chosen]
            medians = [r["median"] for r in chosen]
            errors = [
                [r["median"] - r["min"] for r in chosen],
                [r["max"] - r["median"] for r in chosen],
            ]
            figure, axis = plt.subplots(figsize=(max(6, 0.6 * len(chosen)), 4.5))
            bars = axis.bar(range(len(chosen)), medians, yerr=errors, capsize=3, color="#4878a8")
            for bar, record in zip(bars, chosen, strict=True):
                if record.get("unsolved"):  # a lower bound, not a time to solve
                    bar.set(color="#dddddd", hatch="//", edgecolor="#c44e52")
                    axis.annotate(
                        f"not solved\n({record['unsolved']}/{record['repeats']})",
                        (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                        ha="center",
                        va="bottom",
                        fontsize=7,
                        color="#c44e52",
                    )
            axis.set_xticks(range(len(chosen)), labels, rotation=60, ha="right", fontsize=7)
            axis.set_ylabel(unit)
            axis.set_yscale("log" if max(medians) / max(min(medians), 1e-12) > 100 else "linear")
            axis.set_title(f"{suite}: {unit} (median, min–max)")
            name = f"{suite}-{unit.replace('/', '_per_').replace(' ', '_')}.png"
            written.append(_save(plt, figure, directory / name))
        ratios = [r for r in document["ratios"] if r["suite"] == suite]
        if ratios:
            figure, axis = plt.subplots(figsize=(max(6, 0.6 * len(ratios)), 4.5))
            labels = [
                f"{r['case']} {r['metric']}\n{r['numerator']}/{r['denominator']}" for r in ratios
            ]
            values = [r["ratio"] for r in ratios]
            colours = ["#55a868" if v >= 1 else "#c44e52" for v in values]
            axis.bar(range(len(ratios)), values, color=colours)
            axis.axhline(1.0, color="black", linewidth=0.8)
            axis.set_xticks(range(len(ratios)), labels, rotation=60, ha="right", fontsize=7)
            axis.set_ylabel("ratio")
            axis.set_title(f"{suite}: ratios")
            written.append(_save(plt, figure, directory / f"{suite}-ratios.png"))
        scaling = _scaling_records(records)
        if scaling:
            written.append(_plot_scaling(plt, suite, scaling, directory))
    return written


def _scaling_records(records: list[dict]) -> list[dict]:
    """Records of a suite that varies ``actors`` (and maybe ``shards``) in its params."""
    return [r for r in records if isinstance(r.get("params", {}).get("actors"), int)]


def _plot_scaling(plt, suite: str, records: list[dict], directory: Path) -> Path:
    """One panel per metric: median against actor count, one line per shard count, with
    the min–max range as a band."""
    metrics = sorted({(r["metric"], r["unit"]) for r in records})
    columns = min(4, len(metrics))
    rows = -(-len(metrics) // columns)
    figure, axes = plt.subplots(rows, columns, figsize=(4 * columns, 3.4 * rows), squeeze=False)
    for axis in axes.flat[len(metrics) :]:
        axis.set_visible(False)
    for axis, (metric, unit) in zip(axes.flat, metrics, strict=False):
        chosen = [r for r in records if r["metric"] == metric]
        for shards in sorted({r["params"].get("shards", 1) for r in chosen}):
            line = sorted(
                (r for r in chosen if r["params"].get("shards", 1) == shards),
                key=lambda r: r["params"]["actors"],
            )
            actors = [r["params"]["actors"] for r in line]
            axis.plot(actors, [r["median"] for r in line], marker="o", label=f"{shards} shard(s)")
            axis.fill_between(actors, [r["min"] for r in line], [r["max"] for r in line], alpha=0.2)
        axis.set_xscale("log", base=2)
        axis.set_xlabel("actors")
        axis.set_ylabel(unit)
        axis.set_title(metric, fontsize=9)
        axis.legend(fontsize=7)
    figure.suptitle(f"{suite}: scaling with actors (median, min–max)")
    return _save(plt, figure, directory / f"{suite}-scaling.png")


def _save(plt, figure, path: Path) -> Path:
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


def plot_model(config: dict, directory: Path) -> list[Path]:
    """``apex bench model``: predicted against measured CPU per role (with the tolerance
    band), and what each planned cluster needs."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    directory.mkdir(parents=True, exist_ok=True)
    written = []
    checks, tolerance = config["checks"], config["tolerance"]
    if checks:
        figure, axis = plt.subplots(figsize=(6.5, 5.5))
        for index, role in enumerate(sorted({c["role"] for c in checks})):
            for kind, marker in (("system", "o"), ("fleet", "s")):
                chosen = [c for c in checks if c["role"] == role and c["kind"] == kind]
                if chosen:
                    axis.scatter(
                        [c["measured"] for c in chosen],
                        [c["predicted"] for c in chosen],
                        s=28,
                        marker=marker,
                        color=f"C{index}",
                        label=f"{role} ({kind} runs)",
                    )
        low = min(min(c["measured"], c["predicted"]) for c in checks) * 0.7
        high = max(max(c["measured"], c["predicted"]) for c in checks) * 1.4
        line = [low, high]
        axis.plot(line, line, color="black", linewidth=0.8, label="predicted = measured")
        axis.fill_between(
            line,
            [v * (1 - tolerance) for v in line],
            [v * (1 + tolerance) for v in line],
            color="grey",
            alpha=0.2,
            label=f"within {tolerance:.0%}",
        )
        axis.set_xscale("log")
        axis.set_yscale("log")
        axis.set_xlabel("measured CPU (cores)")
        axis.set_ylabel("predicted from unit costs (cores)")
        axis.set_title(
            f"cost model vs measured runs: {config['checks_within']} within {tolerance:.0%}",
            fontsize=9,
        )
        axis.legend(fontsize=7)
        written.append(_save(plt, figure, directory / "model-checks.png"))
    plans = config["plans"]
    if plans:
        figure, (cores, network) = plt.subplots(1, 2, figsize=(11, 4.5))
        labels = [
            f"{p['actors']:,} actors\n{p['learner_updates_per_s']:g} updates/s" for p in plans
        ]
        x = range(len(plans))
        cores.bar([i - 0.2 for i in x], [p["actor_cores"] for p in plans], 0.4, label="actor cores")
        bars = cores.bar(
            [i + 0.2 for i in x], [p["shard_cores"] for p in plans], 0.4, label="shard cores"
        )
        for bar, plan in zip(bars, plans, strict=True):
            cores.annotate(
                f"{plan['shards']} shard(s)",
                (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                ha="center",
                va="bottom",
                fontsize=7,
            )
        cores.set_xticks(list(x), labels, fontsize=8)
        cores.set_ylabel("cores")
        cores.set_yscale("log")
        cores.set_title(f"{plans[0]['env']}: CPU a run needs (predicted)")
        cores.legend(fontsize=8)
        for offset, key, name in (
            (-0.27, "actors_to_shards_mb_per_s", "actors → shards"),
            (0.0, "shards_to_learner_mb_per_s", "shards → learner"),
            (0.27, "weights_mb_per_s", "weights → actors"),
        ):
            network.bar([i + offset for i in x], [p[key] for p in plans], 0.27, label=name)
        network.set_xticks(list(x), labels, fontsize=8)
        network.set_ylabel("MB/s")
        network.set_yscale("log")
        network.set_title("network (predicted; weights every 10 updates)")
        network.legend(fontsize=8)
        written.append(_save(plt, figure, directory / "model-plan.png"))
    return written
