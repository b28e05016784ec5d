"""The episode loop: generate, parse tool calls, run the tools, append the results, repeat.

Episodes run in lockstep batches: each round, every unfinished episode gets one assistant turn
from the backend (one batched generate), then its tool calls run. An episode ends with an
answer, with a reply that has no tool call, at its turn budget, or when its context is full.
A malformed call (bad JSON, unknown tool, wrong arguments) is answered with an error message
that the model reads on its next turn; it never raises.
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field

from tqdm import tqdm

from agent.chat import parse_assistant
from agent.prompt import first_messages, rag_messages
from agent.tools import SearchTools, tool_functions, tool_specs


@dataclass
class EpisodeConfig:
    max_turns: int = 9  # assistant turns: every allowed tool call, plus one to answer
    max_tool_calls: int = 8
    closed_book: bool = False
    rag: bool = False  # naive RAG: one search with the question, shown up front; no tool calls

    @property
    def calls_tools(self) -> bool:
        return not (self.closed_book or self.rag)


@dataclass
class Episode:
    question: dict
    messages: list[dict]
    tools: SearchTools | None
    prediction: str | None = None
    finish: str = "running"  # answer | no_answer | budget | context | error
    tokens_generated: int = 0
    context_tokens: int = 0
    turns: int = 0
    error: str | None = None
    forced_answer: bool = False  # the calibrated stop opened the final turn (agent.run --answer-threshold)
    held_answers: int = 0  # turns whose opening `<answer>` the two-sided stop refused (agent.run --hold-below)
    released_holds: int = 0  # held turns that only repeated a call, replaced by the model's own (--release-repeats)
    seconds: float = 0.0
    _start: float = field(default_factory=time.perf_counter, repr=False)

    @property
    def done(self) -> bool:
        return self.finish != "running"

    def record(self) -> dict:
        """The per-question result: the trajectory (DESIGN.md contract) plus its costs."""
        log = self.tools.log if self.tools else None
        return {
            "id": self.question["id"], "question": self.question["question"],
            "answers": self.question.get("answers", []), "prediction": self.prediction, "finish": self.finish,
            "tokens_generated": self.tokens_generated, "context_tokens": self.context_tokens,
            "turns": self.turns, "tool_calls": log.n_calls if log else 0,
            "valid_tool_calls": log.n_valid if log else 0, "repeated_tool_calls": log.n_repeated if log else 0,
            "retrieved": log.retrieved if log else [], "opened": log.opened if log else [],
            "seconds": round(self.seconds, 3), "error": self.error, "forced_answer": self.forced_answer,
            "held_answers": self.held_answers, "released_holds": self.released_holds, "messages": self.messages,
            **{key: self.question.get(key) for key in ("hops", "type", "pool", "split", "source", "gold_doc_ids")},
        }


def run_episodes(questions: list[dict], backend, make_tools, config: EpisodeConfig,
                 progress: bool = True) -> list[Episode]:
    """Run one episode per question; `make_tools()` returns a fresh SearchTools per episode."""
    from eval.metrics import extract_answer

    specs = tool_specs()
    episodes = [_start_episode(q, make_tools, config) for q in questions]
    schema_tools = tool_functions(episodes[0].tools) if episodes and config.calls_tools else None
    bar = tqdm(total=len(episodes), desc="episodes", unit="ep", disable=not progress)
    active = list(episodes)
    while active:
        completions = backend.complete([ep.messages for ep in active], schema_tools)
        for episode, completion in zip(active, completions):
            _step(episode, completion, specs, config, extract_answer)
            if episode.done:
                episode.seconds = time.perf_counter() - episode._start
                bar.update(1)
        active = [ep for ep in active if not ep.done]
    bar.close()
    return episodes


def _start_episode(question: dict, make_tools, config: EpisodeConfig) -> Episode:
    if config.closed_book:
        return Episode(question, first_messages(question["question"], config.max_tool_calls, True), None)
    tools = make_tools()
    if config.rag:  # the search is logged, so evidence recall counts what the baseline was shown
        return Episode(question, rag_messages(question["question"], tools.search(question["question"])), tools)
    return Episode(question, first_messages(question["question"], config.max_tool_calls), tools)


def _step(episode: Episode, completion, specs: dict, config: EpisodeConfig, extract_answer) -> None:
    if completion.error:
        episode.finish = "context" if "context" in completion.error else "error"
        episode.error = completion.error
        return
    episode.turns += 1
    episode.tokens_generated += completion.tokens
    episode.held_answers += getattr(completion, "held", False)
    episode.released_holds += getattr(completion, "released", False)
    episode.context_tokens = completion.prompt_tokens + completion.tokens
    turn = parse_assistant(completion.text, specs) if config.calls_tools else None
    if turn is None or not turn.has_tool_syntax:
        episode.messages.append({"role": "assistant", "content": completion.text})
        episode.prediction = extract_answer(completion.text)
        episode.forced_answer = getattr(completion, "forced", False)
        episode.finish = "answer" if episode.prediction is not None else "no_answer"
        return
    if turn.errors:  # keep the raw text so the trajectory re-renders exactly as generated
        episode.messages.append({"role": "assistant", "content": completion.text})
        for reason in turn.errors:
            episode.messages.append({"role": "tool", "name": "error", "content": episode.tools._refuse(reason)})
    else:
        episode.messages.append({"role": "assistant", "content": turn.content, "tool_calls": turn.tool_calls})
        for call in turn.tool_calls:
            function = call["function"]
            result = _over_budget(episode, config) or episode.tools._call(function["name"], function["arguments"])
            episode.messages.append({"role": "tool", "name": function["name"], "content": result})
    if episode.turns >= config.max_turns:
        episode.finish = "budget"


def _over_budget(episode: Episode, config: EpisodeConfig) -> str | None:
    if episode.tools.log.n_calls >= config.max_tool_calls:
        return episode.tools._refuse(f"the budget of {config.max_tool_calls} tool calls is used up; answer now")
    return None
