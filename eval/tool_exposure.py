"""How often do the tools put the asked fact in front of the agent? A check of the tools, no model.

    python -m eval.tool_exposure --world runs/data/world --datastore world --n 300

For `n` facts of the synthetic world that the subject's own page states (sampled with a fixed
seed), it asks the datastore the way an agent does and checks whether the fact's object shows
in what comes back:
- search: the subject's page among the top k hits, and the fact in its snippet, for three query
  styles (the bare name, name + a relation word, a short question), beside the snippet ranked by
  shared words only (what search showed before it ranked by meaning; from the page's text, which
  is its one passage in the synthetic world);
- find on the subject's page, with the page's own words (data/trajectory_text FIND_WORDS) and with
  an asker's words (REL_WORDS: "spouse", "population"), for the datastore's `find` and for a
  literal substring match (what find did before it ranked by meaning).
A model can only copy a fact that reaches its context, so these rates bound what reading can do.
Writes runs/bench/tool_exposure.{json,md} (or --out), each through a temporary file.
"""
from __future__ import annotations

import argparse
import random
from pathlib import Path

from tqdm import tqdm

from agent.tools import DEFAULT_K
from common.errors import UserError, cli_main
from common.io import atomic_write_json, atomic_write_text
from data import trajectory_text as T
from data.trajectory_oracle import WorldIndex, visible, word_key
from datastore.retriever import Datastore, make_snippet, split_sentences


def sample_facts(world: WorldIndex, n: int, seed: int) -> list[dict]:
    """Facts whose subject's own page states them, with the key the oracle's word lists use."""
    facts = []
    for fact in world.facts.values():
        subject = world.entities[fact["subject"]]
        key = word_key(world, fact["subject"], fact["relation"])
        if fact["subject"] in fact["stated_in"] and key in T.REL_WORDS:
            target = world.entities[fact["object"]]["name"] if "object" in fact else fact["surface"]
            facts.append({"subject": fact["subject"], "name": subject["name"], "key": key, "target": target})
    random.Random(seed).shuffle(facts)
    return facts[:n]


def literal_find(store: Datastore, doc_id: str, text: str) -> list[str]:
    return [s for s in split_sentences(store.document(doc_id)["text"]) if text.lower() in s.lower()]


def measure(store: Datastore, facts: list[dict], k: int) -> dict[str, dict]:
    counts: dict[str, list[int]] = {}

    def count(name: str, ok: bool) -> None:
        counts.setdefault(name, [0, 0])
        counts[name][0] += ok
        counts[name][1] += 1

    for fact in tqdm(facts, desc="facts", unit="fact"):
        name, key, target = fact["name"], fact["key"], fact["target"]
        queries = {"bare name": name, "name + relation word": f"{name} {T.REL_WORDS[key][0]}",
                   "short question": T.QUESTION_QUERIES[key][0].format(n=name)}
        for style, query in queries.items():
            hits = {hit.doc_id: hit for hit in store.search(query, k)}
            own = hits.get(fact["subject"])
            count(f"search, {style}: page in top {k}", own is not None)
            count(f"search, {style}: fact in its snippet", own is not None and visible(target, own.snippet))
            count(f"search, {style}: fact in a snippet by shared words",
                  own is not None and visible(target, make_snippet(store.document(fact["subject"])["text"], query)))
        for kind, words in (("page words", T.FIND_WORDS.get(key, [])), ("asker words", T.REL_WORDS[key])):
            for word in words:
                count(f"find, {kind}: literal match", visible(target, " ".join(literal_find(store, fact["subject"], word))))
                count(f"find, {kind}: datastore find", visible(target, " ".join(store.find(fact["subject"], word))))
    return {name: {"shown": shown, "n": n, "rate": round(shown / n, 3)} for name, (shown, n) in counts.items()}


def to_markdown(results: dict, args) -> str:
    lines = [f"# Tool exposure: datastore {args.datastore}, {args.n} facts (seed {args.seed}), top {args.k}", "",
             f"`python -m eval.tool_exposure --world {args.world} --datastore {args.datastore} --n {args.n}`", "",
             "| check | shown | n | rate |", "|---|---:|---:|---:|"]
    lines += [f"| {name} | {r['shown']} | {r['n']} | {r['rate']:.3f} |" for name, r in results.items()]
    return "\n".join(lines) + "\n"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--world", default="runs/data/world")
    parser.add_argument("--datastore", default="world")
    parser.add_argument("--n", type=int, default=300)
    parser.add_argument("--k", type=int, default=DEFAULT_K)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="runs/bench/tool_exposure")
    args = parser.parse_args(argv)
    if args.n < 1:
        raise UserError(f"--n must be at least 1 (got {args.n})")
    facts = sample_facts(WorldIndex(Path(args.world)), args.n, args.seed)
    results = measure(Datastore.load(args.datastore), facts, args.k)
    out = Path(args.out)
    atomic_write_json(out.with_suffix(".json"), {"args": vars(args), "results": results})
    markdown = to_markdown(results, args)
    atomic_write_text(out.with_suffix(".md"), markdown)
    print(markdown)


if __name__ == "__main__":
    cli_main(main)
