"""The reward registry: outcome, format and length rewards, by name, combined with recipe weights.

    reward_funcs: [em, kimi]          # recipe keys; TRL sums them with GRPOConfig.reward_weights
    reward_weights: [1.0, 1.0]

Every reward is a plain function of what GRPOTrainer passes to reward functions (keyword
arguments, one list entry per completion):
- `completions`: the rollout as messages: assistant turns ({"content", "tool_calls"} as TRL parsed
  them; a call TRL could not parse stays as raw `<tool_call>` text in "content") and tool turns;
- `completion_ids`: the completion's token ids, tool-output tokens included (TRL does not strip them);
- `prompts`, `trainer_state`, `log_extra`, `log_metric`, `environments`, and every dataset column
  (here `id`, `answers`, `gold_doc_ids`, ...);
- `tool_mask`: 1 for tokens the policy sampled, 0 for tool-output tokens. TRL keeps this mask for
  the loss but does not pass it to rewards; rl.trainer.AgentGRPOTrainer adds it as an extra field.

Lengths therefore count only the policy's own tokens: sum(tool_mask). A length reward asked to
measure a completion that has tool turns but no mask refuses (ValueError) rather than count tool
output. The answer is `eval.metrics.extract_answer` of the final assistant turn (one that makes no
tool call); EM/F1 are the evaluation's, over the answer aliases.

With `answer_needs_evidence: true` an answer is right only when the rollout also saw every gold
document of its question (in a search result or opened; the environment records them): a right
guess after no or too little search scores 0 in `em`/`f1`, and the length rewards treat it as wrong,
so Kimi's bonus for the shortest right answer cannot go to a guess. Yes/no and two-way comparison
questions have two possible answers: 30% of the SFT agent's right answers on the first 256 train_rl
questions came without their gold documents seen, and the pass-rate filter keeps such questions
because a guess is right only some of the time (stop 29). A question that names no gold documents
asks for none.

`evidence` is a retrieval reward, not an outcome: the share of the question's gold documents the
rollout saw, paid only to rollouts that end with an answer (so searching on without answering
never pays). On questions the SFT agent never answers right, every rollout's `em` is 0 and GRPO
has nothing to learn from; how much of the evidence a rollout found still differs within the group.
Mind GRPOConfig's `scale_rewards`: TRL's default ("group") divides a group's advantages by its
reward std, so a spread of 0.1 in `evidence` alone moves the policy as hard as a right answer does;
in stop 30 that taught a malformed `find` no reward asked for, and `none` did not (docs/lab_notebook.md).

Length penalties apply, by default, to correct answers only (`length_penalty_scope: correct`):
a wrong answer gets 0, so shortening can never beat answering and the agent is not pushed to give
up. With `scope="all"` they follow their papers but still never give a wrong answer a positive
reward (Kimi k1.5: min(0, lambda)).
"""
from __future__ import annotations

import inspect
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from eval.metrics import best_em, best_f1, evidence_recall, extract_answer

TRL_TOOL_ERROR = "{'error'"  # TRL's reply to a call it could not dispatch: str({"error": ...})
TOOL_ERROR = "Error:"  # agent.tools' reply to a failed or refused call
SCOPES = ("correct", "all")


# ---- reading an episode out of a completion ------------------------------------------------------
@dataclass
class EpisodeView:
    final_text: str | None  # content of the last assistant turn, if it makes no tool call
    prediction: str | None  # extract_answer(final_text)
    tool_calls: int  # calls the policy wrote: parsed ones plus unparsable <tool_call> blocks
    invalid_calls: int  # unparsable, undispatchable (unknown tool, bad arguments) or failed/refused
    ended_on_tool: bool  # stopped with a call pending: turn budget or length budget exhausted
    # the invalid calls by tool name ("unparsed": a <tool_call> block TRL could not read): a drift into
    # one malformed call (stop 30's `find` with a `query`) shows here while the overall rate stays noisy
    invalid_by_tool: Counter = field(default_factory=Counter)

    @property
    def answered(self) -> bool:
        return self.prediction is not None


def episode_view(completion) -> EpisodeView:
    """Parse one completion (TRL's list of messages, or plain text) into what the rewards need."""
    if isinstance(completion, str):
        completion = [{"role": "assistant", "content": completion}]
    calls = invalid = 0
    by_tool: Counter = Counter()
    for message in completion:
        content = message.get("content") or ""
        content = content if isinstance(content, str) else " ".join(p.get("text", "") for p in content)
        if message.get("role") == "assistant":
            calls += len(message.get("tool_calls") or [])
            raw = content.count("<tool_call>")  # what TRL could not parse stays as text
            calls, invalid = calls + raw, invalid + raw
            if raw:
                by_tool["unparsed"] += raw
        elif message.get("role") == "tool" and content.startswith((TOOL_ERROR, TRL_TOOL_ERROR)):
            invalid += 1
            by_tool[message.get("name") or "unknown"] += 1
    last = completion[-1] if completion else {"role": "assistant", "content": ""}
    final = None
    if last.get("role") == "assistant" and not last.get("tool_calls"):
        final = last.get("content") or ""
    ended_on_tool = last.get("role") == "tool" or bool(last.get("tool_calls"))
    return EpisodeView(final, extract_answer(final), calls, invalid, ended_on_tool, by_tool)


