"""Corpus readers: every supported corpus format becomes a stream of `{id, title, text}` documents.

A corpus is named by a spec, `path` (format guessed from the file) or `format:path`:

    jsonl:runs/data/world/corpus.jsonl         the project's own {id, title, text} lines
    wiki18:wiki-18.jsonl                       Search-R1 / FlashRAG {"id", "contents": "\"Title\"\\ntext"}
    hotpot:hotpot_dev_distractor_v1.json       HotpotQA official [{_id, question, context: [[title, [sents]]]}]
    title_sentences:corpus.json                {title: [sentences]}
    title_text:corpus.json                     [{title, text}]
    hf:org/name  or  hf:path/to/saved          a Hugging Face dataset (hub id when online, or load_from_disk)

Several specs joined with `+` are read one after the other (e.g. HotpotQA dev-500 plus the 2Wiki
distractors). Bad input raises UserError naming the file, the line and the expected format.
`chunk_documents` splits long documents into passages with stable ids (`<doc_id>` for a short
document, `<doc_id>#<n>` for its n-th chunk).
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Callable, Iterable, Iterator

from common.errors import UserError
from common.io import iter_jsonl

FORMATS = ("jsonl", "wiki18", "hotpot", "title_sentences", "title_text", "hf")

EXPECTED = {
    "jsonl": 'one JSON object per line with "id", "title" and "text"',
    "wiki18": 'one JSON object per line with "id" and "contents" ("\\"Title\\"\\ntext")',
    "hotpot": "a JSON list of HotpotQA records, each with a \"context\" of [title, [sentences]] pairs",
    "title_sentences": "a JSON object mapping each title to a list of sentences",
    "title_text": 'a JSON list of objects with "title" and "text"',
    "hf": "a datasets dataset (hub id or load_from_disk folder) with title/text or contents columns",
}


def parse_spec(spec: str) -> list[tuple[str, str]]:
    """Split `fmt:path+fmt:path` into [(format, path)], guessing formats that are not given."""
    parts = []
    for piece in spec.split("+"):
        fmt, sep, rest = piece.partition(":")
        if sep and fmt in FORMATS:
            parts.append((fmt, rest))
        else:
            parts.append((guess_format(piece), piece))
    return parts


def guess_format(path: str) -> str:
    file = Path(path)
    if not file.exists():
        raise UserError(f"corpus file {path} does not exist; pass an existing path as CORPUS=[format:]path")
    if file.is_dir():
        return "hf"
    with open(file, encoding="utf-8") as handle:
        head = handle.read(4096).lstrip()
    if file.suffix == ".jsonl" or (head.startswith("{") and "\n{" in head):
        first = head.splitlines()[0] if head else ""
        return "wiki18" if '"contents"' in first and '"title"' not in first else "jsonl"
    if head.startswith("{"):
        return "title_sentences"
    if head.startswith("["):
        return "hotpot" if '"context"' in head else "title_text"
    raise UserError(f"cannot tell the format of {path}; name it as one of {', '.join(FORMATS)}, e.g. jsonl:{path}")


def read_corpus(spec: str) -> Iterator[dict]:
    """Yield `{id, title, text}` documents from every part of the spec, ids unique across parts."""
    seen: set[str] = set()
    for fmt, path in parse_spec(spec):
        for doc in READERS[fmt](path):
            if doc["id"] in seen:
                raise UserError(f"{path}: document id {doc['id']!r} appears twice; ids must be unique across the corpus")
            seen.add(doc["id"])
            yield doc


def _json_lines(path: str, fmt: str) -> Iterator[tuple[int, dict]]:
    return iter_jsonl(_existing(path), EXPECTED[fmt])


def _require(row: dict, keys: Iterable[str], path: str, where: str, fmt: str) -> None:
    missing = [key for key in keys if not isinstance(row.get(key), str)]
    if missing:
        raise UserError(f"{path}, {where}: missing or non-string field(s) {', '.join(missing)}; expected {EXPECTED[fmt]}")


def read_jsonl(path: str) -> Iterator[dict]:
    for lineno, row in _json_lines(path, "jsonl"):
        if isinstance(row.get("id"), int):
            row["id"] = str(row["id"])
        _require(row, ("id", "title", "text"), path, f"line {lineno}", "jsonl")
        yield {"id": row["id"], "title": row["title"], "text": row["text"]}


def read_wiki18(path: str) -> Iterator[dict]:
    for lineno, row in _json_lines(path, "wiki18"):
        row["id"] = str(row.get("id", ""))
        _require(row, ("contents",), path, f"line {lineno}", "wiki18")
        title, _, text = row["contents"].partition("\n")
        yield {"id": row["id"] or f"wiki18-{lineno}", "title": title.strip().strip('"'), "text": text.strip()}


def _load_json(path: str, fmt: str):
    try:
        with open(_existing(path), encoding="utf-8") as handle:
            return json.load(handle)
    except json.JSONDecodeError as exc:
        raise UserError(f"{path}, line {exc.lineno}: not valid JSON ({exc.msg}); expected {EXPECTED[fmt]}") from None


def title_id(prefix: str, title: str) -> str:
    """A stable id for formats that only have titles (same title, same id, in any run)."""
    return f"{prefix}-{hashlib.sha1(title.encode()).hexdigest()[:12]}"


def read_hotpot(path: str) -> Iterator[dict]:
    """Official HotpotQA distractor json: the union of every question's context paragraphs."""
    records = _load_json(path, "hotpot")
    if not isinstance(records, list):
        raise UserError(f"{path}: top level is not a list; expected {EXPECTED['hotpot']}")
    seen: set[str] = set()
    for index, record in enumerate(records):
        context = record.get("context") if isinstance(record, dict) else None
        if not isinstance(context, list):
            raise UserError(f"{path}, record {index}: no \"context\" list; expected {EXPECTED['hotpot']}")
        for pair in context:
            if not (isinstance(pair, list) and len(pair) == 2 and isinstance(pair[1], list)):
                raise UserError(f"{path}, record {index}: a context entry is not [title, [sentences]]")
            title, sentences = pair
            if title not in seen:
                seen.add(title)
                yield {"id": title_id("hotpot", title), "title": title, "text": "".join(sentences).strip()}


