"""SFT trajectories: oracle episodes that really call the search tools, or filtered teacher samples.

    python -m data.trajectories --questions runs/data/world/questions/train_sft.jsonl --world runs/data/world \
        --datastore world --out runs/data/world/trajectories/sft
    python -m data.trajectories --questions runs/data/world/questions/train_sft.jsonl --datastore world \
        --out runs/data/world/trajectories/teacher --teacher-url http://127.0.0.1:8001/v1 \
        --teacher-model Qwen/Qwen3-32B --samples 4

Oracle mode walks each question's facts (`chain`, `relations` of data/questions.py; "inv:r" hops are
asked backwards) with agent.tools.SearchTools: a short thought, a tool call, the real tool output,
..., then `<answer>first alias</answer>` (comparisons and yes/no first state both values). Queries
use only the question and names already read in tool outputs, in several styles (bare name, name +
relation words, a short question, now and then the whole question), or with `--wording canonical` in
one (name + relation word) with one thought template per situation. A hop whose page is not in the
results is searched again with other words (`recovered`); a fact the snippet does not show is read
with `find` or `open` (also at random, for variety). Where only other pages state a fact, a share
(--p-find-miss) of hops first look for it in the entity's own page, see the find miss, and read
elsewhere (`missed_find`, also `recovered`); a share (--p-repeat) repeat one call right after its
output and go on after the tools refuse it (`repeated_call`; the repeat is marked "train": false).
With `--plan` a chain question's first thought also names its later hops (stop 36).
With `--p-miss` a share of trajectories also get a missed-evidence row (data/trajectory_misses.py):
the trajectory up to a search whose snippet showed the fact, that search with the fact's pages
hidden, then the oracle's search with other words (stop 38).
Questions whose hop no query finds, or whose fact never shows, are dropped and counted by reason.
Teacher mode runs a served model through agent.run (resumable, in `<out>.teacher/`), `--samples` per
question at temperature > 0, and keeps the correct samples whose tool calls are all valid.

Every trajectory is replayed (each tool call re-run; outputs must be byte-identical) and must score
EM 1, or the command fails and writes nothing. Writes into --out: trajectories.jsonl ({id,
question_id, messages, answers, hops, type, pool, n_tool_calls, recovered, missed_find, opened,
repeated_call, origin; twin_of, or miss_of with hidden_docs and hidden_query}; what sft/data.py
reads), hf/ (save_to_disk; `messages` and `tools` are List(Json()) columns, so tool-call arguments
stay dicts as the Qwen2.5 template's `tojson` needs, and `tools` gives TRL's SFTTrainer the
schemas; datasets >= 5 infers the same from the JSONL), manifest.json, report.json, report.md.
API: replay(trajectory, retriever, k, method) -> [differences]; check(...); run(args). The oracle
(WorldIndex, Oracle, Drop) is in data/trajectory_oracle.py.
"""
from __future__ import annotations

import argparse
import inspect
import json
import time
from collections import Counter
from pathlib import Path

from tqdm import tqdm

from agent.prompt import prompt_hash
from agent.tools import DEFAULT_K, SearchTools
from common.errors import UserError, cli_main
from common.io import atomic_dir, atomic_write_json, config_hash, file_sha256, read_manifest, write_jsonl
from common.paths import runs_dir
from data import trajectory_misses as misses, trajectory_text as T, trajectory_twins as twins
from data.trajectory_oracle import Drop, Oracle, WorldIndex

VERSION = "trajectories-1"


class ReplayError(UserError):
    """A trajectory no longer replays (or does not score EM 1): the data would not be true."""


