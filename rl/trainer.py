"""GRPOTrainer with small additions for the search agent; TRL still runs everything else.

1. The tools are listed in the agent's order in the prompt (TRL sorts them by name).
2. Reward functions get TRL's `tool_mask` (1 = a token the policy sampled, 0 = tool output): TRL
   uses it for the loss and for its logged completion lengths but does not pass it to rewards,
   whose `completion_ids` include the tool-output tokens. `_generate` returns it as an extra field,
   which TRL merges into the reward kwargs (the mechanism it uses for rollout_func extras).
3. Episode health metrics, logged with TRL's `_log_metric` (averaged over processes, flushed
   with the rewards): answer rate, tool calls, invalid-call rate and invalid calls per episode by
   tool, budget overruns, the policy's own tokens, and documents seen / evidence recall from the
   environments.
4. `add_response_parser`: TRL's tool-call parser also for the agent's compact ChatML tool template
   and for the training variant that agent.chat.prepare_tokenizer swaps in (Qwen3).
5. No backward pass for a micro-batch whose advantages are all zero (every rollout of its question
   scored the same) when there is no KL or auxiliary term: its loss and gradient are exactly zero.
   TRL's loss still runs forward, without gradients, so entropy and clip ratios are logged as
   before; the gradient is an exact zero, as TRL's would be, so AdamW's moments evolve the same.
   On the CPU default most groups have zero variance; a backward costs about twice its forward.

6. `rollout_stop`: rollouts decode with the agent's two-sided calibrated stop (agent.backends.
   opening_decision, the rule of eval stages sft_stop / rl_stop): each turn after a tool output opens
   with `<answer>` where the policy gives it P >= threshold, and may not open with it below (except
   the loop's last turn). GRPO then learns from the episodes the deployed agent would run. The
   constrained tokens are trained as sampled, with the policy's unconstrained log-probabilities.
   Evaluation's release of a held turn that repeats a call (agent.run --release-repeats, stop 54)
   is not applied here: TRL's loop samples each turn once, and a repeat stays an invalid call.

Token faithfulness is TRL's: in the tool loop the next turn's prompt is `prompt_ids +
completion_ids + tool_suffix_ids` (concatenation, no decode/re-encode of sampled tokens), and the
ids trained on are those same lists; tests/test_rl.py checks it for each supported chat template.
"""
from __future__ import annotations

import functools
from collections import Counter

import torch
from transformers import LogitsProcessorList
from trl import GRPOTrainer

from agent.backends import ANSWER_TAG, TOOL_CALL_TAG, ForcedOpening, Hold, OpeningBan, branch_index, opening_decision
from agent.tools import TOOL_NAMES
from eval.metrics import best_em
from rl.rewards import episode_view, evidence_recalls

# invalid calls per episode are logged by kind: the agent's tools, blocks TRL could not parse, any other name
INVALID_KINDS = (*TOOL_NAMES, "unparsed", "other")


def add_response_parser(tokenizer):
    """Set TRL's tool-call response parser for the tokenizer's chat template.

    GRPOTrainer does this itself for templates it recognises, but the agent's templates are not
    all in TRL's lookup: the compact ChatML tool template (agent.chat) and the training variant
    that prepare_tokenizer swaps in for Qwen3. Each parses like a template TRL knows
    (agent.chat.response_parser_template); use that one's parser.
    """
    import trl.chat_template_utils as ctu

    from agent.chat import response_parser_template

    if getattr(tokenizer, "response_template", None) is not None or getattr(tokenizer, "response_schema", None) is not None:
        return tokenizer
    template = tokenizer.chat_template
    try:
        tokenizer.chat_template = response_parser_template(template)
        ctu.add_response_schema(tokenizer)
    except ValueError:
        pass  # a template TRL does not know: GRPOTrainer raises its own clear error
    finally:
        tokenizer.chat_template = template
    return tokenizer


def samples_with_generate(args) -> bool:
    """Whether TRL samples rollouts with the model's `generate`, where the rollout stop's logits
    processors go (vLLM and continuous batching take other paths)."""
    return not (getattr(args, "use_vllm", False) or getattr(args, "use_transformers_continuous_batching", False))


