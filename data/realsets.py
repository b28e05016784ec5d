"""Real multi-hop QA sets -> question records, a corpus and a search datastore, in one command.

    python -m data.realsets --dataset hotpotqa_dev500 [--retrievers bm25,dense] [--force]
    python -m data.realsets --format musique --questions musique_ans_v1.0_dev.jsonl --name musique_dev
    python -m data.realsets --format browsecomp_plus --questions queries.jsonl --corpus corpus.jsonl --name bcp

writes runs/data/<name>/questions.jsonl (`{id, question, answers, hops, type, gold_doc_ids, split,
source}`), corpus.jsonl (`{id, title, text}`, for sets that carry their passages) and manifest.json
(input hashes, counts by type and hops, how many gold documents resolved), then builds
runs/datastore/<name> from that corpus (datastore.build). A set whose manifest matches is skipped.
Named sets (REAL_SETS) live in the real-data folder (REALDATA_DIR, default ../shared/realdata).
Sets without passages (Bamboogle, NQ) write questions only: search them over an external corpus
such as wiki-18 (`python -m datastore.build --corpus wiki18:wiki-18.jsonl`).

Formats (`--format`), with the official field names:
  hotpot           HotpotQA distractor json [{_id, question, answer, type, level, supporting_facts, context}];
                   passages are the context paragraphs, ids title_id("hotpot", title) as datastore.readers
  hotpot_titles    jsonl {id, question, answer, type, level, gold_titles} + a --corpus jsonl {id, title, text};
                   gold ids are the corpus rows titled with a gold title
  musique          jsonl {id, paragraphs: [{idx, title, paragraph_text, is_supporting}], question,
                   question_decomposition, answer, answer_aliases, answerable}; unanswerable ones are skipped
  2wiki            2WikiMultihopQA json [{_id, type, question, context, supporting_facts, evidences, answer}]
  flashrag         FlashRAG / Search-R1 jsonl {id, question, golden_answers}: no passages, no gold docs
  bamboogle        csv with a header Question,Answer
  browsecomp_plus  BrowseComp-Plus queries jsonl {query_id, query, answer, evidence_docs, gold_docs}
                   (doc lists of ids or of {docid, text}; gold = evidence_docs, else gold_docs) with plain-text
                   queries, and --corpus jsonl {docid, text[, url, title]} (title: given, a front-matter
                   "title:" line, or the first line)
  hf               a Hugging Face hub id (needs the network): --questions org/name [--hf-config C --hf-split S]
"""
from __future__ import annotations

import argparse
import csv
import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

from common.errors import UserError, cli_main
from common.io import atomic_write_json, file_sha256, read_manifest, write_jsonl, iter_jsonl
from common.paths import realdata_dir, runs_dir
from datastore.readers import parse_spec, read_corpus, read_hotpot, title_id

VERSION = 1

EXPECTED = {
    "hotpot": "a JSON list of HotpotQA records with _id, question, answer, type, supporting_facts, context",
    "hotpot_titles": 'one JSON object per line with "id", "question", "answer", "type" and "gold_titles"',
    "musique": 'one JSON object per line with "id", "question", "answer", "paragraphs" and "question_decomposition"',
    "2wiki": "a JSON list of 2WikiMultihopQA records with _id, type, question, context, supporting_facts, answer",
    "flashrag": 'one JSON object per line with "id", "question" and "golden_answers" (a list)',
    "bamboogle": "a CSV file with a header row Question,Answer",
    "browsecomp_plus": 'one JSON object per line with "query_id", "query", "answer" and "evidence_docs" or "gold_docs"',
    "browsecomp_corpus": 'one JSON object per line with "docid" and "text"',
    "hf": "a hub dataset with question/query and answer/answers/golden_answers columns",
}


@dataclass
class Loaded:
    """What a reader returns: question records (without split/source) and the passages, if any."""
    questions: list[dict]
    docs: list[dict] | None = None
    gold_unresolved: int = 0          # gold references (titles, ids) that name no passage
    skipped: dict = field(default_factory=dict)