# ---- replay and checks ------------------------------------------------------------------------
def replay(trajectory: dict, retriever, k: int = DEFAULT_K, method: str | None = None) -> list[str]:
    """Re-run every tool call on fresh tools; the list of differences (empty: it replays exactly).
    A missed-evidence row (trajectory_misses.py) replays with its pages hidden from its one search,
    and ends with the call that searches again, which has no reply."""
    if trajectory.get("hidden_docs"):
        retriever = misses.Hiding(retriever, trajectory["hidden_docs"], trajectory["hidden_query"])
    tools, problems, pending = SearchTools(retriever, k, method), [], []
    for index, message in enumerate(trajectory["messages"]):
        if message["role"] == "assistant":
            if pending:
                problems.append(f"message {index}: {len(pending)} tool call(s) without a reply")
            pending = [call["function"] for call in message.get("tool_calls") or []]
        elif message["role"] == "tool":
            if not pending:
                problems.append(f"message {index}: a tool reply without a call")
                continue
            call = pending.pop(0)
            output = tools._call(call["name"], dict(call["arguments"]))
            if call["name"] != message.get("name") or output != message["content"]:
                problems.append(f"message {index}: {call['name']}({json.dumps(call['arguments'])}) now returns "
                                f"{output[:80]!r}, stored {message['content'][:80]!r}")
    if len(pending) > bool(trajectory.get("miss_of")):
        problems.append(f"{len(pending)} tool call(s) at the end without a reply")
    return problems


def check(trajectories: list[dict], retriever, k: int, method: str | None, progress: bool = True) -> None:
    """Replay every trajectory and score its answer; raise ReplayError naming the first failure."""
    from eval.metrics import best_em, extract_answer

    bad = []
    for trajectory in tqdm(trajectories, desc="replay", unit="traj", disable=not progress, mininterval=2.0):
        problems = replay(trajectory, retriever, k, method)
        if trajectory.get("miss_of"):
            problems += miss_problems(trajectory)
        elif not best_em(extract_answer(trajectory["messages"][-1]["content"]), trajectory["answers"]):
            problems.append("the final answer does not score EM 1")
        bad += [f"{trajectory['id']}: {p}" for p in problems]
    if bad:
        raise ReplayError(f"{len(bad)} trajectory check(s) failed, first: {bad[0]}. Nothing was written: the "
                          "datastore or the tools changed under the data (or are not deterministic)")


def miss_problems(row: dict) -> list[str]:
    """A missed-evidence row must not answer, and must end with one search not made before in it."""
    from eval.metrics import extract_answer

    last = row["messages"][-1]
    calls = [c["function"] for m in row["messages"] for c in m.get("tool_calls") or []]
    if extract_answer(last.get("content") or "") is not None or not last.get("tool_calls"):
        return ["a missed-evidence row must end with a search, not an answer"]
    return ["its last search repeats an earlier call"] if calls[-1] in calls[:-1] else []


# ---- outputs -------------------------------------------------------------------------------------
def token_stats(trajectories: list[dict], model: str = "smollm2-135m") -> dict:
    """Lengths under the model's tool template (as sft/data.py renders them) and the share of
    assistant tokens, the ones SFT trains on."""
    try:
        from transformers import AutoTokenizer
        from agent.chat import prepare_tokenizer, training_template
        from agent.models import resolve_model
        from agent.tools import tool_functions
        from sft.data import tokenize_trajectory
        tokenizer = prepare_tokenizer(AutoTokenizer.from_pretrained(resolve_model(model)))
    except Exception as exc:  # no converted model: the report says why
        return {"skipped": f"{type(exc).__name__}: {exc}"[:200]}
    template, tools = training_template(tokenizer), tool_functions(SearchTools(None))
    lengths, assistant = [], 0
    for trajectory in trajectories:
        ids, labels = tokenize_trajectory(tokenizer, trajectory["messages"], tools, template)
        lengths.append(len(ids))
        assistant += sum(label != -100 for label in labels)
    if not lengths:
        return {"skipped": "no trajectories"}
    lengths.sort()
    at = lambda q: lengths[min(len(lengths) - 1, int(q * len(lengths)))]  # noqa: E731
    return {"model": model, "mean": round(sum(lengths) / len(lengths), 1), "p50": at(0.5), "p95": at(0.95),
            "max": lengths[-1], "total": sum(lengths), "assistant_fraction": round(assistant / sum(lengths), 4)}


