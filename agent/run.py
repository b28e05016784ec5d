"""Run the search agent over a question set: predictions.jsonl (full trajectories) + metrics.json.

    python -m agent.run --model smollm2-135m --questions runs/data/world/questions/dev.jsonl \
        --datastore world --out runs/smollm2-135m/base/eval/dev

--model: tiny | smollm2-135m | a local checkpoint | a hub id (online) | an endpoint model name
with --backend openai --base-url URL. --closed-book runs without tools (the model answers from
memory), the proof that the questions need search; --rag is naive RAG (the question's own top-k
search results up front, one answer, no tool calls). A rerun resumes: questions already in
predictions.jsonl are kept, the rest are run and appended one finished batch at a time.
"""
from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

from common.errors import UserError, cli_main
from common.hardware import CpuShare, on_gpu
from common.io import atomic_write_json, iter_jsonl

from agent.backends import OpenAIBackend, Sampling, TransformersBackend, VLLMBackend
from agent.episode import EpisodeConfig, run_episodes
from agent.tools import DEFAULT_K, SearchTools


def read_questions(path: str, limit: int | None = None, where: list[str] | None = None) -> list[dict]:
    """The question records of `path`; those matching every `where` filter, then the first `limit`."""
    file = Path(path)
    if not file.is_file():
        raise UserError(f"question file {path} does not exist; build questions with `make data`")
    questions = []
    for lineno, row in iter_jsonl(file, "one question record {id, question, answers, ...} per line"):
        if not isinstance(row.get("id"), str) or not isinstance(row.get("question"), str):
            raise UserError(f"{path}, line {lineno}: a question record needs string \"id\" and \"question\" fields")
        questions.append(row)
    for condition in where or []:
        questions = matching(questions, condition, path)
    return questions[:limit] if limit else questions


def where_condition(condition: str) -> tuple[str, set[str]]:
    """"hops=1,2" -> ("hops", {"1", "2"}): a question passes when str(its field) is one of the values."""
    field, sep, values = condition.partition("=")
    if not sep or not field or not values:
        raise UserError(f"--where {condition!r}: write FIELD=VALUE[,VALUE...], e.g. --where hops=1,2")
    return field, set(values.split(","))


def matching(questions: list[dict], condition: str, path: str) -> list[dict]:
    """The questions whose field is one of the values: "hops=1,2" keeps 1- and 2-hop questions."""
    field, wanted = where_condition(condition)
    kept = [q for q in questions if str(q.get(field)) in wanted]
    if not kept:
        seen = sorted({str(q.get(field)) for q in questions})[:10]
        raise UserError(f"--where {condition}: no question in {path} matches; its {field} values: {', '.join(seen)}")
    return kept


def read_done(path: Path) -> dict[str, dict]:
    """Finished records of an earlier run. A torn last line (killed mid-write) is dropped, and
    episodes that failed on the backend (endpoint down) are run again."""
    done = {}
    if path.exists():
        for line in path.read_text().splitlines():
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue
            if record.get("finish") == "error":
                done.pop(record["id"], None)
            else:
                done[record["id"]] = record
    return done


def make_backend(args):
    sampling = Sampling(args.max_new_tokens, args.temperature, args.top_p, args.max_context_tokens)
    if args.backend == "openai":
        if not args.base_url:
            raise UserError("--backend openai needs --base-url (e.g. http://127.0.0.1:8001/v1)")
        return OpenAIBackend(args.base_url, args.model, sampling, api_key=os.environ.get("OPENAI_API_KEY", "EMPTY"),
                             concurrency=args.concurrency)
    from agent.chat import prepare_tokenizer
    from agent.models import load_model, resolve_model

    if args.backend == "vllm":
        from transformers import AutoTokenizer
        path = resolve_model(args.model)
        return VLLMBackend(path, prepare_tokenizer(AutoTokenizer.from_pretrained(path)), sampling)
    model, tokenizer = load_model(args.model, dtype=args.dtype)
    return TransformersBackend(model, prepare_tokenizer(tokenizer), sampling, batch_size=args.batch_size,
                               reuse_cache=not args.full_prefill, answer_threshold=args.answer_threshold,
                               hold_below=args.hold_below, max_turns=args.max_turns,
                               release_repeats=args.release_repeats)


def make_retriever(args):
    if args.closed_book:
        return None
    if args.retrieval_url:
        from datastore.client import RetrievalClient
        return RetrievalClient(args.retrieval_url)
    from datastore.retriever import Datastore
    return Datastore.load(args.datastore)