class AgentGRPOTrainer(GRPOTrainer):
    def __init__(self, *args, rollout_stop: float | None = None, **kwargs):
        if rollout_stop is not None and not samples_with_generate(kwargs.get("args")):
            raise ValueError("rollout_stop_fit needs transformers' generate (use_vllm and "
                             "use_transformers_continuous_batching false)")
        super().__init__(*args, **kwargs)
        self.rollout_stop = rollout_stop
        self._tool_turn = 0  # inside TRL's tool loop: the number of the turn being generated
        self._stop_counts = Counter()
        if rollout_stop is not None:
            tokenize = functools.partial(self.processing_class, add_special_tokens=False)
            self._answer_tag = tokenize(ANSWER_TAG)["input_ids"]
            self._tag_branch = branch_index(self._answer_tag, tokenize(TOOL_CALL_TAG)["input_ids"])
        # TRL lists an environment's methods alphabetically (find, open, search); the agent's prompt
        # lists them as agent.tools.TOOL_NAMES. Same order here, so RL prompts are the agent's prompts.
        rank = {name: i for i, name in enumerate(TOOL_NAMES)}
        for tools in [*getattr(self, "_env_tools", {}).values(), self.tools]:
            tools.sort(key=lambda tool: rank.get(getattr(tool, "__name__", ""), len(rank)))

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        skip = self.gradient_is_zero(inputs)
        mode = "train" if model.training else "eval"
        self._metrics[mode]["backward_skipped"].append(float(skip))  # this process's micro-batches
        if not skip:
            return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        with torch.no_grad():
            super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        # a zero that reaches every trainable parameter: grads become zeros (not None), as TRL's would
        return sum(p.sum() for p in model.parameters() if p.requires_grad) * 0.0

    def gradient_is_zero(self, inputs) -> bool:
        """GRPO's loss is advantage x (clipped) ratio per token, plus beta x KL and an auxiliary loss."""
        return self.beta == 0.0 and not self.aux_loss_enabled and not bool(inputs["advantages"].any())

    def _tool_call_loop(self, *args, **kwargs):
        self._tool_turn = 1
        try:
            return super()._tool_call_loop(*args, **kwargs)
        finally:
            self._tool_turn = 0

    def _generate_single_turn(self, prompt_ids, *args, **kwargs):
        """A turn of every rollout still running; after a tool output, under the rollout stop."""
        if self.rollout_stop is None or not self._tool_turn:
            return super()._generate_single_turn(prompt_ids, *args, **kwargs)
        last = self._tool_turn >= self.max_tool_calling_iterations  # the loop runs no tool after this turn
        self._tool_turn += 1
        model = self.accelerator.unwrap_model(self.model_wrapped)
        with torch.no_grad():
            decisions = [opening_decision(model, ids, self._answer_tag, self._tag_branch, self.rollout_stop, hold=not last)
                         for ids in prompt_ids]
        self._stop_counts.update(turns=len(decisions), forced=decisions.count("force"),
                                 held=sum(isinstance(d, Hold) and d.greedy_answers for d in decisions))
        processors = LogitsProcessorList([ForcedOpening(self._answer_tag, None, decisions),
                                          OpeningBan(self._answer_tag, None, decisions)])
        # TRL calls generate without logits processors; this turn's call gets the stop's
        model.generate = functools.partial(type(model).generate, model, logits_processor=processors)
        try:
            return super()._generate_single_turn(prompt_ids, *args, **kwargs)
        finally:
            del model.generate

    def _generate(self, prompts: list):
        prompt_ids, completion_ids, tool_mask, completions, logprobs, extra_fields, *rest = super()._generate(prompts)
        masks = tool_mask if tool_mask is not None else [[1] * len(ids) for ids in completion_ids]
        extra_fields = {**extra_fields, "tool_mask": [list(map(int, mask)) for mask in masks]}
        self._log_episode_metrics(completions, masks)
        return (prompt_ids, completion_ids, tool_mask, completions, logprobs, extra_fields, *rest)

    def _log_episode_metrics(self, completions, masks) -> None:
        views = [episode_view(completion) for completion in completions]
        n = max(len(views), 1)
        calls = sum(view.tool_calls for view in views)
        self._log_metric("episode/answer_rate", sum(view.answered for view in views) / n)
        self._log_metric("episode/tool_calls", calls / n)
        if calls:
            self._log_metric("episode/invalid_call_rate", sum(view.invalid_calls for view in views) / calls)
        invalid = Counter()
        for view in views:
            for tool, times in view.invalid_by_tool.items():
                invalid[tool if tool in INVALID_KINDS else "other"] += times
        for kind in INVALID_KINDS:  # every kind each time, so a step's mean is over all its episodes
            self._log_metric(f"episode/invalid/{kind}", invalid[kind] / n)
        self._log_metric("episode/ended_on_tool", sum(view.ended_on_tool for view in views) / n)
        self._log_metric("episode/policy_tokens", sum(sum(mask) for mask in masks) / n)
        if self.rollout_stop is not None:  # shares of the turns after a tool output
            turns = max(self._stop_counts["turns"], 1)
            self._log_metric("episode/stop_forced", self._stop_counts["forced"] / turns)
            self._log_metric("episode/stop_held", self._stop_counts["held"] / turns)
            self._stop_counts.clear()
        environments = self.environments or []
        if environments and hasattr(environments[0], "documents_seen"):
            # with one question per step, its number of gold documents (its hops, for the world's questions)
            self._log_metric("episode/gold_docs", sum(len(env.gold_doc_ids) for env in environments) / len(environments))
            self._log_metric("episode/documents_seen", sum(len(env.documents_seen) for env in environments) / len(environments))
            recalls = evidence_recalls(environments, "the episode metrics")
            known = [recall for recall in recalls if recall is not None]  # None: the question names no gold documents
            if known:
                self._log_metric("episode/evidence_recall", sum(known) / len(known))
            # right answers given without all the gold documents seen: guesses (yes/no, two-way comparisons)
            unseen = sum(best_em(view.prediction, env.answers) == 1.0 and recall not in (None, 1.0)
                         for view, env, recall in zip(views, environments, recalls, strict=True))
            self._log_metric("episode/right_unseen", unseen / n)