def report(trajectories: list[dict], drops: Counter, n_questions: int, seconds: float, model: str) -> dict:
    n = len(trajectories) or 1
    share = lambda key: round(sum(bool(t.get(key)) for t in trajectories) / n, 4)  # noqa: E731
    count = lambda f: dict(sorted(Counter(str(f(t)) for t in trajectories).items()))  # noqa: E731
    calls = [c["function"]["name"] for t in trajectories for m in t["messages"] for c in m.get("tool_calls") or []]
    return {"questions": n_questions, "trajectories": len(trajectories), "dropped": sum(drops.values()),
            "drops_by_reason": dict(drops.most_common()), "by_hops": count(lambda t: t["hops"]),
            "by_type": count(lambda t: t["type"]), "by_type_and_hops": count(lambda t: f"{t['type']}/{t['hops']}"),
            "tool_calls_mean": round(sum(t["n_tool_calls"] for t in trajectories) / n, 3),
            "tool_calls_histogram": count(lambda t: t["n_tool_calls"]),
            "twins": sum(t.get("origin") == "oracle_twin" for t in trajectories),
            "missed_evidence_rows": sum(t.get("origin") == "oracle_miss" for t in trajectories),
            "tool_calls_by_name": dict(Counter(calls)),
            "recovered_fraction": share("recovered"), "missed_find_fraction": share("missed_find"),
            "open_or_find_fraction": share("opened"), "repeated_call_fraction": share("repeated_call"),
            "tokens": token_stats(trajectories, model), "seconds": round(seconds, 1)}


def report_md(rep: dict, title: str) -> str:
    tok, lines = rep["tokens"], [f"# {title}", "", f"{rep['trajectories']} trajectories from {rep['questions']} "
                                 f"questions ({rep['dropped']} dropped) in {rep['seconds']} s.", ""]
    lines += [f"- tool calls per trajectory: {rep['tool_calls_mean']}; with recovery (a search again, or a find "
              f"that missed and reading elsewhere): {rep['recovered_fraction']:.1%}, of which a missed find: "
              f"{rep['missed_find_fraction']:.1%}; with open/find: {rep['open_or_find_fraction']:.1%}; with a refused "
              f"repeat (not trained on): {rep.get('repeated_call_fraction', 0):.1%}"]
    if rep.get("twins"):
        lines += [f"- contrastive twins (a chain trajectory's first hop asked as its own question, answered where the "
                  f"original moves on): {rep['twins']}"]
    if rep.get("missed_evidence_rows"):
        lines += [f"- missed-evidence rows (a trajectory up to a search that showed the fact, that search with the "
                  f"fact's pages hidden, then a search with other words; only that turn trained): "
                  f"{rep['missed_evidence_rows']}"]
    if "mean" in tok:
        lines += [f"- tokens ({tok['model']} tool template): mean {tok['mean']}, p50 {tok['p50']}, p95 {tok['p95']}, "
                  f"max {tok['max']}; assistant (trained-on) share {tok['assistant_fraction']:.1%}"]
    for key in ("by_hops", "by_type", "by_type_and_hops", "tool_calls_histogram", "tool_calls_by_name", "drops_by_reason"):
        lines += [f"- {key.replace('_', ' ')}: " + (", ".join(f"{k} {v}" for k, v in rep[key].items()) or "none")]
    return "\n".join(lines) + "\n"


def save(out: Path, trajectories: list[dict], manifest: dict, rep: dict, title: str) -> None:
    from datasets import Dataset, Features, Json, List, Value
    from transformers.utils import get_json_schema

    from agent.tools import tool_functions

    schemas = [get_json_schema(tool) for tool in tool_functions(SearchTools(None))]
    features = Features({"id": Value("string"), "question_id": Value("string"), "messages": List(Json()),
                         "tools": List(Json()), "answers": List(Value("string")), "hops": Value("int64"),
                         "type": Value("string"), "pool": Value("string"), "n_tool_calls": Value("int64"),
                         "recovered": Value("bool"), "missed_find": Value("bool"), "opened": Value("bool"),
                         "repeated_call": Value("bool"), "origin": Value("string"), "twin_of": Value("string"),
                         "miss_of": Value("string")})
    with atomic_dir(out) as tmp:
        write_jsonl(tmp / "trajectories.jsonl", trajectories)
        rows = [{**{key: t.get(key) for key in features}, "tools": schemas} for t in trajectories]
        Dataset.from_list(rows, features=features).save_to_disk(str(tmp / "hf"))
        atomic_write_json(tmp / "report.json", rep)
        (tmp / "report.md").write_text(report_md(rep, title))
        atomic_write_json(tmp / "manifest.json", manifest)