@dataclass(frozen=True)
class RealSet:
    format: str
    questions: str                    # paths relative to realdata_dir()
    corpus: str | None = None
    distractors: str | None = None    # a datastore.readers spec of extra passages, relative paths
    split: str = "test"


REAL_SETS = {
    "hotpotqa_dev500": RealSet("hotpot_titles", "hotpotqa_dev500/questions.jsonl", "hotpotqa_dev500/corpus.jsonl",
                               "title_text:2wiki_distractors/corpus.json"),
    "hotpotqa_train100": RealSet("hotpot", "hotpotqa_train100/hotpot_train_distractor_sample.json", split="train"),
    "bamboogle": RealSet("bamboogle", "bamboogle/test.csv"),
    "nq_sample": RealSet("flashrag", "formats/flashrag_nq_test_sample.jsonl"),
}


# ---- small checks shared by the readers ----------------------------------------------------
def _fail(path, where: str, problem: str, fmt: str):
    raise UserError(f"{path}, {where}: {problem}; expected {EXPECTED[fmt]}")


def _text(row: dict, key: str, path, where: str, fmt: str) -> str:
    value = row.get(key)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str) or not value.strip():
        _fail(path, where, f"missing or empty field {key!r}", fmt)
    return value.strip()


def _answers(values, path, where: str, fmt: str) -> list[str]:
    """The distinct non-empty aliases, in order (numbers become strings)."""
    scalars = (str(v).strip() for v in values if isinstance(v, (str, int, float)) and not isinstance(v, bool))
    out = list(dict.fromkeys(v for v in scalars if v))
    if not out:
        _fail(path, where, "no non-empty answer", fmt)
    return out


def _json_lines(path, fmt: str) -> Iterator[tuple[str, dict]]:
    for lineno, row in iter_jsonl(_existing(path), EXPECTED[fmt]):
        yield f"line {lineno}", row


def _json_list(path, fmt: str) -> Iterator[tuple[str, dict]]:
    try:
        with open(_existing(path), encoding="utf-8") as handle:
            data = json.load(handle)
    except json.JSONDecodeError as exc:
        _fail(path, f"line {exc.lineno}", f"not valid JSON ({exc.msg})", fmt)
    if not isinstance(data, list):
        _fail(path, "top level", "not a JSON list", fmt)
    for index, row in enumerate(data):
        if not isinstance(row, dict):
            _fail(path, f"record {index}", "not a JSON object", fmt)
        yield f"record {index}", row


def _existing(path) -> str:
    if not Path(path).is_file():
        raise UserError(f"file {path} does not exist; check the path "
                        f"(the named sets live in REALDATA_DIR={realdata_dir()})")
    return str(path)


def _pairs(value, path, where: str, what: str, fmt: str) -> list:
    """[[title, x], ...] (official json) or {"title": [...], "sentences"/"sent_id": [...]} (HF)."""
    if isinstance(value, dict) and "title" in value:
        other = next((k for k in ("sentences", "sent_id") if k in value), None)
        value = [list(p) for p in zip(value["title"], value[other])] if other else None
    if not isinstance(value, list) or not all(isinstance(p, list) and len(p) == 2 for p in value):
        _fail(path, where, f"{what} is not a list of [title, ...] pairs", fmt)
    return value


# ---- readers ------------------------------------------------------------------------------
def _record(row: dict, path, where: str, fmt: str, answers: list, hops, kind, gold: list,
            id_key: str = "id", question_key: str = "question") -> dict:
    """A question record; `kind` None takes the row's own "type" field."""
    return {"id": _text(row, id_key, path, where, fmt), "question": _text(row, question_key, path, where, fmt),
            "answers": _answers(answers, path, where, fmt), "hops": hops,
            "type": kind or _text(row, "type", path, where, fmt), "gold_doc_ids": gold,
            **({"level": row["level"]} if isinstance(row.get("level"), str) else {})}


