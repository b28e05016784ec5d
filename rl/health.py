"""Training health: each logged step's signals to health.jsonl, warnings on collapse, a PNG at the end.

GRPO fails quietly: the policy stops answering (length penalties can teach it to give up), stops
searching after one call, its entropy collapses, or every group gets the same reward so the
advantages are zero. The callback reads TRL's log rows (reward, reward_std, frac_reward_zero_std,
entropy, kl, completions/* (TRL counts only the policy's tokens there), tools/*) and the trainer's
episode metrics (episode/answer_rate, tool_calls, invalid_call_rate, policy_tokens,
evidence_recall, gold_docs: how many gold documents the step's questions have, right_unseen: right
answers given without all gold documents seen, invalid/<tool>: invalid calls per episode by tool,
drawn in one panel), appends them to `<output_dir>/health.jsonl`, prints a `health warning:` line
when a signal collapses, and plots `<output_dir>/health.png` when training ends.
"""
from __future__ import annotations

import json
import logging
from pathlib import Path

from transformers import TrainerCallback

from common.io import atomic_write_text

logger = logging.getLogger("rl.health")

# (log key, panel title) in plot order; a panel is drawn only for keys that were logged
SIGNALS = [
    ("reward", "reward (mean)"), ("reward_std", "reward std"), ("frac_reward_zero_std", "groups with zero reward std"),
    ("entropy", "entropy"), ("kl", "KL to reference"), ("episode/policy_tokens", "policy tokens / episode"),
    ("episode/tool_calls", "tool calls / episode"), ("tools/failure_frequency", "tool calls TRL could not run"),
    ("episode/answer_rate", "answer rate"), ("episode/invalid_call_rate", "invalid-call rate"),
    ("episode/evidence_recall", "evidence recall"), ("episode/gold_docs", "gold documents of the step's question(s)"),
    ("episode/right_unseen", "right without the evidence seen"),
    ("rewards/em/mean", "EM reward"),
]
# (key prefix, panel title): one panel, a line per key (the trainer's invalid calls per episode, by tool; the
# share of turns after a tool output that the rollout stop forced to answer or held from answering)
GROUPS = [("episode/invalid/", "invalid calls / episode, by tool"),
          ("episode/stop_", "rollout stop: turns after a tool output forced / held")]


def health_row(logs: dict, step: int) -> dict | None:
    """The health signals of one training log row (None for rows without them, e.g. the summary)."""
    row = {key: logs[key] for key in logs if key in dict(SIGNALS) or key.startswith(("rewards/", "tools/", "episode/"))}
    if "reward" not in logs:
        return None
    return {"step": step, **{k: v for k, v in row.items() if isinstance(v, (int, float))}}


