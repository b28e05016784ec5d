"""Does an episode's result depend on the episodes batched beside it? The same questions, run twice.

    python -m eval.batch_invariance --out runs/diagnostics/batch_invariance/sft_float32 -- \
        --model runs/smollm2-135m/sft/final --questions runs/data/world/questions/test_heldout.jsonl --limit 128 \
        --dtype float32                                                  (make bench-invariance)

Everything after `--` is `agent.run`'s arguments (model, questions, --dtype, --batch-size, ...).
The questions run once in file order (out/forward) and once shuffled (out/shuffled, a fixed
seed), so most episodes get other batch mates: `agent.run` runs the questions in chunks of 64 and
batches a chunk's unfinished episodes by length each turn, so the shuffle changes which questions
share a chunk. `--order reverse` keeps every chunk's questions (128 questions reversed are the same
two chunks) and changes only the order of episodes tied in length: a milder change. `--order same`
runs file order twice: the control, which must agree in full, or the backend is not deterministic.

A greedy episode should not depend on its batch mates, but in bf16 a row's logits move with the
padding its batch needs, and near-ties flip: stop 63 saw 15 of 128 final answers change in bf16
(shuffled) and none in float32 (256 questions, each shuffled and reversed), which is why
`make eval` generates in float32.

Reports, over the questions: the share with the same final answer and the same whole episode
(Wilson intervals), EM of each pass and the questions it flips, and each pass's seconds. The
passes resume like `agent.run`, so a killed check goes on where it stopped.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from common.errors import UserError, cli_main
from common.io import atomic_write_json, write_jsonl
from eval.metrics import best_em
from eval.stats import wilson_ci

SHUFFLE_SEED = 0
SECOND_PASS = {"shuffle": "shuffled", "reverse": "reversed", "same": "again"}  # order -> the second pass's folder


def compare(first: dict[str, dict], second: dict[str, dict]) -> dict:
    """Agreement of two runs' records ({id: agent.run record}) on the questions both ran."""
    shared = [qid for qid in first if qid in second]
    if not shared:
        raise UserError("the two passes share no question: nothing to compare")
    n = len(shared)
    same_answer = sum(first[q]["prediction"] == second[q]["prediction"] for q in shared)
    same_episode = sum(first[q].get("messages") == second[q].get("messages") for q in shared)  # every turn and output
    em = [(best_em(first[q]["prediction"], first[q]["answers"]), best_em(second[q]["prediction"], second[q]["answers"]))
          for q in shared]  # predictions.jsonl holds no score: agent.run scores when it writes metrics.json

    def share(count: int) -> dict:
        low, high = wilson_ci(count, n)
        return {"count": count, "share": round(count / n, 3), "ci": [round(low, 3), round(high, 3)]}

    return {"questions": n, "same_answer": share(same_answer), "same_episode": share(same_episode),
            "em_first": round(sum(a for a, _ in em) / n, 3), "em_second": round(sum(b for _, b in em) / n, 3),
            "right_to_wrong": sum(a > b for a, b in em), "wrong_to_right": sum(b > a for a, b in em)}


def read_records(folder: Path) -> dict[str, dict]:
    """A pass's finished records, read as agent.run reads them when it resumes."""
    from agent.run import read_done

    path = folder / "predictions.jsonl"
    if not path.is_file():
        raise UserError(f"{path} does not exist: the pass did not run")
    return read_done(path)


def pass_questions(agent, out: Path, order: str) -> tuple[Path, Path]:
    """(the first pass's question file, the second pass's): the questions agent.run would read
    (its --questions, --limit and --where), in the order `order` asks for (`reorder`), written under `out`."""
    from agent.run import read_questions

    questions = read_questions(agent.questions, agent.limit, agent.where)
    files = []
    for name, rows in (("forward", questions), ("second", reorder(questions, order))):
        path = out / f"questions_{name}.jsonl"  # written every time: a resumed check may ask for more questions
        write_jsonl(path, rows)
        files.append(path)
    return files[0], files[1]


def reorder(questions: list[dict], order: str) -> list[dict]:
    """The second pass's questions: shuffled with a fixed seed, reversed, or as they are."""
    if order == "shuffle":
        import random

        shuffled = list(questions)
        random.Random(SHUFFLE_SEED).shuffle(shuffled)
        return shuffled
    return questions[::-1] if order == "reverse" else list(questions)


def run_check(out: Path, order: str, agent_args: list[str]) -> dict:
    """Both passes (each an agent.run over this check's question files) and their comparison."""
    from agent.run import parse_args, run

    if "--out" in agent_args:
        raise UserError("leave --out out of agent.run's arguments: each pass writes under the check's --out")
    agent = parse_args(agent_args + ["--out", str(out)])
    out.mkdir(parents=True, exist_ok=True)
    names = ("forward", SECOND_PASS[order])
    earlier = json.loads((out / "report.json").read_text()).get("seconds_this_run", {}) \
        if (out / "report.json").exists() else {}
    seconds = {}
    for name, questions in zip(names, pass_questions(agent, out, order)):
        one_pass = argparse.Namespace(**{**vars(agent), "questions": str(questions), "out": str(out / name),
                                         "limit": None, "where": None})
        ran = run(one_pass)["run"]
        # a pass found finished keeps the time it took when it ran
        seconds[name] = ran["seconds_this_run"] if ran["n_run_now"] else earlier.get(name)
    report = {"order": order, "agent_args": agent_args,
              **compare(read_records(out / names[0]), read_records(out / names[1])), "seconds_this_run": seconds}
    atomic_write_json(out / "report.json", report)
    return report


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description="Run the same questions twice with other batch mates and compare.",
                                     usage="%(prog)s --out DIR [--order shuffle|reverse|same] -- AGENT.RUN ARGUMENTS")
    parser.add_argument("--out", required=True, help="folder for both passes and report.json")
    parser.add_argument("--order", choices=list(SECOND_PASS), default="shuffle",
                        help="the second pass: the questions shuffled (other chunks and batch mates), reversed (milder: "
                             "128 questions reversed keep both chunks of 64), or the same order (the control)")
    parser.add_argument("agent_args", nargs=argparse.REMAINDER, help="after --: agent.run's arguments")
    args = parser.parse_args(argv)
    agent_args = args.agent_args[1:] if args.agent_args[:1] == ["--"] else args.agent_args
    report = run_check(Path(args.out), args.order, agent_args)
    answer, episode = report["same_answer"], report["same_episode"]
    print(f"{report['questions']} questions, second pass {args.order}: same final answer {answer['share']:.3f} "
          f"{answer['ci']}, same episode {episode['share']:.3f} {episode['ci']}; EM {report['em_first']:.3f} -> "
          f"{report['em_second']:.3f} ({report['right_to_wrong']} right -> wrong, {report['wrong_to_right']} "
          f"wrong -> right) -> {Path(args.out) / 'report.json'}")


if __name__ == "__main__":
    cli_main(main)