def _wiki_record(row: dict, path, where: str, fmt: str, prefix: str) -> dict:
    """One HotpotQA / 2Wiki record: gold ids are the supporting-fact titles' passage ids."""
    facts = _pairs(row.get("supporting_facts"), path, where, "supporting_facts", fmt)
    titles = list(dict.fromkeys(title for title, _ in facts))
    return _record(row, path, where, fmt, [row.get("answer")], 2 if fmt == "hotpot" else max(len(titles), 2), None,
                   [title_id(prefix, title) for title in titles], id_key="_id" if "_id" in row else "id")


def read_hotpot_set(path, corpus=None) -> Loaded:
    questions = [_wiki_record(row, path, where, "hotpot", "hotpot") for where, row in _json_list(path, "hotpot")]
    return Loaded(questions, list(read_hotpot(str(path))))


def read_2wiki(path, corpus=None) -> Loaded:
    questions, docs = [], {}
    for where, row in _json_list(path, "2wiki"):
        questions.append(_wiki_record(row, path, where, "2wiki", "2wiki"))
        for title, sentences in _pairs(row.get("context"), path, where, "context", "2wiki"):
            text = " ".join(s.strip() for s in sentences if isinstance(s, str) and s.strip())
            docs.setdefault(title, {"id": title_id("2wiki", title), "title": title, "text": text})
    return Loaded(questions, list(docs.values()))


def read_hotpot_titles(path, corpus=None) -> Loaded:
    if not corpus:
        raise UserError(f"{path}: hotpot_titles needs its passages; pass --corpus corpus.jsonl ({{id, title, text}})")
    docs = list(read_corpus(f"jsonl:{corpus}"))
    by_title: dict[str, list[str]] = {}
    for doc in docs:
        by_title.setdefault(doc["title"], []).append(doc["id"])
    questions, unresolved = [], 0
    for where, row in _json_lines(path, "hotpot_titles"):
        titles = row.get("gold_titles")
        if not isinstance(titles, list) or not all(isinstance(t, str) for t in titles):
            _fail(path, where, "\"gold_titles\" is not a list of titles", "hotpot_titles")
        unresolved += sum(title not in by_title for title in titles)
        gold = [doc_id for title in dict.fromkeys(titles) for doc_id in by_title.get(title, [])]
        questions.append(_record(row, path, where, "hotpot_titles", [row.get("answer")], 2, None, gold))
    return Loaded(questions, docs, unresolved)


def _musique_record(row: dict, path, where: str, docs: dict) -> dict | None:
    paragraphs, steps = row.get("paragraphs"), row.get("question_decomposition")
    if not isinstance(paragraphs, list) or not isinstance(steps, list):
        _fail(path, where, "\"paragraphs\" or \"question_decomposition\" is not a list", "musique")
    gold = []
    for paragraph in paragraphs:
        if not isinstance(paragraph, dict):
            _fail(path, where, "a paragraph is not an object", "musique")
        title = _text(paragraph, "title", path, where, "musique")
        text = _text(paragraph, "paragraph_text", path, where, "musique")
        doc_id = title_id("musique", f"{title}\n{text}")
        docs.setdefault(doc_id, {"id": doc_id, "title": title, "text": text})
        if paragraph.get("is_supporting"):
            gold.append(doc_id)
    if row.get("answerable") is False:
        return None
    answers = [row.get("answer"), *(row.get("answer_aliases") or [])]
    return _record(row, path, where, "musique", answers, len(steps), "musique", list(dict.fromkeys(gold)))


def read_musique(path, corpus=None) -> Loaded:
    questions, docs, skipped = [], {}, 0
    for where, row in _json_lines(path, "musique"):
        record = _musique_record(row, path, where, docs)
        skipped += record is None
        questions += [record] if record else []
    return Loaded(questions, list(docs.values()), skipped={"unanswerable": skipped} if skipped else {})


def read_flashrag(path, corpus=None) -> Loaded:
    questions = []
    for number, (where, row) in enumerate(_json_lines(path, "flashrag")):
        answers = row.get("golden_answers")
        if not isinstance(answers, list):
            _fail(path, where, "\"golden_answers\" is missing or not a list", "flashrag")
        meta = row.get("metadata") if isinstance(row.get("metadata"), dict) else {}
        row = {"id": f"q-{number}", **row}
        questions.append(_record(row, path, where, "flashrag", answers, None, str(meta.get("type") or "open"), []))
    return Loaded(questions)