def score(records: list[dict]) -> dict:
    from eval.metrics import answer_shown, answers_after_unshown, best_em, best_f1, breakdown, evidence_recall, summarize

    for record in records:
        record["em"] = best_em(record["prediction"], record["answers"])
        record["f1"] = best_f1(record["prediction"], record["answers"])
        record["answered"] = record["prediction"] is not None
        gold = record.get("gold_doc_ids") or []
        record["evidence_recall"] = evidence_recall(gold, record["retrieved"] + record["opened"]) if gold else None
        record["answer_shown"] = answer_shown(record["answers"], record.get("messages") or [])
        record["unshown_outputs"] = answers_after_unshown(record["answers"], record.get("question") or "",
                                                          record.get("messages") or [])
    return {"overall": summarize(records),
            **{f"by_{key}": breakdown(records, key) for key in ("hops", "type", "pool") if any(r.get(key) is not None for r in records)}}


def turn_cache_share(backend) -> float | None:
    """The share of this run's prompt tokens read from the turn cache instead of prefilled again."""
    cache = getattr(backend, "turn_cache", None)
    return round(cache.reused_tokens / cache.prompt_tokens, 3) if cache and cache.prompt_tokens else None


# what decides an episode: a folder resumed with another of these would mix two setups in one result
EPISODE_SETTINGS = ("model", "backend", "base_url", "datastore", "retrieval_url", "method", "k", "closed_book", "rag",
                    "dtype", "max_turns", "max_tool_calls", "max_new_tokens", "max_context_tokens", "temperature",
                    "top_p", "seed", "answer_threshold", "hold_below", "release_repeats")


def check_same_settings(out: Path, args, done: dict) -> None:
    """Refuse to add episodes to a folder whose episodes were run otherwise (out/settings.json).

    A folder from before settings.json is checked on what its records name: the stop settings."""
    wanted = {key: getattr(args, key) for key in EPISODE_SETTINGS}
    if not args.temperature:  # greedy: the sampling seed and top-p change nothing
        wanted.update(seed=None, top_p=None)
    path = out / "settings.json"
    stored = ([json.loads(path.read_text())] if path.exists() else
              [{"answer_threshold": r.get("answer_threshold"), "hold_below": r.get("hold_below", False)}
               for r in done.values()])
    stored = [{"release_repeats": False, **s} for s in stored]  # folders from before stop 54 ran without the release
    changed = [key for key in EPISODE_SETTINGS if any(key in s and s[key] != wanted[key] for s in stored)]
    if done and changed:
        flags = ", ".join("--" + key.replace("_", "-") for key in changed)
        raise UserError(f"{out / 'predictions.jsonl'} holds episodes run with another {flags}; use a new --out folder")
    atomic_write_json(path, wanted)


