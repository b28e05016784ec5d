"""Plots for the results tables (matplotlib PNG, drawn by `python -m eval.tables`).

- em_vs_tokens.png  EM against policy tokens per episode, one point per run x stage, the Pareto
                    front (no other point is both more accurate and cheaper) drawn through them;
- em_by_hops.png    EM by number of hops, one line per run x stage;
- training.png      SFT loss and, per RL run, reward, policy tokens and tool calls per step;
- health_<run>_rl.png  a copy of the default RL run's health plot.
Points pool the benchmarks every plotted row has, so rows stay comparable.
"""
from __future__ import annotations

import json
from pathlib import Path

from eval.results import STAGE_LABELS, Result, grouped, pooled, pooled_breakdown, selected, whole_benchmarks


def pareto_front(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Points (cost, score) that no other point beats on both: lower-or-equal cost and higher score."""
    front, best = [], float("-inf")
    for cost, score in sorted(points, key=lambda p: (p[0], -p[1])):
        if score > best:
            front.append((cost, score))
            best = score
    return front


def _pyplot():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from cycler import cycler
    # 20 colours instead of 10: a results folder with seeds and variants has more than 10 rows
    plt.rcParams["axes.prop_cycle"] = cycler(color=plt.cm.tab20.colors)
    return plt


def _rows(results: list[Result]) -> tuple[dict, list[str]]:
    """Per (run, stage): the results on the whole benchmarks (not slices) that every row has."""
    rows = grouped(results)
    common = whole_benchmarks(sorted(set.intersection(*(set(by_bench) for by_bench in rows.values())))) if rows else []
    return {key: [by_bench[b] for b in common] for key, by_bench in rows.items()}, common


def plot_em_vs_tokens(results: list[Result], path: Path) -> bool:
    rows, common = _rows(results)
    points = {}
    for (run, stage), chosen in rows.items():
        overall = pooled(chosen) if chosen else None
        if overall and overall["tokens_generated"] is not None:
            points[f"{run} {STAGE_LABELS.get(stage, stage)}"] = (overall["tokens_generated"], overall["em"])
    if not points:
        return False
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(10, 4.6))
    # numbers at the points and names in the legend: with many runs the points crowd, and names beside
    # them overlap; staggered numbers for the baselines, which often share a point near (few tokens, 0 EM)
    for i, (label, (tokens, em)) in enumerate(points.items(), 1):
        ax.scatter(tokens, em, s=36, label=f"{i}. {label}")
        ax.annotate(str(i), (tokens, em), textcoords="offset points", xytext=(4, 3 + 8 * (i % 3)), fontsize=8)
    front = pareto_front(list(points.values()))
    ax.plot(*zip(*front), linestyle="--", color="gray", label="Pareto front")
    ax.set_xlabel("policy tokens per episode")
    ax.set_ylabel("EM")
    ax.set_title(f"EM vs tokens ({', '.join(common)})", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return _save(plt, fig, path)


def plot_em_by_hops(results: list[Result], path: Path) -> bool:
    rows, common = _rows(results)
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(9.5, 4.4))
    drawn = False
    for (run, stage), chosen in rows.items():
        groups = {hops: g for hops, g in pooled_breakdown(chosen, "hops").items() if hops is not None}
        if groups:
            hops = sorted(groups)
            ax.plot(hops, [groups[h]["em"] for h in hops], marker="o", label=f"{run} {STAGE_LABELS.get(stage, stage)}")
            drawn = True
    if not drawn:
        plt.close(fig)
        return False
    ax.set_xlabel("hops")
    ax.set_ylabel("EM")
    ax.set_xticks(sorted({h for chosen in rows.values() for h in pooled_breakdown(chosen, "hops") if h is not None}))
    ax.set_title(f"EM by number of hops ({', '.join(common)})", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return _save(plt, fig, path)


def training_curves(runs: Path, only: set[str] | None = None) -> list[tuple[str, str, list[tuple[float, float]]]]:
    """(panel title, line label, points) for every SFT loss and RL health signal under runs/ (of the runs in `only`)."""
    curves = []
    for summary in selected(runs, "*/sft/train_summary.json", only):
        history = json.loads(summary.read_text()).get("loss_history", [])
        curves.append(("SFT loss", summary.parts[-3], [(r["step"], r["loss"]) for r in history if "loss" in r]))
    for health in selected(runs, "*/rl*/health.jsonl", only):
        rows = [json.loads(line) for line in health.read_text().splitlines() if line.strip()]
        label = f"{health.parts[-3]} {health.parts[-2]}"
        for key, title in (("reward", "RL reward"), ("episode/policy_tokens", "RL policy tokens / episode"),
                           ("episode/tool_calls", "RL tool calls / episode")):
            curves.append((title, label, [(r["step"], r[key]) for r in rows if key in r]))
    return [curve for curve in curves if curve[2]]


def plot_training(runs: Path, path: Path, only: set[str] | None = None) -> bool:
    curves = training_curves(runs, only)
    if not curves:
        return False
    titles = list(dict.fromkeys(title for title, _, _ in curves))
    plt = _pyplot()
    fig, axes = plt.subplots(1, len(titles), figsize=(4 * len(titles), 3.2), squeeze=False)
    for ax, title in zip(axes[0], titles):
        for _, label, points in (c for c in curves if c[0] == title):
            ax.plot(*zip(*points), marker=".", label=label)
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("step", fontsize=8)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    return _save(plt, fig, path)


def _save(plt, fig, path: Path) -> bool:
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.stem + ".tmp.png")
    fig.savefig(tmp, dpi=110)
    plt.close(fig)
    tmp.replace(path)
    return True


def draw_all(runs: Path, out: Path, results: list[Result] | None = None, only: set[str] | None = None) -> list[Path]:
    from eval.results import collect_benchmarks

    results = collect_benchmarks(runs, log=lambda _: None, only=only) if results is None else results
    drawn = []
    for name, draw in (("em_vs_tokens.png", lambda p: plot_em_vs_tokens(results, p)),
                       ("em_by_hops.png", lambda p: plot_em_by_hops(results, p)),
                       ("training.png", lambda p: plot_training(runs, p, only))):
        if draw(out / name):
            drawn.append(out / name)
    for health in selected(runs, "*/rl/health.png", only):  # the default RL run's own health plot (rl/health.py)
        copy = out / f"health_{health.parts[-3]}_rl.png"
        copy.write_bytes(health.read_bytes())
        drawn.append(copy)
    return drawn
