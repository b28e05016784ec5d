"""Does the model take the next search step? Free turns at the oracle's unfinished points.

    python -m eval.next_calls --model runs/smollm2-135m/sft/final \
        --trajectories runs/diagnostics/decision/oracle_varied_px0_test_sft_le2hops \
        --questions runs/diagnostics/focus/test_sft_le2hops.jsonl --world runs/data/world --datastore world

The companion of `eval.stop_decisions` (when to stop) and `eval.oracle_reading` (reading the
answer off a finished search). Here the context is the oracle's search for a held-out chain
question (bridge, 3-hop chain, lookup, inverse, hidden fact) cut right after a tool output at a point where the
oracle calls again because a hop's target has not been shown yet: the next entity's name, or the
answer. (The episode's first call follows the question, not a tool output, so hop-1 rows are the
points after a first call that did not show it.) The model writes its turn greedily and its call
is run against the datastore with the trajectories' own k and method. Scored: did it answer
instead (too early), repeat a call of the context, write an invalid one, and did its call's
output show the target's name (a looser test than the oracle's, which also wants the known entity
beside it), against the oracle's own next call at the same point (which now and then misses on
purpose, to show recovering).
"""
from __future__ import annotations

import json
from pathlib import Path

from agent.chat import parse_assistant
from agent.run import read_questions
from common.errors import UserError, cli_main
from common.io import atomic_write_json
from common.paths import runs_dir
from data.leakage import PAIRED
from data.trajectory_oracle import Drop, WorldIndex, visible
from eval.metrics import extract_answer
from eval.stats import mean_and_ci
from eval.oracle_reading import greedy_backend
from eval.stop_decisions import decision_points, probe_parser
from sft.data import read_trajectories

FREE_TOKENS = 256  # agent.run's default turn budget
KINDS = ("call", "repeat", "invalid", "answer", "no_call", "error")
def chain_targets(world: WorldIndex, question: dict) -> list[str]:
    """What each hop of a chain question makes visible: the next entity's name, last the answer."""
    try:
        known, targets = question["chain"][0], []
        for hop, relation in enumerate(question["relations"]):
            if relation.startswith("inv:"):  # the asked entity is the subject of a fact about the known one
                known = question["chain"][hop + 1]
                targets.append(world.entities[known]["name"])
            else:
                known, surface, _ = world.target(known, relation)
                targets.append(surface)
    except (KeyError, IndexError, Drop) as exc:
        raise UserError(f"question {question['id']}: its chain is not in this world ({exc!r}); pass the --world "
                        "its questions were built from") from None
    return targets


def needed(prefix: list[dict], targets: list[str]) -> tuple[int, str] | None:
    """(hop, target) of the first fact no tool output in `prefix` has shown yet."""
    shown = "\n".join(m["content"] for m in prefix if m["role"] == "tool")
    return next(((hop, t) for hop, t in enumerate(targets) if not visible(t, shown)), None)


def logged_tools(make_tools, prefix: list[dict]):
    """Tools whose log holds the context's calls, so that a repeat is refused as in an episode."""
    tools = make_tools()
    for message in prefix:
        for call in message.get("tool_calls") or []:
            tools.log.calls.append({"name": call["function"]["name"], "arguments": call["function"]["arguments"],
                                    "ok": True})
    return tools


def classify(completion, specs: dict, tools) -> tuple[str, str | None]:
    """(what the turn did, the output of its first call if it made a valid new one)."""
    if completion.error:  # e.g. a context over the budget: not the model's choice
        return "error", None
    text = completion.text
    turn = parse_assistant(text, specs)
    if not turn.has_tool_syntax:
        return ("answer" if extract_answer(text) is not None else "no_call"), None
    if turn.errors or not turn.tool_calls:
        return "invalid", None
    call = turn.tool_calls[0]["function"]
    if tools.log.made(call["name"], call["arguments"]):
        return "repeat", None
    return "call", tools._call(call["name"], call["arguments"])