def policy_lengths(completion_ids, tool_mask=None, completions=None) -> list[int]:
    """Tokens the policy generated per completion: sum(tool_mask), never tool-output tokens."""
    if tool_mask is not None:
        return [int(sum(mask[: len(ids)])) for ids, mask in zip(completion_ids, tool_mask, strict=True)]
    if completions is not None and any(
            isinstance(c, list) and any(m.get("role") == "tool" for m in c) for c in completions):
        raise ValueError("length rewards need `tool_mask` for completions with tool turns (use rl.trainer.AgentGRPOTrainer)")
    return [len(ids) for ids in completion_ids]


def evidence_recalls(environments, needed_by: str) -> list[float | None]:
    """Per rollout: the share of its question's gold documents it saw (None when the question names none)."""
    if environments is None:
        raise ValueError(f"{needed_by} needs the rollouts' environments (rl.environment.SearchEnvironment)")
    return [evidence_recall(env.gold_doc_ids, env.documents_seen) for env in environments]


def evidence_seen(environments) -> list[bool]:
    """Per rollout: did it see every gold document of its question (True when the question names none)?"""
    return [recall in (None, 1.0) for recall in evidence_recalls(environments, "answer_needs_evidence")]


def _with_evidence(scores, environments, answer_needs_evidence: bool) -> list[float]:
    if not answer_needs_evidence:
        return scores
    return [score if seen else 0.0 for score, seen in zip(scores, evidence_seen(environments), strict=True)]


def _correct(completions, answers, environments=None, answer_needs_evidence: bool = False) -> list[bool]:
    return [score == 1.0 for score in em(completions, answers, environments, answer_needs_evidence)]


def _scoped(values, correct, scope) -> list[float]:
    """Length rewards for correct answers; for wrong ones 0 (scope=correct) or never above 0 (all)."""
    if scope not in SCOPES:
        raise ValueError(f"length_penalty_scope must be one of {', '.join(SCOPES)}, got {scope!r}")
    return [float(v) if ok else (0.0 if scope == "correct" else min(0.0, float(v))) for v, ok in zip(values, correct)]


def _group_keys(n: int, prompts=None, id=None) -> list:
    """Which completions share a prompt (a GRPO group): the question id, else the prompt itself."""
    if id is not None:
        return list(id)
    if prompts is not None:
        return [repr(p) for p in prompts]
    return [0] * n


# ---- the rewards --------------------------------------------------------------------------------
def em(completions, answers, environments=None, answer_needs_evidence: bool = False, **kwargs) -> list[float]:
    """1 when the final answer matches an alias exactly (normalized), else 0."""
    scores = [best_em(episode_view(c).prediction, a or []) for c, a in zip(completions, answers, strict=True)]
    return _with_evidence(scores, environments, answer_needs_evidence)


def f1(completions, answers, environments=None, answer_needs_evidence: bool = False, **kwargs) -> list[float]:
    """Best token F1 of the final answer over the aliases."""
    scores = [best_f1(episode_view(c).prediction, a or []) for c, a in zip(completions, answers, strict=True)]
    return _with_evidence(scores, environments, answer_needs_evidence)


def evidence(completions, environments=None, **kwargs) -> list[float]:
    """Evidence recall (gold documents seen / gold documents) for answered rollouts; 0 without an
    answer or when the question names no gold documents."""
    recalls = evidence_recalls(environments, "the evidence reward")
    return [float(recall or 0.0) if episode_view(completion).answered else 0.0
            for completion, recall in zip(completions, recalls, strict=True)]


def format_reward(completions, max_tool_calls: int = 8, **kwargs) -> list[float]:
    """Penalty in [-2, 0]: -1 without an <answer>, -0.5 x the share of invalid calls, -0.5 when the
    episode overran its budget (more calls than the prompt allows, or stopped with a call pending)."""
    rewards = []
    for completion in completions:
        view = episode_view(completion)
        penalty = 0.0 if view.answered else 1.0
        penalty += 0.5 * view.invalid_calls / view.tool_calls if view.tool_calls else 0.0
        penalty += 0.5 if view.ended_on_tool or view.tool_calls > max_tool_calls else 0.0
        rewards.append(-penalty)
    return rewards


