"""Generation backends behind one interface: a batch of conversations in, one assistant turn each out.

- `TransformersBackend`: local model (CPU or one GPU), batched `generate` with left padding.
- `VLLMBackend`: vLLM's offline engine on GPUs (imported only when used; not in the CPU install).
- `OpenAIBackend`: any OpenAI-compatible `/v1/chat/completions` endpoint (a vLLM server, a hosted
  teacher), with a concurrency limit and retries with backoff; a question whose calls keep failing
  is reported as failed, never silently dropped.

Local backends render the conversation with the tokenizer's chat template and return raw text,
which `agent.chat.parse_assistant` splits into content and tool calls.
"""
from __future__ import annotations

import json
import math
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from agent.chat import render_tool_call

ANSWER_TAG = "<answer>"
TOOL_CALL_TAG = "<tool_call>"


@dataclass
class Completion:
    text: str  # the assistant's raw text, tool calls in hermes form
    tokens: int  # tokens generated this turn
    prompt_tokens: int  # tokens in the context before this turn
    error: str | None = None  # set when the backend could not produce a turn (overflow, endpoint down)
    forced: bool = False  # opened with `<answer>` by the calibrated stop (answer_threshold), not by the model
    held: bool = False  # greedy would have opened with `<answer>` below the threshold; the two-sided stop refused it
    released: bool = False  # held, the turn only repeated an earlier call, so the model's own turn replaced it


@dataclass
class Sampling:
    max_new_tokens: int = 256
    temperature: float = 0.0  # 0 = greedy
    top_p: float = 1.0
    max_context_tokens: int = 4096