def read_bamboogle(path, corpus=None) -> Loaded:
    with open(_existing(path), encoding="utf-8", newline="") as handle:
        reader = csv.DictReader(handle)
        if not reader.fieldnames or not {"Question", "Answer"} <= set(reader.fieldnames):
            _fail(path, "line 1", f"header is {reader.fieldnames}", "bamboogle")
        questions = []
        for number, row in enumerate(reader):
            where, row = f"row {number + 1} (line {reader.line_num})", {**row, "id": f"bamboogle-{number}"}
            questions.append(_record(row, path, where, "bamboogle", [row.get("Answer")], 2, "compositional", [],
                                     question_key="Question"))
    return Loaded(questions)


def _page_title(row: dict) -> str:
    if isinstance(row.get("title"), str) and row["title"].strip():
        return row["title"].strip()
    lines = [line.strip() for line in row["text"].splitlines() if line.strip()]
    titled = [line[6:].strip().strip('"') for line in lines[:10] if line.lower().startswith("title:")]
    first = next((line for line in lines if line != "---"), row.get("url") or row["docid"])
    return (titled[0] if titled and titled[0] else first)[:120]


def read_browsecomp_plus(path, corpus=None) -> Loaded:
    docs = None
    if corpus:
        docs = []
        for where, row in _json_lines(corpus, "browsecomp_corpus"):
            row = {**row, "docid": _text(row, "docid", corpus, where, "browsecomp_corpus"),
                   "text": _text(row, "text", corpus, where, "browsecomp_corpus")}
            docs.append({"id": row["docid"], "title": _page_title(row), "text": row["text"]})
    questions = []
    for where, row in _json_lines(path, "browsecomp_plus"):
        if "evidence_docs" not in row and "gold_docs" not in row:
            _fail(path, where, "neither \"evidence_docs\" nor \"gold_docs\"", "browsecomp_plus")
        docs_named = row.get("evidence_docs") or row.get("gold_docs") or []
        gold = list(dict.fromkeys(str(d.get("docid")) if isinstance(d, dict) else str(d) for d in docs_named))
        questions.append(_record(row, path, where, "browsecomp_plus", [row.get("answer")], None, "browsecomp", gold,
                                 id_key="query_id", question_key="query"))
    return Loaded(questions, docs)


def read_hf(name, corpus=None, hf_config: str | None = None, hf_split: str = "validation") -> Loaded:
    """A hub dataset (needs the network); MuSiQue- and HotpotQA-shaped rows keep their gold passages."""
    import datasets
    try:
        data = datasets.load_dataset(str(name), hf_config, split=hf_split)
    except Exception as exc:  # offline, unknown id, unknown split: all mean "cannot load this"
        raise UserError(f"cannot load hub dataset {name!r} (config {hf_config}, split {hf_split}): "
                        f"{type(exc).__name__}: {str(exc)[:200]}; this needs the network, "
                        "or download the files and pass them with --format and --questions") from None
    questions, docs = [], {}
    for index, row in enumerate(data):
        where = f"row {index}"
        if "paragraphs" in row and "question_decomposition" in row:
            record = _musique_record(dict(row), name, where, docs)
            questions += [record] if record else []
        elif "supporting_facts" in row and "context" in row:
            questions.append(_wiki_record(dict(row), name, where, "hotpot", "hotpot"))
            for title, sents in _pairs(row["context"], name, where, "context", "hotpot"):
                text = "".join(sents).strip()
                docs.setdefault(title, {"id": title_id("hotpot", title), "title": title, "text": text})
        else:
            key = next((k for k in ("question", "query") if k in row), "question")
            answers = next((row[k] for k in ("golden_answers", "answers", "answer") if k in row), None)
            answers = answers.get("text", []) if isinstance(answers, dict) else answers
            row = {"id": row.get("_id", index), **row}
            questions.append(_record(row, name, where, "hf", answers if isinstance(answers, list) else [answers],
                                     None, str(row.get("type") or "open"), [], question_key=key))
    return Loaded(questions, list(docs.values()) or None)