# ---- the two modes ----------------------------------------------------------------------------
def build_oracle(questions: list[dict], world: WorldIndex, retriever, args) -> tuple[list, Counter]:
    oracle = Oracle(world, retriever, args.k, args.method, args.seed, args.p_extra,
                    min(args.max_tool_calls, args.max_turns - 1), args.max_tool_calls, args.p_question,
                    args.p_find_miss, canonical=args.wording == "canonical", p_repeat=args.p_repeat,
                    next_opener=args.next_opener, check_first=args.check_first, plan=args.plan)
    kept, drops = [], Counter()
    for question in tqdm(questions, desc="oracle", unit="q", disable=args.quiet, mininterval=2.0):
        try:
            kept.extend(oracle.build_with_extras(question, args.p_twin, args.p_miss))
        except Drop as reason:
            drops[str(reason)] += 1
    return kept, drops


def build_teacher(questions: list[dict], args, out: Path) -> tuple[list, Counter]:
    """`--samples` episodes per question from an OpenAI-compatible teacher, run by agent.run in
    <out>.teacher/ (its predictions.jsonl resumes: finished samples are not asked again)."""
    from agent.run import parse_args as agent_args, run as agent_run
    from eval.metrics import best_em

    if args.temperature <= 0 and args.samples > 1:
        raise UserError("--samples > 1 needs --temperature > 0 (greedy samples would all be the same)")
    work = out.with_name(out.name + ".teacher")
    work.mkdir(parents=True, exist_ok=True)
    write_jsonl(work / "questions.jsonl", ({**q, "id": f"{q['id']}~s{n}"} for q in questions for n in range(args.samples)))
    flags = {"--backend": "openai", "--base-url": args.teacher_url, "--model": args.teacher_model,
             "--questions": work / "questions.jsonl", "--out": work, "--datastore": args.datastore, "--k": args.k,
             "--method": args.method, "--max-turns": args.max_turns, "--max-tool-calls": args.max_tool_calls,
             "--max-new-tokens": args.max_new_tokens, "--temperature": args.temperature, "--top-p": args.top_p,
             "--concurrency": args.concurrency, "--chunk": args.chunk}
    agent_run(agent_args([str(x) for flag, value in flags.items() if value is not None for x in (flag, value)]
                         + (["--quiet"] if args.quiet else [])))
    records = [json.loads(line) for line in (work / "predictions.jsonl").read_text().splitlines()]
    if any(r["finish"] == "error" for r in records):
        raise UserError(f"the teacher endpoint failed on some samples; rerun to resume ({work / 'predictions.jsonl'})")
    good, kept, drops = {}, [], Counter()
    for r in records:  # correct, answered, every call valid; identical samples once
        if r["finish"] == "answer" and best_em(r["prediction"], r["answers"]) and r["valid_tool_calls"] == r["tool_calls"]:
            good.setdefault(r["id"].rsplit("~s", 1)[0], {}).setdefault(json.dumps(r["messages"]), r)
    for question in questions:
        samples = list(good.get(question["id"], {}).values())
        drops.update([] if samples else ["no_correct_sample"])
        for n, r in enumerate(samples):
            searches = sum(c["function"]["name"] == "search" for m in r["messages"] for c in m.get("tool_calls") or [])
            kept.append({"id": f"{question['id']}-t{n}", "question_id": question["id"], "messages": r["messages"],
                         "answers": question["answers"], "hops": question.get("hops"), "type": question.get("type"),
                         "pool": question.get("pool"), "n_tool_calls": r["tool_calls"],
                         "recovered": searches > (question.get("hops") or 1),  # more searches than hops
                         "opened": bool(r["opened"]), "origin": f"teacher:{args.teacher_model}"})
    return kept, drops


def code_hash(retriever_type) -> str:
    """The oracle's, the tools' and the retriever's source: a change to any of them rebuilds the
    trajectories (snippets or find may answer differently), and SFT warns about older ones."""
    sources = (Path(__file__), Path(inspect.getfile(Oracle)), Path(T.__file__), Path(twins.__file__),
               Path(misses.__file__), Path(inspect.getfile(SearchTools)), Path(inspect.getfile(retriever_type)))
    return config_hash({"code": "".join(file_sha256(path) for path in sources)})