class TransformersBackend:
    """`reuse_cache`: keep each conversation's KV cache between turns (agent/turn_cache.py), so a
    turn prefills only its new tokens; conversations are told apart by the list object passed in."""

    def __init__(self, model, tokenizer, sampling: Sampling, batch_size: int = 16, reuse_cache: bool = True,
                 answer_threshold: float | None = None, hold_below: bool = False, max_turns: int | None = None,
                 release_repeats: bool = False):
        from agent.turn_cache import TurnCache

        self.model, self.tokenizer, self.sampling, self.batch_size = model, tokenizer, sampling, batch_size
        self.turn_cache = TurnCache(model.config) if reuse_cache else None
        # the calibrated stop: force `<answer>` at P >= threshold; with hold_below, also refuse it below
        # (except on the episode's last turn, `max_turns`, where only an answer can still score)
        self.answer_threshold, self.hold_below, self.max_turns = answer_threshold, hold_below, max_turns
        self.release_repeats = release_repeats  # a held turn that repeats an earlier call: see _release
        self._tool_specs = None  # agent.tools.tool_specs(), read once by the first release
        self.forced_answers = self.held_answers = self.released_holds = 0
        self.answer_tag = tokenizer(ANSWER_TAG, add_special_tokens=False)["input_ids"]
        self.tag_branch = branch_index(self.answer_tag, tokenizer(TOOL_CALL_TAG, add_special_tokens=False)["input_ids"])
        self.model.eval()

    def render(self, conversation: list[dict], tools: list | None) -> str:
        return self.tokenizer.apply_chat_template(conversation, tools=tools, add_generation_prompt=True, tokenize=False)

    def complete(self, conversations: list[list[dict]], tools: list | None) -> list[Completion]:
        prompts = [self.render(conv, tools) for conv in conversations]
        ids = [self.tokenizer(p, add_special_tokens=False)["input_ids"] for p in prompts]
        keys = [id(conversation) for conversation in conversations]
        stops = self._stops(conversations, ids, keys)
        completions = self.complete_ids([row + self.answer_tag if stop == "force" else row for row, stop in zip(ids, stops)],
                                        keys, hold=[stop if isinstance(stop, Hold) else None for stop in stops])
        if self.release_repeats:
            self._release(conversations, ids, keys, stops, completions)
        tag = len(self.answer_tag)
        for completion, stop in zip(completions, stops):
            if stop == "force" and not completion.error:  # the tag belongs to the turn, not to its context
                completion.text, completion.forced = ANSWER_TAG + completion.text, True
                completion.tokens, completion.prompt_tokens = completion.tokens + tag, completion.prompt_tokens - tag
                self.forced_answers += 1
            if isinstance(stop, Hold) and stop.greedy_answers and not completion.error:
                completion.held = True
                self.held_answers += 1
        return completions

    def _stops(self, conversations: list[list[dict]], ids: list[list[int]], keys: list) -> list:
        """A calibrated stop (`answer_threshold`): right after a tool output, "force" the turn to open
        with `<answer>` when the model gives that tag at least this probability, even where it is not
        the argmax (the stop ranks contexts better than its level: eval.stop_decisions). Below it the
        model decides as usual, or with `hold_below` its turn is drawn from its distribution given
        that it does not open with the tag (a `Hold`). Fit the threshold on dev oracle contexts,
        never on test. Costs one more forward pass per turn, over the tokens the turn cache does not
        hold, batched like the turns themselves."""
        stops: list = [None] * len(ids)
        if self.answer_threshold is None:
            return stops
        limit = self._prompt_limit(self.sampling.max_new_tokens)  # longer contexts: complete_ids reports the overflow
        asked = [i for i, (conversation, row) in enumerate(zip(conversations, ids))
                 if conversation[-1].get("role") == "tool" and len(row) + len(self.answer_tag) <= limit]
        for start in range(0, len(asked), self.batch_size):
            chunk = asked[start:start + self.batch_size]
            for i, (steps, greedy) in zip(chunk, self._tag_steps([ids[i] for i in chunk], [keys[i] for i in chunk])):
                last_turn = self.max_turns is not None and \
                    sum(m["role"] == "assistant" for m in conversations[i]) >= self.max_turns - 1
                stops[i] = opening_rule(steps, greedy, self.tag_branch, self.answer_threshold,
                                        hold=self.hold_below and not last_turn)
        return stops

    def _release(self, conversations: list[list[dict]], ids: list[list[int]], keys: list, stops: list,
                 completions: list[Completion]) -> None:
        """Release the hold where the held turn only repeats an earlier call: the tools would refuse
        it (an invalid call), and the model wanted to answer. Such a turn is replaced by the model's
        own, unheld (greedy: the answer). Stop 53 counted the two-sided stop's invalid calls: nearly
        all were these repeats, and the turn after the refusal answered in most episodes anyway."""
        from agent.chat import parse_assistant
        from agent.tools import tool_specs

        self._tool_specs = self._tool_specs or tool_specs()
        rows = [i for i, (stop, completion) in enumerate(zip(stops, completions))
                if isinstance(stop, Hold) and stop.greedy_answers and not completion.error
                and repeats_a_call(parse_assistant(completion.text, self._tool_specs).tool_calls, conversations[i])]
        if not rows:
            return
        for i, completion in zip(rows, self.complete_ids([ids[i] for i in rows], [keys[i] for i in rows], only_these=False)):
            completion.released, completions[i], stops[i] = True, completion, None
            self.released_holds += 1

    def _tag_steps(self, rows: list[list[int]], keys: list) -> list[tuple[list[float], bool]]:
        """`tag_steps` for a batch of contexts in one forward pass, reading each conversation's
        cached prefix (the turn cache is read, never written: the probe is not part of the episode)."""
        import torch

        from agent.turn_cache import TurnCache, generate_kwarg

        tag = self.answer_tag
        batch = (self.turn_cache or TurnCache(None)).batch([row + tag[:-1] for row in rows], keys,
                                                            self.tokenizer.pad_token_id)
        cached = batch.cache.get_seq_length() if batch.cache is not None else 0
        positions = (batch.attention_mask.cumsum(-1) - 1).clamp(min=0)  # from the mask, as generate does
        extra = {generate_kwarg(): batch.cache} if batch.cache is not None else {}
        device = self.model.device
        with torch.no_grad():
            logits = self.model(input_ids=batch.input_ids[:, cached:].to(device),
                                attention_mask=batch.attention_mask.to(device),
                                position_ids=positions[:, cached:].to(device),
                                logits_to_keep=len(tag), **extra).logits.float()
        return [tag_steps_of(dists, tag) for dists in logits.softmax(-1).cpu()]

    def _prompt_limit(self, max_new_tokens: int) -> int:
        """The longest prompt that leaves room for a whole turn in the context."""
        return self.sampling.max_context_tokens - max_new_tokens

    def complete_ids(self, ids: list[list[int]], keys: list | None = None,
                     max_new_tokens: int | None = None, hold: list | None = None,
                     only_these: bool = True) -> list[Completion]:
        """Turns for prompts already tokenized (e.g. a turn forced to open with a tag). `keys` tell
        conversations apart for the turn cache; without them each prompt counts as a new
        conversation and the cache of earlier ones is dropped (probes, not episodes).
        `max_new_tokens`: this call's turn budget (default: the sampling's). `hold`: per row, None
        or the `Hold` that keeps its turn from opening with `<answer>`. `only_these`: these are all the
        conversations still running, so the cache of any other is dropped (False: a second pass over
        some of this round's turns, which must not evict the rest)."""
        keys = keys if keys is not None else [("prompt", index) for index in range(len(ids))]
        hold = hold or [None] * len(ids)
        budget = max_new_tokens or self.sampling.max_new_tokens
        results: list[Completion | None] = [None] * len(ids)
        limit = self._prompt_limit(budget)
        runnable = []
        for index, row in enumerate(ids):
            if len(row) > limit:
                results[index] = Completion("", 0, len(row), error=f"context of {len(row)} tokens exceeds {limit}")
            else:
                runnable.append(index)
        if self.turn_cache and only_these:
            self.turn_cache.retain(keys)
        # rows that prefill similar numbers of tokens share a batch: less padding
        runnable.sort(key=lambda i: self.turn_cache.new_tokens(keys[i], ids[i]) if self.turn_cache else len(ids[i]))
        for start in range(0, len(runnable), self.batch_size):
            chunk = runnable[start:start + self.batch_size]
            for index, completion in zip(chunk, self._generate([ids[i] for i in chunk], [keys[i] for i in chunk],
                                                               budget, [hold[i] for i in chunk])):
                results[index] = completion
        return results

    def _generate(self, rows: list[list[int]], keys: list, max_new_tokens: int,
                  hold: list | None = None) -> list[Completion]:
        import torch

        from agent.turn_cache import TurnCache, generate_kwarg

        pad, eos = self.tokenizer.pad_token_id, self.tokenizer.eos_token_id
        batch = (self.turn_cache or TurnCache(None)).batch(rows, keys, pad)
        greedy = self.sampling.temperature <= 0
        extra = {generate_kwarg(): batch.cache} if batch.cache is not None else {}
        width = batch.input_ids.shape[1]
        if hold and any(hold):
            extra["logits_processor"] = OpeningBan(self.answer_tag, width, hold).as_list()
        with torch.no_grad():
            output = self.model.generate(
                input_ids=batch.input_ids, attention_mask=batch.attention_mask,
                max_new_tokens=max_new_tokens, do_sample=not greedy,
                temperature=None if greedy else self.sampling.temperature,
                top_p=None if greedy else self.sampling.top_p, top_k=None, pad_token_id=pad, eos_token_id=eos,
                return_dict_in_generate=True, **extra)
        generated = [_trim(tokens, pad, eos) for tokens in output.sequences[:, width:].tolist()]
        if self.turn_cache:
            cache = getattr(output, "cache", None) or getattr(output, "past_key_values", None)
            self.turn_cache.store(keys, rows, batch, generated, output.sequences.shape[1] - width, cache)
        return [Completion(self.tokenizer.decode(tokens, skip_special_tokens=True), len(tokens), len(row))
                for row, tokens in zip(rows, generated)]