READERS: dict[str, Callable[..., Loaded]] = {
    "hotpot": read_hotpot_set, "hotpot_titles": read_hotpot_titles, "musique": read_musique, "2wiki": read_2wiki,
    "flashrag": read_flashrag, "bamboogle": read_bamboogle, "browsecomp_plus": read_browsecomp_plus, "hf": read_hf,
}


# ---- building a set --------------------------------------------------------------------------
def load_set(fmt: str, questions: str, corpus: str | None = None, distractors: str | None = None,
             split: str = "test", source: str = "", **options) -> Loaded:
    """Read a set and stamp split/source on every record; add distractor passages to its corpus."""
    if fmt not in READERS:
        raise UserError(f"unknown format {fmt!r}; use one of {', '.join(READERS)}")
    loaded = READERS[fmt](questions, corpus, **options)
    seen: set[str] = set()
    for record in loaded.questions:
        if record["id"] in seen:
            raise UserError(f"{questions}: question id {record['id']!r} appears twice; ids must be unique")
        seen.add(record["id"])
        record.update(split=split, source=source)
    if distractors:
        if loaded.docs is None:
            raise UserError(f"{questions}: format {fmt} has no passages to add distractors to")
        ids = {doc["id"] for doc in loaded.docs}
        extra = [doc for doc in read_corpus(distractors) if doc["id"] not in ids]
        loaded.docs = loaded.docs + extra
    return loaded


def _inputs(paths: list[str]) -> list[dict]:
    root, out = realdata_dir().resolve(), []
    for path in paths:
        file = Path(path)
        if not file.is_file():
            out.append({"path": str(path), "sha256": f"name:{path}"})
            continue
        shown = file.resolve().relative_to(root) if file.resolve().is_relative_to(root) else file.name
        out.append({"path": str(shown), "sha256": file_sha256(file)})
    return out


def gold_stats(questions: list[dict], docs: list[dict] | None, unresolved: int) -> dict | None:
    if docs is None:
        return None
    ids = {doc["id"] for doc in docs}
    flags = [[g in ids for g in q["gold_doc_ids"]] for q in questions]
    total, resolved = sum(map(len, flags)), sum(map(sum, flags))
    return {"gold_ids": total, "resolved": resolved, "unresolved_references": unresolved + total - resolved,
            "questions_all_resolved": sum(bool(f) and all(f) for f in flags),
            "questions_without_gold": sum(not f for f in flags)}


def prepare(name: str, fmt: str, questions: str, corpus: str | None = None, distractors: str | None = None,
            split: str = "test", retrievers: list[str] | None = None, force: bool = False,
            progress: bool = True, **options) -> dict:
    """Write runs/data/<name>/{questions,corpus}.jsonl + manifest.json, then build runs/datastore/<name>."""
    out = runs_dir() / "data" / name
    parts = [path for _, path in parse_spec(distractors)] if distractors else []
    wanted = {"version": VERSION, "name": name, "format": fmt, "split": split, "options": options,
              "inputs": _inputs([p for p in (questions, corpus, *parts) if p])}
    manifest = read_manifest(out) or {}
    files = ["questions.jsonl"] + (["corpus.jsonl"] if manifest.get("counts", {}).get("docs") else [])
    if not force and manifest.get("complete") and all((out / f).exists() for f in files) \
            and all(manifest.get(k) == v for k, v in wanted.items()):
        print(f"data {name}: up to date at {out} ({manifest['counts']['questions']} questions); skipped")
    else:
        loaded = load_set(fmt, questions, corpus, distractors, split, name, **options)
        (out / "manifest.json").unlink(missing_ok=True)   # a crash below must not leave a matching manifest
        write_jsonl(out / "questions.jsonl", loaded.questions)
        if loaded.docs is not None:
            write_jsonl(out / "corpus.jsonl", loaded.docs)
        counts = {"questions": len(loaded.questions), "docs": len(loaded.docs) if loaded.docs is not None else 0,
                  "by_type": dict(Counter(str(q["type"]) for q in loaded.questions)),
                  "by_hops": dict(Counter(str(q["hops"]) for q in loaded.questions)), "skipped": loaded.skipped}
        manifest = {**wanted, "complete": True, "counts": counts,
                    "gold": gold_stats(loaded.questions, loaded.docs, loaded.gold_unresolved)}
        atomic_write_json(out / "manifest.json", manifest)
        print(f"data {name}: {counts['questions']} questions, {counts['docs']} passages, by type {counts['by_type']}, "
              f"by hops {counts['by_hops']}; gold {manifest['gold']} -> {out}")
    if manifest["counts"]["docs"] and retrievers:
        from datastore.build import DatastoreConfig, build
        build(DatastoreConfig(name=name, corpus=f"jsonl:{out / 'corpus.jsonl'}", retrievers=list(retrievers)),
              progress=progress)
    elif not manifest["counts"]["docs"]:
        print(f"data {name}: this set carries no passages; search it over an external corpus (e.g. wiki-18: "
              "python -m datastore.build --corpus wiki18:wiki-18.jsonl)")
    return manifest