def read_title_sentences(path: str) -> Iterator[dict]:
    data = _load_json(path, "title_sentences")
    if not isinstance(data, dict):
        raise UserError(f"{path}: top level is not an object; expected {EXPECTED['title_sentences']}")
    for title, sentences in data.items():
        if not isinstance(sentences, list):
            raise UserError(f"{path}, title {title!r}: value is not a list of sentences")
        yield {"id": title_id("doc", title), "title": title, "text": "".join(sentences).strip()}


def read_title_text(path: str) -> Iterator[dict]:
    data = _load_json(path, "title_text")
    if not isinstance(data, list):
        raise UserError(f"{path}: top level is not a list; expected {EXPECTED['title_text']}")
    for index, row in enumerate(data):
        if not isinstance(row, dict):
            raise UserError(f"{path}, item {index}: not an object; expected {EXPECTED['title_text']}")
        _require(row, ("title", "text"), path, f"item {index}", "title_text")
        doc_id = str(row["id"]) if "id" in row else title_id("doc", f"{row['title']}\n{row['text']}")
        yield {"id": doc_id, "title": row["title"], "text": row["text"]}


def read_hf(name: str) -> Iterator[dict]:
    """A datasets dataset: a folder saved with save_to_disk, or a hub id (needs the network)."""
    import datasets

    try:
        if Path(name).is_dir():
            data = datasets.load_from_disk(name)
        else:
            data = datasets.load_dataset(name, split="train")
    except Exception as exc:  # datasets raises many types; all mean "cannot read this"
        raise UserError(f"cannot load dataset {name!r} ({type(exc).__name__}: {exc}); pass a saved folder or a reachable hub id") from None
    if isinstance(data, datasets.DatasetDict):
        data = data["train"] if "train" in data else data[next(iter(data))]
    for index, row in enumerate(data):
        if "contents" in row and "title" not in row:
            title, _, text = row["contents"].partition("\n")
            yield {"id": str(row.get("id", index)), "title": title.strip().strip('"'), "text": text.strip()}
        elif "title" in row and "text" in row:
            yield {"id": str(row.get("id", index)), "title": row["title"], "text": row["text"]}
        else:
            raise UserError(f"dataset {name!r}, row {index}: has columns {sorted(row)}; expected {EXPECTED['hf']}")


def _existing(path: str) -> str:
    if not Path(path).is_file():
        raise UserError(f"corpus file {path} does not exist; check the path in CORPUS=[format:]path")
    return path


READERS: dict[str, Callable[[str], Iterator[dict]]] = {
    "jsonl": read_jsonl,
    "wiki18": read_wiki18,
    "hotpot": read_hotpot,
    "title_sentences": read_title_sentences,
    "title_text": read_title_text,
    "hf": read_hf,
}


def chunk_documents(docs: Iterable[dict], max_words: int = 200, overlap: int = 40) -> Iterator[dict]:
    """Split documents into passages of at most `max_words` words, overlapping by `overlap` words.

    Ids are stable: a document that fits stays `<doc_id>`; a longer one becomes `<doc_id>#0`,
    `<doc_id>#1`, ... so rebuilding from the same corpus gives the same passage ids.
    """
    if max_words <= 0 or not 0 <= overlap < max_words:
        raise UserError(f"chunking needs max_words > 0 and 0 <= overlap < max_words (got {max_words}, {overlap})")
    step = max_words - overlap
    for doc in docs:
        words = doc["text"].split()
        if len(words) <= max_words:
            yield {"id": doc["id"], "doc_id": doc["id"], "title": doc["title"], "text": doc["text"]}
            continue
        for number, start in enumerate(range(0, max(len(words) - overlap, 1), step)):
            text = " ".join(words[start:start + max_words])
            yield {"id": f"{doc['id']}#{number}", "doc_id": doc["id"], "title": doc["title"], "text": text}