def repeats_a_call(calls: list[dict], conversation: list[dict]) -> bool:
    """Whether any of a turn's parsed `calls` has the name and arguments of a call already made in
    `conversation` (the tools refuse such a call: agent.tools.ToolLog.made)."""
    made = [(call["function"]["name"], call["function"]["arguments"])
            for message in conversation if message.get("role") == "assistant" for call in message.get("tool_calls") or []]
    return any((call["function"]["name"], call["function"]["arguments"]) in made for call in calls)


def branch_index(tag: list[int], other: list[int]) -> int:
    """Where two tags' token ids part: `<answer>` and `<tool_call>` share SmolLM2's `<`, so a turn
    is kept from answering by refusing `answer` after it, not `<` (which would refuse calls too)."""
    shared = 0
    while shared < min(len(tag), len(other)) and tag[shared] == other[shared]:
        shared += 1
    if shared == len(tag):
        raise ValueError("the answer tag is a prefix of the tool-call tag: the two-sided stop cannot refuse it")
    return shared


@dataclass
class Hold:
    """A turn the two-sided stop keeps from opening with `<answer>`: `steps[j]` is the model's
    P(tag[j] | tag[:j]) up to the token where the tag parts from `<tool_call>` (branch_index)."""
    steps: list[float]
    greedy_answers: bool  # unheld, greedy decoding would have opened with the tag


class TurnOpening:
    """Base of the logits processors that steer how a turn opens with `tag`. `width`: the prompt's
    padded width, or None to take it from the first call (generate passes the whole sequence)."""

    def __init__(self, tag: list[int], width: int | None):
        self.tag, self.width = tag, width

    def step(self, input_ids) -> int:
        """How many tokens of the turn are already generated."""
        self.width = input_ids.shape[1] if self.width is None else self.width
        return input_ids.shape[1] - self.width

    def as_list(self):
        from transformers import LogitsProcessorList

        return LogitsProcessorList([self])