def inputs_manifest(args, retriever) -> dict:
    keys = ("k", "method", "seed", "p_extra", "p_question", "p_find_miss", "wording", "p_repeat", "p_twin", "p_miss",
            "next_opener", "check_first", "plan", "max_turns", "max_tool_calls", "where", "limit", "teacher_url",
            "teacher_model", "samples", "temperature", "top_p", "max_new_tokens")
    config = {key: getattr(args, key) for key in keys}
    inputs = {"questions": file_sha256(args.questions), "datastore": retriever.manifest.get("inputs"),
              "datastore_config": retriever.manifest.get("config"), "prompt": prompt_hash(),
              "code": code_hash(type(retriever))}
    if not args.teacher_url:
        inputs.update(entities=file_sha256(Path(args.world) / "entities.jsonl"),
                      facts=file_sha256(Path(args.world) / "facts.jsonl"))
    return {"generator": "data.trajectories", "version": VERSION, "config": config, "inputs": inputs,
            "config_hash": config_hash({"config": config, "inputs": inputs, "version": VERSION})}


def run(args) -> dict:
    from agent.run import read_questions
    from datastore.retriever import Datastore

    out, started = Path(args.out), time.perf_counter()
    if not Path(args.questions).is_file():
        raise UserError(f"question file {args.questions} does not exist; build questions with `make data`")
    retriever = Datastore.load(args.datastore)
    manifest = inputs_manifest(args, retriever)
    old = read_manifest(out)
    if old and old.get("config_hash") == manifest["config_hash"] and (out / "trajectories.jsonl").exists() \
            and not args.force:
        with open(out / "trajectories.jsonl") as handle:  # tool code can change under equal hashes
            sample = [json.loads(line) for _, line in zip(range(20), handle)]
        if not any(replay(t, retriever, args.k, args.method) for t in sample):
            print(f"{out} is up to date ({old['counts']['trajectories']} trajectories); --force rebuilds it")
            return old
        print(f"{out}: stored tool outputs no longer replay; rebuilding")
    import torch  # one intra-op thread: one-query dense encoding is ~20x slower when threads fight
    torch.set_num_threads(1)
    questions = read_questions(args.questions, args.limit, args.where)
    if any(not q.get("answers") for q in questions):
        raise UserError(f"{args.questions}: every question record needs an `answers` list (data/questions.py)")
    if args.teacher_url:
        trajectories, drops = build_teacher(questions, args, out)
    else:
        trajectories, drops = build_oracle(questions, WorldIndex(args.world), retriever, args)
    check(trajectories, retriever, args.k, args.method, progress=not args.quiet)
    rep = report(trajectories, drops, len(questions), time.perf_counter() - started, args.tokenizer)
    manifest["counts"] = {"questions": len(questions), "trajectories": len(trajectories), "dropped": dict(drops)}
    mode = "teacher" if args.teacher_url else "oracle"
    save(out, trajectories, manifest, rep, f"Trajectories: {Path(args.questions).name} ({mode})")
    print(f"wrote {len(trajectories)} trajectories ({sum(drops.values())} questions dropped: {dict(drops)}) "
          f"to {out}")
    return manifest


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description="Oracle or teacher SFT trajectories over the search tools.")
    add = parser.add_argument
    add("--questions", required=True, help="question JSONL (data/questions.py records)")
    add("--world", default=str(runs_dir() / "data" / "world"), help="world folder: entities.jsonl, facts.jsonl")
    add("--datastore", default="world", help="datastore name or folder")
    add("--out", required=True)
    add("--k", type=int, default=DEFAULT_K, help="hits per search (as the agent gets them)")
    add("--method", choices=["bm25", "dense", "hybrid"], help="search method (default: the datastore's)")
    add("--seed", type=int, default=0)
    add("--p-extra", type=float, default=0.15, help="share of hops read with open/find though the snippet shows it")
    add("--p-question", type=float, default=0.1, help="share of first hops first searched with the whole question")
    add("--p-find-miss", type=float, default=0.5,
        help="share of hops stated only on other pages that first look in the entity's own page (a find that "
             "misses), then read elsewhere")
    add("--p-repeat", type=float, default=0.0,
        help="share of trajectories that repeat one call right after its output, get the tools' refusal and go "
             "on (the repeat is marked \"train\": false: SFT never trains on it)")
    add("--p-twin", type=float, default=0.0,
        help="share of chain (bridge) trajectories that get a contrastive twin: the one-hop question of their "
             "first hop, the same trajectory up to the second hop, then the answer (data/trajectory_twins.py)")
    add("--p-miss", type=float, default=0.0,
        help="share of trajectories that get a missed-evidence row: the trajectory up to a search whose snippet "
             "showed the fact, that search with the fact's pages hidden, then the oracle's search with other words "
             "(only that turn is trained on; data/trajectory_misses.py)")
    add("--wording", choices=["varied", "canonical"], default="varied",
        help="varied: several thought templates and query styles, open/find at random (--p-extra) and the whole "
             "question as a query now and then (--p-question); canonical: one of each (both ignored)")
    add("--next-opener", metavar="WORD",
        help="a fixed word (e.g. \"Found:\") opening every thought that moves on to the next hop or to a "
             "comparison's second entity, so the choice to move on is one first token (default: none; most such "
             "thoughts open with the fact, i.e. a name)")
    add("--check-first", action="store_true",
        help="open every turn after a tool output with a check: \"Check <need>: <fact>.\" or \"Check <need>: not "
             "shown.\", so the choice to move on or read further follows the evidence (default: off)")
    add("--plan", action="store_true",
        help="a multi-hop chain question's first thought also names its later hops (\"Then I need the birthplace "
             "of that person.\"); everything else as without it (default: off)")
    add("--max-turns", type=int, default=8, help="agent.run's turn budget: at most turns - 1 tool calls")
    add("--max-tool-calls", type=int, default=8, help="the budget the system prompt states")
    add("--where", action="append", metavar="FIELD=V1,V2",
        help="only questions whose FIELD is one of the values (repeatable; as agent.run's)")
    add("--limit", type=int, help="only the first N questions (after --where)")
    add("--tokenizer", default="smollm2-135m", help="model whose tokenizer measures lengths in the report")
    add("--teacher-url", help="OpenAI-compatible endpoint (teacher mode)")
    add("--teacher-model", help="model name at --teacher-url")
    add("--samples", type=int, default=4, help="teacher samples per question")
    add("--temperature", type=float, default=0.7)
    add("--top-p", type=float, default=0.95)
    add("--max-new-tokens", type=int, default=512)
    add("--concurrency", type=int, default=8, help="parallel teacher requests")
    add("--chunk", type=int, default=64, help="teacher episodes per checkpointed batch")
    add("--force", action="store_true")
    add("--quiet", action="store_true")
    args = parser.parse_args(argv)
    if args.teacher_url and not args.teacher_model:
        parser.error("--teacher-url needs --teacher-model")
    if args.p_twin and args.teacher_url:
        parser.error("--p-twin makes twins of oracle trajectories, not of teacher samples; drop --p-twin")
    if args.p_twin and args.check_first:
        parser.error("--p-twin with --check-first: a twin's answer turn would need its own check; drop one of the two")
    if args.p_twin and args.plan:
        parser.error("--p-twin with --plan: a twin asks one hop, and its first thought would plan a second; drop one "
                     "of the two")
    if args.plan and args.teacher_url:
        parser.error("--plan words the oracle's first thoughts; a teacher writes its own: drop --plan")
    for name in ("p_twin", "p_miss"):
        if not 0 <= getattr(args, name) <= 1:
            parser.error(f"--{name.replace('_', '-')} is a share between 0 and 1, got {getattr(args, name)}")
    if args.p_miss and (args.teacher_url or args.check_first):
        parser.error("--p-miss rewrites oracle trajectories without checks (its search-again turn has no check); "
                     "drop --p-miss, --teacher-url or --check-first")
    return args


def main(argv=None) -> None:
    run(parse_args(argv))


if __name__ == "__main__":
    cli_main(main)