class HealthMonitor:
    """Collapse checks over the rows seen so far; each problem is reported once, when it appears."""

    def __init__(self, min_answer_rate: float = 0.1, entropy_drop: float = 0.2, zero_std_steps: int = 5, window: int = 3,
                 min_tool_calls: float = 1.0):
        self.min_answer_rate, self.entropy_drop = min_answer_rate, entropy_drop
        # a search agent down to one call per episode cannot follow two hops (stop 31: lr 1e-4 fell from
        # 3.6 calls to about one by step 5, and its greedy evaluation made exactly one call per question)
        self.min_tool_calls = min_tool_calls
        self.zero_std_steps, self.window = zero_std_steps, window
        self.rows: list[dict] = []
        self.warned: set[str] = set()

    def add(self, row: dict) -> list[str]:
        self.rows.append(row)
        found = []
        recent = self.rows[-self.window:]
        answer = [r["episode/answer_rate"] for r in recent if "episode/answer_rate" in r]
        first_answer = next((r["episode/answer_rate"] for r in self.rows if "episode/answer_rate" in r), None)
        if (len(answer) == self.window and max(answer) < self.min_answer_rate
                and first_answer is not None and first_answer >= self.min_answer_rate):
            found.append(("answer_rate", f"answer rate collapsed: {first_answer:.2f} at the start, "
                                         f"below {self.min_answer_rate:.2f} for the last {self.window} logs"))
        entropy = [r["entropy"] for r in recent if "entropy" in r]
        first_entropy = next((r["entropy"] for r in self.rows if "entropy" in r), None)
        if len(entropy) == self.window and first_entropy and max(entropy) < self.entropy_drop * first_entropy:
            found.append(("entropy", f"entropy collapsed: {first_entropy:.3f} at the start, {entropy[-1]:.3f} now "
                                     f"(below {self.entropy_drop:.0%} of the start for {self.window} logs)"))
        calls = [r["episode/tool_calls"] for r in recent if "episode/tool_calls" in r]
        first_calls = next((r["episode/tool_calls"] for r in self.rows if "episode/tool_calls" in r), None)
        if (len(calls) == self.window and max(calls) <= self.min_tool_calls
                and first_calls is not None and first_calls > self.min_tool_calls + 0.5):
            found.append(("tool_calls", f"tool calls collapsed: {first_calls:.2f} per episode at the start, at most "
                                        f"{self.min_tool_calls:.1f} for the last {self.window} logs (too few for "
                                        "multi-hop questions; a lower learning rate kept more)"))
        zero = [r.get("frac_reward_zero_std") for r in self.rows[-self.zero_std_steps:]]
        if len(zero) == self.zero_std_steps and all(z is not None and z >= 1.0 for z in zero):
            found.append(("zero_std", f"every group had zero reward variance for {self.zero_std_steps} logs: "
                                      "no learning signal (questions too hard or too easy for this policy)"))
        messages = []
        for key, message in found:
            if key not in self.warned:
                self.warned.add(key)
                messages.append(f"health warning (step {row['step']}): {message}")
        return messages


class HealthCallback(TrainerCallback):
    def __init__(self, output_dir: str | Path, monitor: HealthMonitor | None = None):
        self.output_dir = Path(output_dir)
        self.monitor = monitor or HealthMonitor()
        self.warnings: list[str] = []

    def on_train_begin(self, args, state, control, **kwargs):
        rows = [row for row in (health_row(e, e.get("step", 0)) for e in state.log_history) if row]
        self.monitor.rows.extend(rows)  # a resumed run: judge collapse against the whole run
        if state.is_world_process_zero:  # health.jsonl holds this run only: no earlier run, no replayed steps
            atomic_write_text(self.output_dir / "health.jsonl", "".join(json.dumps(row) + "\n" for row in rows))

    def on_log(self, args, state, control, logs=None, **kwargs):
        row = health_row(logs or {}, state.global_step)
        if row is None or not state.is_world_process_zero:
            return
        self.output_dir.mkdir(parents=True, exist_ok=True)
        with open(self.output_dir / "health.jsonl", "a") as handle:
            handle.write(json.dumps(row) + "\n")
        for message in self.monitor.add(row):
            self.warnings.append(message)
            logger.warning(message)
            print(message, flush=True)

    def on_train_end(self, args, state, control, **kwargs):
        if state.is_world_process_zero:
            plot_health(state.log_history, self.output_dir / "health.png")


def health_panels(rows: list[dict]) -> list[tuple[str, list[str]]]:
    """(title, keys drawn in it) for the signals these health rows logged, in plot order."""
    panels = [(title, [key]) for key, title in SIGNALS if any(key in row for row in rows)]
    for prefix, title in GROUPS:
        members = sorted({key for row in rows for key in row if key.startswith(prefix)})
        if members:
            panels.append((title, members))
    return panels


def plot_health(log_history: list[dict], path: Path) -> bool:
    """One small panel per logged signal, against the step; False when nothing was logged."""
    rows = [row for row in (health_row(r, r.get("step", 0)) for r in log_history) if row]
    panels = health_panels(rows)
    if not panels:
        return False
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cols = 3
    nrows = (len(panels) + cols - 1) // cols
    fig, axes = plt.subplots(nrows, cols, figsize=(4 * cols, 2.6 * nrows), squeeze=False)
    for ax, (title, keys) in zip(axes.flat, panels):
        for key in keys:
            points = [(row["step"], row[key]) for row in rows if key in row]
            ax.plot(*zip(*points), marker=".", label=key.rsplit("/", 1)[-1])
        if len(keys) > 1:
            ax.legend(fontsize=7)
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("step", fontsize=8)
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    fig.suptitle("GRPO health")
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True