class OpeningBan(TurnOpening):
    """A logits processor for the two-sided stop: each held row's turn is drawn from the model's
    distribution given that it does not open with the tag. Refusing only the branch token would
    leave the mass the model put on `<` for `<answer>` on `<` (SmolLM2 then wrote `<no>no</no>`),
    so the shared tokens before it are down-weighted by what led to the tag: at step j < branch,
    tag[j]'s probability is multiplied by 1 - P(tag[j+1..branch] | tag[:j+1]); at the branch it is 0."""

    def __init__(self, tag: list[int], width: int | None, holds: list):
        super().__init__(tag, width)
        self.holds = {row: hold for row, hold in enumerate(holds) if isinstance(hold, Hold)}

    def __call__(self, input_ids, scores):
        step = self.step(input_ids)
        for row, hold in self.holds.items():
            if step >= len(hold.steps) or input_ids[row, self.width:].tolist() != self.tag[:step]:
                continue
            rest = math.prod(hold.steps[step + 1:])
            scores[row, self.tag[step]] += math.log(1 - rest) if rest < 1 else float("-inf")
        return scores


def opening_decision(model, ids: list[int], tag: list[int], branch: int, threshold: float, hold: bool):
    """The calibrated stop's rule for the turn after a tool output (`ids`, rendered up to the
    assistant's opening): "force" `<answer>` where the model gives it P >= threshold; below it a
    `Hold` (the turn may not open with it) when `hold`, else None (the model decides). One rule for
    evaluation (TransformersBackend) and for RL rollouts (rl.trainer, `rollout_stop_fit`)."""
    steps, greedy = tag_steps(model, ids, tag)
    return opening_rule(steps, greedy, branch, threshold, hold)


def opening_rule(steps: list[float], greedy: bool, branch: int, threshold: float, hold: bool):
    """`opening_decision` given the tag's steps (`tag_steps`), however they were computed."""
    if math.prod(steps) >= threshold:
        return "force"
    return Hold(steps[:branch + 1], greedy) if hold else None


class ForcedOpening(TurnOpening):
    """A logits processor that makes each "force" row's turn open with `tag`, sampled as the
    model's own tokens (RL rollouts train on them; evaluation puts the tag in the prompt instead)."""

    def __init__(self, tag: list[int], width: int | None, decisions: list):
        super().__init__(tag, width)
        self.rows = [row for row, decision in enumerate(decisions) if decision == "force"]

    def __call__(self, input_ids, scores):
        step = self.step(input_ids)
        if step < len(self.tag):
            for row in self.rows:
                token = self.tag[step]
                kept = scores[row, token].clone()
                scores[row] = float("-inf")
                scores[row, token] = kept
        return scores


def continuation_distributions(model, ids: list[int], continuation: list[int]):
    """The model's next-token distributions along `continuation` after `ids`, teacher-forced in one
    forward pass: row j is the distribution that predicts continuation[j]."""
    import torch

    with torch.no_grad():  # only the continuation's positions: the vocabulary head is large
        logits = model(torch.tensor([ids + continuation[:-1]], device=model.device),
                       logits_to_keep=len(continuation)).logits[0].float()
    return logits.softmax(-1)


def tag_steps(model, ids: list[int], tag: list[int]) -> tuple[list[float], bool]:
    """([P(tag[j] | ids + tag[:j]) for each j], whether greedy decoding writes `tag` after `ids`)."""
    return tag_steps_of(continuation_distributions(model, ids, tag), tag)


def tag_steps_of(dists, tag: list[int]) -> tuple[list[float], bool]:
    """`tag_steps` from the distributions that predict each tag token (row j predicts tag[j])."""
    import torch

    return dists[torch.arange(len(tag)), torch.tensor(tag)].tolist(), dists.argmax(-1).tolist() == tag


def tag_probability(model, ids: list[int], tag: list[int]) -> tuple[float, bool]:
    """(P(the next tokens after `ids` are `tag`), whether greedy decoding writes `tag` there): a tag
    such as `<answer>` spans several tokens, and its first may be shared."""
    steps, greedy = tag_steps(model, ids, tag)
    return math.prod(steps), greedy


def _trim(generated: list[int], pad: int, eos: int) -> list[int]:
    """The turn's tokens: up to and including the end of turn, without the batch's padding."""
    if eos in generated:
        generated = generated[:generated.index(eos) + 1]
    while generated and generated[-1] == pad and pad != eos:
        generated.pop()
    return generated