def run(args) -> dict:
    questions = read_questions(args.questions, args.limit, args.where)  # before anything is created on disk
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    predictions = out / "predictions.jsonl"
    done = read_done(predictions)
    stale = set(done) - {q["id"] for q in questions}
    if stale:
        raise UserError(f"{predictions} holds {len(stale)} questions not in {args.questions}; use a new --out folder")
    check_same_settings(out, args, done)
    todo = [q for q in questions if q["id"] not in done]
    print(f"{len(questions)} questions: {len(done)} already done, {len(todo)} to run")
    started, backend, cpu = time.perf_counter(), None, None
    if todo:
        import transformers

        transformers.set_seed(args.seed)  # sampled runs (--temperature > 0) repeat on the same machine
        backend, retriever = make_backend(args), make_retriever(args)
        # in metrics.json: a time measured beside another job says so. Started after loading, which
        # uses one core and would pull a short run's share down.
        cpu = CpuShare()
        config = EpisodeConfig(args.max_turns, args.max_tool_calls, args.closed_book, args.rag)
        with open(predictions, "a") as handle:
            for start in range(0, len(todo), args.chunk):
                episodes = run_episodes(todo[start:start + args.chunk], backend,
                                        lambda: SearchTools(retriever, k=args.k, method=args.method), config,
                                        progress=not args.quiet)
                for episode in episodes:
                    record = {**episode.record(), "answer_threshold": args.answer_threshold, "hold_below": args.hold_below,
                              "release_repeats": args.release_repeats}
                    done[record["id"]] = record
                    handle.write(json.dumps(record, ensure_ascii=False) + "\n")
                handle.flush()
    records = [done[q["id"]] for q in questions]
    metrics = score(records)
    metrics["run"] = {"model": args.model, "backend": args.backend, "questions": args.questions,
                      "datastore": None if args.closed_book else (args.retrieval_url or args.datastore),
                      "closed_book": args.closed_book, "rag": args.rag, "k": args.k, "max_turns": args.max_turns,
                      "max_new_tokens": args.max_new_tokens, "temperature": args.temperature, "seed": args.seed,
                      "seconds_this_run": round(time.perf_counter() - started, 1), "n_run_now": len(todo),
                      "cpu_share": cpu.report(on_cpu=args.backend == "transformers" and not on_gpu()) if cpu else None,
                      "prompt_tokens_from_turn_cache": turn_cache_share(backend),
                      "answer_threshold": args.answer_threshold, "hold_below": args.hold_below,
                      "forced_answers": sum(bool(r.get("forced_answer")) for r in records),
                      "release_repeats": args.release_repeats,
                      "held_answers": sum(r.get("held_answers", 0) for r in records),
                      "released_holds": sum(r.get("released_holds", 0) for r in records)}
    atomic_write_json(out / "metrics.json", metrics)
    overall = metrics["overall"]
    print(f"EM {overall['em']:.3f}  F1 {overall['f1']:.3f}  answer rate {overall['answer_rate']:.3f}  "
          f"tool calls {overall['tool_calls']:.2f}  -> {out}")
    return metrics


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description="Run the search agent over a question set.")
    parser.add_argument("--model", required=True)
    parser.add_argument("--questions", required=True, help="JSONL of question records")
    parser.add_argument("--out", required=True, help="folder for predictions.jsonl and metrics.json")
    parser.add_argument("--datastore", default="world", help="datastore name or folder (in-process retrieval)")
    parser.add_argument("--retrieval-url", help="use a `python -m datastore.serve` server instead")
    parser.add_argument("--method", choices=["bm25", "dense", "hybrid"], help="search method (default: the datastore's)")
    parser.add_argument("--k", type=int, default=DEFAULT_K, help="hits per search")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--closed-book", action="store_true", help="no tools: answer from memory")
    mode.add_argument("--rag", action="store_true", help="naive RAG: top-k results for the question, then answer")
    parser.add_argument("--backend", choices=["transformers", "vllm", "openai"], default="transformers")
    parser.add_argument("--base-url", help="OpenAI-compatible endpoint for --backend openai")
    parser.add_argument("--concurrency", type=int, default=8, help="parallel requests for --backend openai")
    parser.add_argument("--dtype", default="fast", help="fast: bfloat16 where the CPU has bf16 units, else float32; "
                        "auto: as saved")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--full-prefill", action="store_true",
                        help="re-read the whole conversation every turn instead of keeping its KV cache")
    parser.add_argument("--chunk", type=int, default=64, help="questions per checkpointed batch of episodes")
    parser.add_argument("--limit", type=int, help="only the first N questions (after --where)")
    parser.add_argument("--where", action="append", metavar="FIELD=V1,V2",
                        help="only questions whose field is one of the values (repeatable), e.g. --where pool=sft "
                             "--where hops=1,2")
    parser.add_argument("--max-turns", type=int, default=9, help="assistant turns (tool calls + 1 to answer)")
    parser.add_argument("--max-tool-calls", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=256)
    parser.add_argument("--max-context-tokens", type=int, default=4096)
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--top-p", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0, help="sampling seed (with --temperature > 0)")
    parser.add_argument("--answer-threshold", type=float,
                        help="after a tool output, answer when P(<answer>) reaches this (fit it on dev with "
                             "python -m eval.stop_decisions --fit-threshold; transformers backend only)")
    parser.add_argument("--hold-below", action="store_true",
                        help="two-sided stop: below --answer-threshold the turn may not open with <answer> "
                             "(except the last turn); use the two_sided threshold of eval.stop_decisions --fit-threshold")
    parser.add_argument("--release-repeats", action="store_true",
                        help="with --hold-below: a held turn that only repeats an earlier call (which the tools "
                             "refuse) is replaced by the model's own turn, the answer it wanted")
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args(argv)
    if args.answer_threshold is not None and not (0 < args.answer_threshold <= 1 and args.backend == "transformers"
                                                  and not (args.closed_book or args.rag)):
        parser.error("--answer-threshold takes a probability in (0, 1], with --backend transformers and tools "
                     "(not --closed-book or --rag)")
    if args.hold_below and args.answer_threshold is None:
        parser.error("--hold-below needs --answer-threshold (the two_sided one of eval.stop_decisions --fit-threshold)")
    if args.release_repeats and not args.hold_below:
        parser.error("--release-repeats releases the hold of --hold-below: add --hold-below")
    return args


def main(argv=None) -> None:
    run(parse_args(argv))


if __name__ == "__main__":
    cli_main(main)
