"""Why a model answers after one search: its first-token probabilities at the first decision.

    python -m eval.first_decision --model runs/smollm2-135m/sft/final \
        --predictions runs/smollm2-135m/sft/eval/world_test/predictions.jsonl

For each episode of an agent.run predictions file, the conversation up to the first tool output is
rendered with the model's chat template, and the model's next-token distribution is read: the
probability that the next turn starts `<answer>` (answering now) against everything else (another
tool call, whatever its first word). Greedy decoding answers whenever `<answer>`'s first token is
the single most likely token, even when most of the mass is on going on but spread over many first
words ("I'll", "The", an entity name ...). The report counts exactly that case.
"""
from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from common.errors import UserError, cli_main
from common.io import iter_jsonl


def first_decision_prefix(messages: list[dict]) -> list[dict] | None:
    """The messages up to and including the first run of tool outputs; None without a tool output."""
    first = next((i for i, m in enumerate(messages) if m["role"] == "tool"), None)
    if first is None:
        return None
    end = first
    while end + 1 < len(messages) and messages[end + 1]["role"] == "tool":
        end += 1
    return messages[:end + 1]


def probe(model, tokenizer, tools, episodes: list[dict]) -> list[dict]:
    """Per episode with a tool output: P(first token of `<answer>`) and whether it is the argmax."""
    import torch

    answer_id = tokenizer("<answer>", add_special_tokens=False).input_ids[0]
    rows = []
    for episode in episodes:
        prefix = first_decision_prefix(episode["messages"])
        if prefix is None:
            continue
        text = tokenizer.apply_chat_template(prefix, tools=tools, tokenize=False, add_generation_prompt=True)
        ids = tokenizer(text, add_special_tokens=False, return_tensors="pt").input_ids
        with torch.no_grad():
            probs = model(ids).logits[0, -1].float().softmax(-1)
        rows.append({"id": episode.get("id"), "p_answer": probs[answer_id].item(),
                     "answer_is_argmax": int(probs.argmax()) == answer_id})
    return rows


def summary(rows: list[dict]) -> dict:
    p = [r["p_answer"] for r in rows]
    return {"episodes": len(rows), "mean_p_answer": round(statistics.mean(p), 3) if p else None,
            "p_answer_over_half": sum(x > 0.5 for x in p),
            "answer_is_argmax": sum(r["answer_is_argmax"] for r in rows)}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description="First-token probabilities at the agent's first decision.")
    parser.add_argument("--model", required=True, help="checkpoint folder or model name")
    parser.add_argument("--predictions", required=True, help="an agent.run predictions.jsonl of that model")
    parser.add_argument("--dtype", default="fast", help="fast: bfloat16 where the CPU has bf16 units, else float32")
    args = parser.parse_args(argv)
    path = Path(args.predictions)
    if not path.is_file():
        raise UserError(f"no predictions file {path}: run agent.run or eval.run first")
    episodes = [row for _, row in iter_jsonl(path, "one agent.run record {id, messages, ...} per line")]
    from agent.chat import prepare_tokenizer
    from agent.models import load_model
    from agent.tools import SearchTools, tool_functions

    model, tokenizer = load_model(args.model, dtype=args.dtype)
    rows = probe(model.eval(), prepare_tokenizer(tokenizer), tool_functions(SearchTools(None)), episodes)
    print(json.dumps(summary(rows)))


if __name__ == "__main__":
    cli_main(main)