class VLLMBackend(TransformersBackend):
    """Same rendering as the transformers backend; generation by vLLM's offline engine (GPU)."""

    def __init__(self, model_path: str, tokenizer, sampling: Sampling, **engine_args):
        from vllm import LLM

        self.tokenizer, self.sampling = tokenizer, sampling
        self.llm = LLM(model=model_path, max_model_len=sampling.max_context_tokens, **engine_args)

    def complete(self, conversations: list[list[dict]], tools: list | None) -> list[Completion]:
        from vllm import SamplingParams

        params = SamplingParams(max_tokens=self.sampling.max_new_tokens, temperature=self.sampling.temperature,
                                top_p=self.sampling.top_p)
        prompts = [self.render(conv, tools) for conv in conversations]
        outputs = self.llm.generate(prompts, params, use_tqdm=False)
        return [Completion(out.outputs[0].text, len(out.outputs[0].token_ids), len(out.prompt_token_ids))
                for out in outputs]


class OpenAIBackend:
    """An OpenAI-compatible chat endpoint; native tool calls are turned back into hermes text."""

    def __init__(self, base_url: str, model: str, sampling: Sampling, api_key: str = "EMPTY",
                 concurrency: int = 8, retries: int = 4, backoff: float = 1.0, timeout: float = 120.0):
        import httpx

        self.model, self.sampling = model, sampling
        self.concurrency, self.retries, self.backoff = concurrency, retries, backoff
        self._http = httpx.Client(base_url=base_url.rstrip("/"), timeout=timeout,
                                  headers={"Authorization": f"Bearer {api_key}"})

    def complete(self, conversations: list[list[dict]], tools: list | None) -> list[Completion]:
        schemas = _schemas(tools)
        with ThreadPoolExecutor(max_workers=self.concurrency) as pool:
            return list(pool.map(lambda conv: self._one(conv, schemas), conversations))

    def _one(self, conversation: list[dict], schemas: list[dict] | None) -> Completion:
        body = {"model": self.model, "messages": to_openai_messages(conversation),
                "max_tokens": self.sampling.max_new_tokens, "temperature": self.sampling.temperature,
                "top_p": self.sampling.top_p}
        if schemas:
            body["tools"] = schemas
        last_error = "no attempt made"
        for attempt in range(self.retries + 1):
            if attempt:
                time.sleep(self.backoff * 2 ** (attempt - 1))
            try:
                response = self._http.post("/chat/completions", json=body)
                if response.status_code >= 500 or response.status_code == 429:
                    last_error = f"HTTP {response.status_code}"
                    continue
                response.raise_for_status()
                return _completion_from(response.json())
            except Exception as exc:  # transport errors, bad JSON, malformed payloads: retry, then report
                last_error = f"{type(exc).__name__}: {exc}"
        return Completion("", 0, 0, error=f"endpoint failed after {self.retries + 1} attempts ({last_error})")


def _schemas(tools: list | None) -> list[dict] | None:
    if not tools:
        return None
    from transformers.utils import get_json_schema

    return [get_json_schema(tool) for tool in tools]


def _completion_from(payload: dict) -> Completion:
    message = payload["choices"][0]["message"]
    text = message.get("content") or ""
    for call in message.get("tool_calls") or []:
        function = call["function"]
        arguments = function.get("arguments", "{}")
        try:
            arguments = json.loads(arguments) if isinstance(arguments, str) else arguments
        except json.JSONDecodeError:
            text += f"\n<tool_call>\n{{\"name\": \"{function['name']}\", \"arguments\": {arguments}\n</tool_call>"
            continue
        text += "\n" + render_tool_call({"function": {"name": function["name"], "arguments": arguments}})
    usage = payload.get("usage") or {}
    return Completion(text.strip(), usage.get("completion_tokens", 0), usage.get("prompt_tokens", 0))


def to_openai_messages(conversation: list[dict]) -> list[dict]:
    """Our messages (arguments as dicts, tool replies by name) -> the OpenAI wire format."""
    out, pending = [], []
    for message in conversation:
        if message["role"] == "assistant" and message.get("tool_calls"):
            calls = []
            for number, call in enumerate(message["tool_calls"]):
                call_id = f"call_{len(out)}_{number}"
                pending.append(call_id)
                calls.append({"id": call_id, "type": "function", "function": {
                    "name": call["function"]["name"], "arguments": json.dumps(call["function"]["arguments"])}})
            out.append({"role": "assistant", "content": message.get("content") or "", "tool_calls": calls})
        elif message["role"] == "tool" and pending:
            out.append({"role": "tool", "tool_call_id": pending.pop(0), "content": message["content"]})
        elif message["role"] == "tool":  # an error reply to an unparsable call: no id to answer
            out.append({"role": "user", "content": message["content"]})
        else:
            out.append({"role": message["role"], "content": message.get("content") or ""})
    return out