def kimi(completions, completion_ids, answers, tool_mask=None, prompts=None, id=None,
         length_penalty_scope: str = "correct", environments=None, answer_needs_evidence: bool = False,
         **kwargs) -> list[float]:
    """Kimi k1.5 length reward, group-relative: lambda = 0.5 - (len - min_len) / (max_len - min_len)
    over the completions of one prompt (0 when all have the same length); correct answers get
    lambda, wrong ones 0 (scope=correct) or min(0, lambda) (scope=all, the paper's)."""
    lengths = policy_lengths(completion_ids, tool_mask, completions)
    keys = _group_keys(len(lengths), prompts, id)
    lams = []
    for key, length in zip(keys, lengths):
        group = [n for k, n in zip(keys, lengths) if k == key]
        low, high = min(group), max(group)
        lams.append(0.5 - (length - low) / (high - low) if high > low else 0.0)
    return _scoped(lams, _correct(completions, answers, environments, answer_needs_evidence), length_penalty_scope)


def target(completions, completion_ids, answers, tool_mask=None, target_length: int = 64,
           length_penalty_scope: str = "correct", environments=None, answer_needs_evidence: bool = False,
           **kwargs) -> list[float]:
    """L1-style: -|len - target| / target, clipped to [-1, 0]."""
    lengths = policy_lengths(completion_ids, tool_mask, completions)
    values = [-min(1.0, abs(n - target_length) / target_length) for n in lengths]
    return _scoped(values, _correct(completions, answers, environments, answer_needs_evidence), length_penalty_scope)


def overlong(completions, completion_ids, answers, tool_mask=None, overlong_max_tokens: int = 192,
             overlong_buffer: int = 64, length_penalty_scope: str = "correct", environments=None,
             answer_needs_evidence: bool = False, **kwargs) -> list[float]:
    """DAPO's soft overlong punishment (TRL's get_soft_overlong_punishment) on the policy's tokens:
    0 up to max - buffer, then linearly down to -1 at max, -1 beyond."""
    from trl.rewards import get_soft_overlong_punishment

    punish = get_soft_overlong_punishment(overlong_max_tokens, overlong_buffer)
    lengths = policy_lengths(completion_ids, tool_mask, completions)
    values = punish([[0] * n for n in lengths])
    return _scoped(values, _correct(completions, answers, environments, answer_needs_evidence), length_penalty_scope)


def tool_cost(completions, answers, tool_call_cost: float = 0.05, length_penalty_scope: str = "correct",
              environments=None, answer_needs_evidence: bool = False, **kwargs) -> list[float]:
    """-cost per tool call the policy wrote."""
    values = [-tool_call_cost * episode_view(c).tool_calls for c in completions]
    return _scoped(values, _correct(completions, answers, environments, answer_needs_evidence), length_penalty_scope)


REWARDS: dict[str, Callable[..., list[float]]] = {
    "em": em, "f1": f1, "evidence": evidence, "format": format_reward,
    "kimi": kimi, "target": target, "overlong": overlong, "tool_cost": tool_cost,
}
LENGTH_REWARDS = ("kimi", "target", "overlong", "tool_cost")


class NamedReward:
    """A registry function bound to its recipe settings; `__name__` is what TRL logs it under."""

    def __init__(self, name: str, settings: dict):
        self.__name__, self.func = name, REWARDS[name]
        accepted = inspect.signature(self.func).parameters
        self.settings = {key: value for key, value in settings.items() if key in accepted}

    def __call__(self, **kwargs) -> list[float]:
        return self.func(**{**kwargs, **self.settings})

    def __repr__(self) -> str:
        return f"NamedReward({self.__name__}, {self.settings})"


def build_rewards(names: list[str], weights: list[float] | None = None, **settings) -> list[NamedReward]:
    """Check names (and weights) against the registry; return the bound functions in order."""
    from common.errors import UserError

    if not names:
        raise UserError(f"reward_funcs is empty; list some of: {', '.join(REWARDS)}")
    unknown = [name for name in names if name not in REWARDS]
    if unknown:
        raise UserError(f"unknown reward(s) {', '.join(unknown)} in reward_funcs; the registry has: {', '.join(REWARDS)}")
    if len(set(names)) != len(names):
        raise UserError(f"reward_funcs lists a reward twice ({', '.join(names)}); give it one weight instead")
    if weights is not None and len(weights) != len(names):
        raise UserError(f"reward_weights has {len(weights)} value(s) but reward_funcs has {len(names)} "
                        f"({', '.join(names)}); give one weight per reward, in the same order")
    if settings.get("length_penalty_scope", "correct") not in SCOPES:
        raise UserError(f"length_penalty_scope must be one of {', '.join(SCOPES)}, got {settings['length_penalty_scope']!r}")
    return [NamedReward(name, settings) for name in names]