def prepare_named(dataset: str, retrievers: list[str] | None = ("bm25", "dense"), force: bool = False,
                  progress: bool = True, split: str | None = None) -> dict:
    if dataset not in REAL_SETS:
        raise UserError(f"unknown dataset {dataset!r}; named sets: {', '.join(REAL_SETS)} (or --format/--questions)")
    spec, root = REAL_SETS[dataset], realdata_dir()
    if not (root / spec.questions).is_file():
        raise UserError(f"{root / spec.questions} not found; set REALDATA_DIR to the shared/realdata folder")
    distractors = "+".join(f"{fmt}:{root / rel}" for fmt, _, rel in
                           (part.partition(":") for part in spec.distractors.split("+"))) if spec.distractors else None
    return prepare(dataset, spec.format, str(root / spec.questions), str(root / spec.corpus) if spec.corpus else None,
                   distractors, split or spec.split, list(retrievers) if retrievers else None, force, progress)


def load_questions(name: str) -> list[dict]:
    """The question records of runs/data/<name>/questions.jsonl (for eval and the other stages)."""
    path = runs_dir() / "data" / name / "questions.jsonl"
    if not path.is_file():
        raise UserError(f"no questions at {path}; make them with `make data DATASET={name}`")
    with open(path, encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", help=f"a named set: {', '.join(REAL_SETS)}")
    parser.add_argument("--format", choices=sorted(READERS), help="with --questions: read a file of this format")
    parser.add_argument("--questions", help="the question file (or hub id for --format hf)")
    parser.add_argument("--corpus", help="the passages file, for hotpot_titles and browsecomp_plus")
    parser.add_argument("--distractors", help="extra passages as a datastore.readers spec ([format:]path, joined by +)")
    parser.add_argument("--name", help="output name: runs/data/<name> and runs/datastore/<name>")
    parser.add_argument("--split", help="split stamped on the records (default: test; hotpotqa_train100: train)")
    parser.add_argument("--retrievers", default="bm25,dense", help="comma list of bm25,dense, or none for no datastore")
    parser.add_argument("--hf-config", help="hub dataset config (--format hf)")
    parser.add_argument("--hf-split", default="validation", help="hub dataset split (--format hf)")
    parser.add_argument("--force", action="store_true", help="rebuild even if the manifest matches")
    args = parser.parse_args(argv)
    retrievers = None if args.retrievers == "none" else args.retrievers.split(",")
    if args.dataset:
        prepare_named(args.dataset, retrievers, args.force, split=args.split)
    elif args.format and args.questions and args.name:
        options = {"hf_config": args.hf_config, "hf_split": args.hf_split} if args.format == "hf" else {}
        prepare(args.name, args.format, args.questions, args.corpus, args.distractors, args.split or "test",
                retrievers, args.force, **options)
    else:
        raise UserError("give --dataset NAME, or --format FORMAT --questions PATH --name NAME")


if __name__ == "__main__":
    cli_main(main)