def points(trajectories: list[dict], questions: dict, world: WorldIndex):
    """(trajectory row, prefix, hop, needed target, the oracle's next output) per unfinished point."""
    for row in trajectories:
        question = questions.get(row.get("question_id"))
        if question is None:
            raise UserError(f"{row.get('id')}: its question {row.get('question_id')} is not in --questions")
        if not all(question.get(key) for key in ("type", "chain", "relations")):
            raise UserError(f"question {question['id']} has no type, chain and relations: eval.next_calls needs "
                            "the synthetic world's questions (data/questions.py)")
        if question["type"] in PAIRED:  # two parallel lookups: no chain of facts to follow
            continue
        targets = chain_targets(world, question)
        for prefix, answers, _ in decision_points(row["messages"]):
            want = needed(prefix, targets)
            if answers is False and want is not None:
                oracle_output = row["messages"][len(prefix) + 1]["content"]
                yield row, prefix, want[0], want[1], oracle_output


def probe(backend, tools_schema, specs, make_tools, trajectories, questions, world) -> list[dict]:
    assert getattr(backend, "answer_threshold", None) is None, "the probe reads the model's own stop"
    found = list(points(trajectories, questions, world))
    completions = backend.complete([prefix for _, prefix, *_ in found], tools_schema)
    rows = []
    for (row, prefix, hop, target, oracle_output), completion in zip(found, completions):
        kind, output = classify(completion, specs, logged_tools(make_tools, prefix))
        rows.append({"id": row.get("id"), "type": row.get("type"), "hops": row.get("hops"), "hop": hop + 1,
                     "needed": target, "turn": completion.text, "kind": kind,
                     "shows": output is not None and visible(target, output),
                     "oracle_shows": visible(target, oracle_output)})
    return rows


def _rate(rows: list[dict], test) -> dict:
    rate, interval = mean_and_ci(test(r) for r in rows)
    return {"rate": rate, "ci": interval}


def summary(rows: list[dict]) -> dict:
    def cell(subset):
        return {"n": len(subset), "shows": _rate(subset, lambda r: r["shows"]),
                "oracle_shows": _rate(subset, lambda r: r["oracle_shows"]),
                **{kind: _rate(subset, lambda r, k=kind: r["kind"] == k)["rate"] for kind in KINDS}}

    return {**cell(rows), "by_hop": {f"fact of hop {h}": cell([r for r in rows if r["hop"] == h])
                                     for h in sorted({r["hop"] for r in rows})},
            "by_type": {t: cell([r for r in rows if r["type"] == t]) for t in sorted({r["type"] for r in rows})}}


def search_settings(path: str) -> tuple[int, str | None]:
    """The k and method the trajectories were built with (their manifest), so that both calls of a
    point search alike; the agent's defaults for trajectories without a manifest."""
    from agent.tools import DEFAULT_K

    manifest = (Path(path) if Path(path).is_dir() else Path(path).parent) / "manifest.json"
    config = json.loads(manifest.read_text()).get("config", {}) if manifest.is_file() else {}
    return config.get("k") or DEFAULT_K, config.get("method")


def main(argv=None) -> None:
    parser = probe_parser("Greedy next calls of a model at the oracle's unfinished points.")
    parser.add_argument("--questions", required=True, nargs="+", help="the question JSONL files they were built from")
    parser.add_argument("--world", default=str(runs_dir() / "data" / "world"), help="the world folder (entities and facts)")
    parser.add_argument("--datastore", default="world")
    parser.add_argument("--batch-size", type=int, default=8)
    args = parser.parse_args(argv)
    sets = {path: read_trajectories(path) for path in args.trajectories}
    questions = {q["id"]: q for path in args.questions for q in read_questions(path)}
    world = WorldIndex(Path(args.world))
    from agent.tools import SearchTools, tool_functions, tool_specs
    from datastore.retriever import Datastore

    retriever = Datastore.load(args.datastore)
    backend = greedy_backend(args, FREE_TOKENS)
    report = {}
    for path, trajectories in sets.items():
        k, method = search_settings(path)
        rows = probe(backend, tool_functions(SearchTools(None)), tool_specs(),
                     lambda: SearchTools(retriever, k, method), trajectories, questions, world)
        if not rows:
            raise UserError(f"{path}: no unfinished point of a chain question in these trajectories")
        report[path] = {"summary": summary(rows), "rows": rows}
        print(json.dumps({"trajectories": path, **{k: v for k, v in report[path]["summary"].items() if k != "by_type"}}))
    if args.out:
        atomic_write_json(Path(args.out), {"model": args.model, "sets": report})


if __name__ == "__main__":
    cli_main(main)
