"""Oracle and teacher trajectories (data/trajectories.py): exact replay, EM 1, no answer before it is
read, recovery from a confusable first search, the tool template round trip, teacher filter + resume."""
import json
import re
from pathlib import Path

import pytest
from fastapi import FastAPI, Request

from agent.prompt import first_messages
from agent.tools import DEFAULT_K
from data import trajectories as TJ
from data.leakage import PAIRED
from data.trajectory_oracle import cap, hit_lines, visible
from datastore.build import DatastoreConfig, build
from datastore.retriever import Datastore
from datastore.serve import app_in_thread
from common.errors import UserError
from eval.metrics import best_em, extract_answer


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    """A 400-document world, its bm25 datastore and data.questions' own splits, built once."""
    from data.question_candidates import Graph
    from data.questions import QuestionConfig, Searcher, synthesize
    from data.world import write_world

    root = tmp_path_factory.mktemp("traj")
    write_world(root / "world", 400, seed=0)
    build(DatastoreConfig(name="tw", corpus=str(root / "world" / "corpus.jsonl"), retrievers=["bm25"]),
          root=root / "datastore", progress=False)
    store = Datastore.load(root / "datastore")
    splits, _ = synthesize(Graph.load(root / "world"), Searcher(store, progress=False),
                           QuestionConfig(train_sft=60, train_rl=20, eval=10, qtext_sample=0), progress=False)
    questions = splits["train_sft"] + splits["train_rl"]
    (root / "train_sft.jsonl").write_text("".join(json.dumps(q) + "\n" for q in splits["train_sft"]))
    return root, store, questions


@pytest.fixture(scope="module")
def oracle_run(setup):
    root, store, questions = setup
    kept, drops = build_all(TJ.Oracle(TJ.WorldIndex(root / "world"), store), questions)
    return kept, drops, {q["id"]: q for q in questions}


def build_all(oracle, questions: list) -> tuple[list, dict]:
    """(the trajectories the oracle builds, {drop reason: count})."""
    kept, drops = [], {}
    for question in questions:
        try:
            kept.append(oracle.build(question))
        except TJ.Drop as reason:
            drops[str(reason)] = drops.get(str(reason), 0) + 1
    return kept, drops


def test_oracle_trajectories_replay_and_score(setup, oracle_run):
    _, store, questions = setup
    kept, drops, by_id = oracle_run
    assert len(kept) >= 0.9 * len(questions), drops
    assert {t["type"] for t in kept} >= {"lookup", "bridge", "chain", "comparison", "yesno", "inverse"}
    for t in kept:
        question = by_id[t["question_id"]]
        assert TJ.replay(t, store) == [], t["id"]
        messages = t["messages"]
        assert messages[:2] == first_messages(question["question"], 8)
        assert extract_answer(messages[-1]["content"]) == question["answers"][0]
        assert best_em(extract_answer(messages[-1]["content"]), question["answers"]) == 1
        calls = [m for m in messages if m["role"] == "assistant" and m.get("tool_calls")]
        assert len(calls) == t["n_tool_calls"] <= 7  # fits agent.run's 8 turns, the last of which answers
        for call, reply in zip(calls, [m for m in messages if m["role"] == "tool"]):
            assert call["content"] and len(call["tool_calls"]) == 1  # one thought, one call
            assert reply["name"] == call["tool_calls"][0]["function"]["name"]
            assert not reply["content"].startswith(("No sentence", "No documents", "Error"))  # no wasted calls
    assert any(t["opened"] for t in kept) and any(not t["opened"] for t in kept)
    TJ.check(kept, store, DEFAULT_K, None, progress=False)


def test_canonical_wording_is_one_policy(setup):
    """--wording canonical: trajectories still replay and score, every hop's first query is the name
    plus the relation's first word, and without the random find-miss detour the seed changes nothing
    (while it does change the varied wording)."""
    root, store, questions = setup
    world = TJ.WorldIndex(root / "world")

    def walks(seed: int, canonical: bool) -> list:
        return build_all(TJ.Oracle(world, store, seed=seed, p_find_miss=0.0, canonical=canonical), questions)[0]

    first, second = walks(0, True), walks(1, True)
    assert len(first) >= 0.9 * len(questions) and first == second
    assert walks(0, False) != walks(1, False)
    TJ.check(first, store, DEFAULT_K, None, progress=False)
    starts = {t["messages"][2]["content"].split(" ")[0] for t in first if t["type"] not in ("comparison", "yesno")}
    assert starts == {"First"}  # T.START[0]
    firsts = [t["messages"][2]["tool_calls"][0]["function"]["arguments"]["query"] for t in first]
    first_words = tuple(" " + words[0] for words in TJ.T.REL_WORDS.values())
    # name + first word (a walk over its call budget retries with other words: a few may differ)
    assert sum(q.endswith(first_words) for q in firsts) >= 0.95 * len(firsts)


def test_next_opener_opens_every_move_to_the_next_hop(setup, monkeypatch):
    """--next-opener: each thought before a next hop's first call opens with the word, no other
    thought does, and the walk (calls, outputs, answers) is the same as without it."""
    root, store, questions = setup
    world = TJ.WorldIndex(root / "world")
    plain = build_all(TJ.Oracle(world, store), questions)[0]
    made = []
    moving_on, pick = TJ.Oracle.moving_on, TJ.Oracle.pick
    def recorded(self, *args, **fields):
        made.append(moving_on(self, *args, **fields))
        return made[-1]
    monkeypatch.setattr(TJ.Oracle, "moving_on", recorded)

    def no_plain_move(self, options):  # a call site that still picks a plain template
        assert options is not TJ.T.NEXT and options is not TJ.T.COMPARE_NEXT
        return pick(self, options)
    monkeypatch.setattr(TJ.Oracle, "pick", no_plain_move)
    marked = build_all(TJ.Oracle(world, store, next_opener="Found:"), questions)[0]
    assert [t["id"] for t in plain] == [t["id"] for t in marked]
    TJ.check(marked, store, DEFAULT_K, None, progress=False)
    moves = 0
    for before, after in zip(plain, marked):
        assert [m.get("tool_calls") or m["content"] for m in before["messages"] if m["role"] != "assistant" or
                m.get("tool_calls")] == [m.get("tool_calls") or m["content"] for m in after["messages"]
                                          if m["role"] != "assistant" or m.get("tool_calls")]
        assert before["messages"][-1] == after["messages"][-1]
        for old, new in zip(before["messages"], after["messages"]):
            if new["content"].startswith("Found: "):
                moves += 1
                assert new["role"] == "assistant" and new["content"] in made and old["content"] != new["content"]
            else:
                assert old == new
    assert all(thought.startswith("Found: ") for thought in made)
    assert moves >= sum(t["type"] in ("bridge", "chain", "comparison") for t in marked) // 2


CHECK = re.compile(r"Check (.+?): (.+?)\. (.*)", re.DOTALL)


def test_check_first_opens_each_turn_after_an_output_with_the_evidence(setup):
    """--check-first: every turn after a tool output is "Check <need>: <fact or not shown>. " and then
    the plain walk's turn; the check states a fact where the walk moves on, reads a shown fact again
    or answers (the answer in it), and "not shown" nowhere else; its need changes exactly after a
    move to the next hop."""
    root, store, questions = setup
    world = TJ.WorldIndex(root / "world")
    plain, _ = build_all(TJ.Oracle(world, store), questions)
    checked, _ = build_all(TJ.Oracle(world, store, check_first=True), questions)
    assert [t["id"] for t in plain] == [t["id"] for t in checked]
    TJ.check(checked, store, DEFAULT_K, None, progress=False)
    extras = [re.compile(re.sub(r"\\\{\w+\\\}", ".+", re.escape(cap(t)))) for t in TJ.T.OPEN_EXTRA + TJ.T.FIND_EXTRA]
    same = shown = hidden = 0
    for before, after in zip(plain, checked):
        calls = [[m.get("tool_calls"), m["content"] if m["role"] == "tool" else None] for m in before["messages"]]
        if calls != [[m.get("tool_calls"), m["content"] if m["role"] == "tool" else None] for m in after["messages"]]:
            assert before["missed_find"] and not after["missed_find"]  # the one walk it leaves out
            continue
        same += 1
        turns = [(old, new) for old, new in zip(before["messages"], after["messages"]) if new["role"] == "assistant"]
        assert turns[0][0] == turns[0][1]
        previous = None  # (need, whether that turn moved on to the next hop)
        for n, (old, new) in enumerate(turns[1:], 1):
            match = CHECK.fullmatch(new["content"])
            need, fact, last = match.group(1), match.group(2), n == len(turns) - 1
            if previous:  # the need stays while a hop is read, and changes with a move to the next one
                assert (need != previous[0]) == previous[1], new["content"]
            extra_read = any(x.fullmatch(old["content"]) for x in extras)
            previous = need, fact != TJ.T.NOT_SHOWN and not extra_read and fact in old["content"]
            # (a fact read in an earlier hop's output, stated before the answer, is stated by the check alone)
            assert cap(old["content"]) in (match.group(3), f"{cap(fact)}. {match.group(3)}" if last else None)
            if fact == TJ.T.NOT_SHOWN:
                hidden += 1
                assert not last and not extra_read
            else:
                shown += 1
                assert last or fact in old["content"] or extra_read
            if last and fact != TJ.T.NOT_SHOWN and after["type"] not in ("comparison", "yesno"):
                assert visible(after["answers"][0], fact)
    assert same >= 0.9 * len(plain) and shown >= len(plain) and hidden >= 0.3 * len(plain)


def test_a_repeated_call_is_refused_untrained_context(setup):
    """--p-repeat: right after a call's output the same call again, the tools' refusal, then the walk
    as it was; the repeat is marked "train": false, and the trajectory replays."""
    root, store, questions = setup
    world = TJ.WorldIndex(root / "world")
    plain = TJ.Oracle(world, store, canonical=True)
    oracle = TJ.Oracle(world, store, canonical=True, p_repeat=1.0)
    checked = 0
    for question in questions[:30]:
        try:
            before, t = plain.build(question), oracle.build(question)
        except TJ.Drop:
            continue
        assert TJ.replay(t, store) == []
        untrained = [i for i, m in enumerate(t["messages"]) if m.get("train") is False]
        if not t["repeated_call"]:
            assert not untrained and before["n_tool_calls"] == 7  # no budget left for it
            continue
        assert len(untrained) == 1 and t["n_tool_calls"] == before["n_tool_calls"] + 1
        at = untrained[0]
        repeat, original = t["messages"][at], t["messages"][at - 2]
        assert {k: v for k, v in repeat.items() if k != "train"} == original
        assert t["messages"][at + 1]["content"].startswith("Error: you already called")
        assert t["messages"][:at] + t["messages"][at + 2:] == before["messages"]  # otherwise the same walk
        checked += 1
    assert checked >= 20


def test_tampered_output_or_call_fails_replay(setup, oracle_run):
    _, store, _ = setup
    kept = json.loads(json.dumps(oracle_run[0][:3]))
    tool = next(m for m in kept[0]["messages"] if m["role"] == "tool")
    tool["content"] = tool["content"].replace("]", "] ", 1)  # one extra space
    assert TJ.replay(kept[0], store)
    call = next(m for m in kept[1]["messages"] if m.get("tool_calls"))["tool_calls"][0]["function"]
    call["arguments"] = {"query": "something else entirely"}
    assert TJ.replay(kept[1], store)
    kept[2]["messages"][-1]["content"] = "<answer>not it</answer>"
    with pytest.raises(TJ.ReplayError, match="3 trajectory check"):
        TJ.check(kept, store, DEFAULT_K, None, progress=False)


def test_thoughts_only_state_what_was_read(setup, oracle_run):
    """No answer alias, and no chain entity the question does not name, appears in a thought
    before some tool output has shown it."""
    root, _, _ = setup
    world = TJ.WorldIndex(root / "world")
    kept, _, by_id = oracle_run
    checked = 0
    for t in kept:
        question = by_id[t["question_id"]]
        # each group: one thing's names; the answer's aliases ("1917", "in 1917") are one thing
        groups = [[a for a in question["answers"] if a.lower() not in ("yes", "no")]]
        groups += [[world.entities[e]["name"]] for e in question["chain"]]
        groups = [g for g in groups if g and not any(visible(n, question["question"]) for n in g)]
        read = ""
        for message in t["messages"][2:]:
            if message["role"] == "tool":
                read += "\n" + message["content"]
                continue
            for group in groups:
                if any(visible(name, message["content"]) for name in group):
                    assert any(visible(name, read) for name in group), (t["id"], group, message["content"])
                    checked += 1
    assert checked > len(kept)  # the thoughts do name what they found


def _mini_store(folder: Path, entities: list, docs: list, facts: list) -> tuple:
    """Write a hand-made world, index it with BM25; (its datastore, its WorldIndex)."""
    folder.mkdir(parents=True)
    for name, rows in (("entities", entities), ("facts", facts), ("corpus", docs)):
        (folder / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    build(DatastoreConfig(name=folder.name, corpus=str(folder / "corpus.jsonl"), retrievers=["bm25"]),
          root=folder.with_name(folder.name + "-ds"), progress=False)
    return Datastore.load(folder.with_name(folder.name + "-ds")), TJ.WorldIndex(folder)


def _mini_world(folder: Path):
    """A company called Kestrel, buried under a city and a festival of the same name."""
    entities = [
        {"id": "kco", "type": "organisation", "name": "Kestrel", "title": "Kestrel (company)", "attrs": {},
         "relations": {"founded_by": "ada"}, "aliases": [], "confusable_with": ["kcity"]},
        {"id": "ada", "type": "person", "name": "Ada Voss", "title": "Ada Voss", "attrs": {}, "relations": {},
         "aliases": [], "confusable_with": []},
        {"id": "kcity", "type": "city", "name": "Kestrel", "title": "Kestrel (city)", "attrs": {}, "relations": {},
         "aliases": [], "confusable_with": ["kco"]},
    ]
    docs = [
        {"id": "kco", "title": "Kestrel (company)", "text": "Kestrel is a company that makes kites. Ada Voss started the company."},
        {"id": "ada", "title": "Ada Voss", "text": "Ada Voss is an engineer. Ada Voss started the kite company Kestrel."},
        {"id": "kcity", "title": "Kestrel (city)", "text": "Kestrel is a city. Kestrel was founded by settlers. "
                                                           "The founder of Kestrel was a farmer. Kestrel founders."},
        {"id": "kfest", "title": "Kestrel Festival", "text": "The Kestrel Festival is held in Kestrel. Its founders "
                                                             "founded it in Kestrel, the founder city of Kestrel."},
        {"id": "kriver", "title": "Kestrel River", "text": "The Kestrel River runs past Kestrel. Kestrel was founded on the Kestrel."},
    ] + [{"id": f"f{i}", "title": f"Filler {i}", "text": f"Filler page {i} about owls and weather."} for i in range(6)]
    facts = [{"subject": "kco", "relation": "founded_by", "object": "ada", "stated_in": ["kco", "ada"]}]
    return _mini_store(folder, entities, docs, facts)


def test_recovery_after_a_confusable_first_search(tmp_path):
    store, world = _mini_world(tmp_path / "w")
    question = {"id": "k1", "question": "Who founded the company Kestrel?", "answers": ["Ada Voss", "Voss"],
                "hops": 1, "type": "lookup", "relations": ["founded_by"], "chain": ["kco", "ada"], "gold_doc_ids": ["kco"]}
    recovered = 0
    for seed in range(6):
        t = TJ.Oracle(world, store, k=2, seed=seed, p_question=0.0).build(question)
        assert TJ.replay(t, store, k=2) == []
        searches = [m for m in t["messages"] if m.get("tool_calls") and m["tool_calls"][0]["function"]["name"] == "search"]
        if t["recovered"]:
            recovered += 1
            first = searches[0]["tool_calls"][0]["function"]["arguments"]["query"]
            second = searches[1]
            assert "kco" not in hit_lines(t["messages"][3]["content"]), first  # the first search missed
            assert second["content"] in [t.format(n="Kestrel", noun="company") for t in TJ.T.MISS_OTHER]
            assert "company" in second["tool_calls"][0]["function"]["arguments"]["query"]
        assert extract_answer(t["messages"][-1]["content"]) == "Ada Voss"
    assert recovered >= 4


def _hidden_fact_world(folder: Path):
    """Bo Lind's employer is stated only on the employer's page, not on Bo Lind's own."""
    entities = [
        {"id": "bo", "type": "person", "name": "Bo Lind", "title": "Bo Lind", "attrs": {},
         "relations": {"works_for": "kco"}, "aliases": [], "confusable_with": []},
        {"id": "kco", "type": "organisation", "name": "Kestrel", "title": "Kestrel", "attrs": {}, "relations": {},
         "aliases": [], "confusable_with": []},
    ]
    docs = [
        {"id": "bo", "title": "Bo Lind", "text": "Bo Lind is a pilot. Bo Lind has had the same job for years."},
        {"id": "kco", "title": "Kestrel", "text": "Kestrel is a company that makes kites. Kestrel employs Bo Lind."},
    ] + [{"id": f"f{i}", "title": f"Filler {i}", "text": f"Filler page {i} about weather."} for i in range(6)]
    facts = [{"subject": "bo", "relation": "works_for", "object": "kco", "stated_in": ["kco"]}]
    return _mini_store(folder, entities, docs, facts)


def test_a_missed_find_in_the_own_page_moves_to_the_page_stating_the_fact(tmp_path):
    store, world = _hidden_fact_world(tmp_path / "w")
    question = {"id": "h1", "question": "Who does Bo Lind work for?", "answers": ["Kestrel"], "hops": 1,
                "type": "hidden_fact", "relations": ["works_for"], "chain": ["bo", "kco"], "gold_doc_ids": ["kco"]}
    for seed in range(4):
        t = TJ.Oracle(world, store, k=2, seed=seed, p_question=0.0, p_find_miss=1.0).build(question)
        assert TJ.replay(t, store, k=2) == [] and t["missed_find"] and t["recovered"]
        calls = [(m["tool_calls"][0]["function"], m["content"]) for m in t["messages"] if m.get("tool_calls")]
        outputs = [m["content"] for m in t["messages"] if m["role"] == "tool"]
        assert calls[1][0]["name"] == "find" and calls[1][0]["arguments"]["doc_id"] == "bo"
        assert "Kestrel" not in outputs[1]  # the find in Bo Lind's page shows nothing of the employer
        assert calls[2][0]["arguments"]["doc_id"] == "kco" and "[bo]" in calls[2][1]  # the thought names the miss
        assert "Kestrel employs Bo Lind" in outputs[2]
        assert extract_answer(t["messages"][-1]["content"]) == "Kestrel"
        plain = TJ.Oracle(world, store, k=2, seed=seed, p_question=0.0, p_find_miss=0.0).build(question)
        assert not plain["missed_find"] and all(c["function"]["arguments"].get("doc_id") != "bo"
                                                for m in plain["messages"] for c in m.get("tool_calls") or [])


def test_renders_through_the_smollm2_tool_template(oracle_run):
    from transformers import AutoTokenizer

    from agent.chat import parse_assistant, prepare_tokenizer
    from agent.models import resolve_model
    from agent.tools import SearchTools, tool_functions, tool_specs
    from common.errors import UserError

    try:
        tokenizer = prepare_tokenizer(AutoTokenizer.from_pretrained(resolve_model("smollm2-135m")))
    except UserError as exc:
        pytest.skip(f"smollm2-135m not converted ({exc})")
    specs, tools = tool_specs(), tool_functions(SearchTools(None))
    for t in oracle_run[0][:25]:
        text = tokenizer.apply_chat_template(t["messages"], tools=tools, tokenize=False)
        spans = re.findall(r"<\|im_start\|>assistant\n(.*?)<\|im_end\|>", text, re.DOTALL)
        wanted = [m for m in t["messages"] if m["role"] == "assistant"]
        assert len(spans) == len(wanted)
        for span, message in zip(spans, wanted):
            turn = parse_assistant(span, specs)
            assert turn.content == message["content"] and not turn.errors
            assert turn.tool_calls == message.get("tool_calls", [])
    stats = TJ.token_stats(oracle_run[0][:10])
    assert 0 < stats["assistant_fraction"] < 0.5 and stats["max"] >= stats["p50"] > 300


def test_command_writes_checks_and_skips(setup, capsys):
    root, _, _ = setup
    from datasets import load_dataset, load_from_disk

    out = root / "out"
    args = ["--questions", str(root / "train_sft.jsonl"), "--world", str(root / "world"),
            "--datastore", str(root / "datastore"), "--out", str(out), "--quiet"]
    manifest = TJ.main(args) or json.loads((out / "manifest.json").read_text())
    rows = [json.loads(line) for line in (out / "trajectories.jsonl").read_text().splitlines()]
    assert len(rows) == manifest["counts"]["trajectories"] >= 50
    report = json.loads((out / "report.json").read_text())
    assert report["trajectories"] == len(rows) and sum(report["by_hops"].values()) == len(rows)
    assert "tokens" in report and (out / "report.md").read_text().startswith("# Trajectories")
    hf = load_from_disk(str(out / "hf"))
    assert hf[0]["messages"] == rows[0]["messages"] and hf[0]["tools"][0]["function"]["name"] == "search"
    as_json = load_dataset("json", data_files=str(out / "trajectories.jsonl"), split="train")
    assert as_json[3]["messages"] == rows[3]["messages"]  # arguments stay dicts, keys unmerged
    TJ.main(args)
    assert "up to date" in capsys.readouterr().out
    tampered = (out / "trajectories.jsonl").read_text().replace("[w-", "[W-", 1)  # as if the tools had changed
    (out / "trajectories.jsonl").write_text(tampered)
    TJ.main(args)
    assert "no longer replay; rebuilding" in capsys.readouterr().out
    assert (out / "trajectories.jsonl").read_text().splitlines()[0] == json.dumps(rows[0], ensure_ascii=False)
    # --where filters before --limit, and a filtered set is another set (its manifest says how)
    TJ.main(args[:-3] + ["--out", str(root / "two_hop"), "--where", "hops=2", "--limit", "5", "--quiet"])
    two_hop = [json.loads(line) for line in (root / "two_hop" / "trajectories.jsonl").read_text().splitlines()]
    assert two_hop and all(t["hops"] == 2 for t in two_hop)
    kept = json.loads((root / "two_hop" / "manifest.json").read_text())
    assert kept["config"]["where"] == ["hops=2"] and kept["counts"]["questions"] == 5


def _teacher(state: dict, answers: dict) -> FastAPI:
    """Searches with the question, then answers: right for the first sample of each question only."""
    app = FastAPI()

    @app.post("/v1/chat/completions")
    async def chat(request: Request):
        body = await request.json()
        question = body["messages"][1]["content"]
        state["requests"].append(question)
        if not any(m["role"] == "tool" for m in body["messages"]):
            message = {"role": "assistant", "content": "I'll search for it.", "tool_calls": [{"id": "c1", "type": "function",
                       "function": {"name": "search", "arguments": json.dumps({"query": question})}}]}
        else:
            first = question not in state["answered"]
            state["answered"].add(question)
            message = {"role": "assistant", "content": f"<answer>{answers[question] if first else 'Nobody'}</answer>"}
        return {"choices": [{"message": message}], "usage": {"prompt_tokens": 10, "completion_tokens": 5}}

    return app


def test_teacher_keeps_correct_samples_and_resumes(setup):
    root, store, questions = setup
    qs = questions[:6]
    (root / "teacher_q.jsonl").write_text("".join(json.dumps(q) + "\n" for q in qs))
    state = {"requests": [], "answered": set()}
    out = root / "teacher"
    with app_in_thread(_teacher(state, {q["question"]: q["answers"][0] for q in qs})) as url:
        base = ["--questions", str(root / "teacher_q.jsonl"), "--datastore", str(root / "datastore"), "--out", str(out),
                "--teacher-url", f"{url}/v1", "--teacher-model", "fake", "--samples", "2", "--quiet", "--concurrency", "2"]
        TJ.main(base + ["--limit", "3"])
        assert len(state["requests"]) == 3 * 2 * 2  # 3 questions x 2 samples x 2 turns
        TJ.main(base)
        assert len(state["requests"]) == 6 * 2 * 2  # the first 3 were not asked again
    rows = [json.loads(line) for line in (out / "trajectories.jsonl").read_text().splitlines()]
    assert sorted(r["question_id"] for r in rows) == sorted(q["id"] for q in qs)  # one right sample each
    for row in rows:
        assert best_em(extract_answer(row["messages"][-1]["content"]), row["answers"]) == 1
        assert row["origin"] == "teacher:fake" and TJ.replay(row, store) == []
    samples = (root / "teacher.teacher" / "predictions.jsonl").read_text().splitlines()
    assert len(samples) == 6 * 2 and sum(best_em(r["prediction"], r["answers"]) for r in map(json.loads, samples)) == 6


def test_tool_exposure_counts_what_the_tools_show(setup, tmp_path):
    from eval import tool_exposure as TE

    root, store, _ = setup
    facts = TE.sample_facts(TJ.WorldIndex(root / "world"), 30, seed=0)
    assert len(facts) == 30 and all(store.document(f["subject"]) for f in facts)
    results = TE.measure(store, facts, DEFAULT_K)
    rate = {name: r["rate"] for name, r in results.items()}
    assert rate["search, bare name: page in top 3"] >= 0.9
    for kind in ("page words", "asker words"):
        assert rate[f"find, {kind}: datastore find"] >= rate[f"find, {kind}: literal match"]
    assert rate["find, asker words: datastore find"] > rate["find, asker words: literal match"]  # word overlap (no dense index)
    assert all(len(store.find(f["subject"], "the")) <= 2 for f in facts)
    assert rate["find, page words: literal match"] > rate["find, asker words: literal match"]
    TE.main(["--world", str(root / "world"), "--datastore", str(root / "datastore"), "--n", "5",
             "--out", str(tmp_path / "exposure")])
    assert json.loads((tmp_path / "exposure.json").read_text())["results"]
    assert "| check | shown | n | rate |" in (tmp_path / "exposure.md").read_text()


def test_next_call_probe_reproduces_the_oracle_steps(setup, oracle_run):
    """eval.next_calls: chain targets end in the answer, a finished search needs nothing, and a
    model that writes the oracle's own next turn is scored as showing exactly what the oracle showed."""
    from agent.backends import Completion
    from agent.chat import render_tool_call
    from agent.tools import SearchTools, tool_specs
    from eval import next_calls as NC

    root, store, _ = setup
    kept, _, by_id = oracle_run
    world = TJ.WorldIndex(root / "world")
    chains = [t for t in kept if t["type"] not in PAIRED]
    assert chains
    for t in chains:
        targets = NC.chain_targets(world, by_id[t["question_id"]])
        assert len(targets) == t["hops"] and best_em(targets[-1], t["answers"]), (t["id"], targets)
        assert NC.needed(t["messages"][:-1], targets) is None  # the oracle answers once every fact showed

    class Replays:
        """Writes, at each point, the oracle's own next turn (or a scripted other move)."""
        def __init__(self, move):
            self.move = move

        def complete(self, conversations, tools):
            return [Completion(self.move(conversation), 1, 1) for conversation in conversations]

    def oracle_turn(conversation):
        turn = next(t for t in chains if t["messages"][:len(conversation)] == conversation)["messages"][len(conversation)]
        return turn["content"] + "\n" + "".join(render_tool_call(call) for call in turn["tool_calls"])

    def last_call_again(conversation):
        call = next(m for m in reversed(conversation) if m.get("tool_calls"))["tool_calls"][0]
        return "Again. " + render_tool_call(call)

    run = lambda move: NC.probe(Replays(move), None, tool_specs(), lambda: SearchTools(store, DEFAULT_K), chains,
                                by_id, world)
    rows = run(oracle_turn)
    assert rows and all(r["kind"] == "call" and r["shows"] == r["oracle_shows"] for r in rows)
    assert any(r["shows"] for r in rows) and {r["hop"] for r in rows} >= {1, 2}
    assert all(r["kind"] == "repeat" and not r["shows"] for r in run(last_call_again))
    assert all(r["kind"] == "answer" for r in run(lambda conversation: "<answer>x</answer>"))
    assert all(r["kind"] == "no_call" for r in run(lambda conversation: "I think it is x."))
    assert all(r["kind"] == "invalid" for r in run(lambda conversation: '<tool_call>{"name": "fly"}</tool_call>'))
    report = NC.summary(rows)
    assert report["call"] == 1.0 and report["shows"] == report["oracle_shows"]

    class Overflows(Replays):
        def complete(self, conversations, tools):
            return [Completion("", 0, 5000, error="context of 5000 tokens exceeds 3840") for _ in conversations]

    errors = NC.probe(Overflows(None), None, tool_specs(), lambda: SearchTools(store, DEFAULT_K), chains, by_id, world)
    assert all(r["kind"] == "error" for r in errors) and NC.summary(errors)["error"] == 1.0
    with pytest.raises(UserError, match="pass the --world"):
        NC.chain_targets(world, {"id": "q", "chain": ["nobody"], "relations": ["founded_by"]})
    hotpot_like = {chains[0]["question_id"]: {"id": chains[0]["question_id"], "question": "?", "answers": ["x"]}}
    with pytest.raises(UserError, match="synthetic world's questions"):
        list(NC.points(chains[:1], hotpot_like, world))


def with_extras(setup, **shares):
    """(question, [trajectory, extras...]) for each question the oracle keeps, checking that the
    extras leave the trajectory exactly as build() makes it."""
    root, store, questions = setup
    oracle = TJ.Oracle(TJ.WorldIndex(root / "world"), store)
    for question in questions:
        try:
            built = oracle.build_with_extras(question, **shares)
        except TJ.Drop:
            continue
        assert built[0] == oracle.build(question)
        yield question, built


def test_a_twin_is_the_first_hop_asked_alone_and_answered_where_the_original_moves_on(setup):
    """--p-twin (data/trajectory_twins.py): the twin asks the first hop of a chain question; its
    messages after the question are the original's up to the second hop's first call, then the answer
    to the first hop, which an output already showed. Twins leave the original trajectory as it was."""
    root, store, questions = setup
    world, twins = TJ.WorldIndex(root / "world"), 0
    for question, built in with_extras(setup, p_twin=1.0):
        original = built[0]
        if question["type"] not in ("bridge", "chain"):
            assert len(built) == 1
            continue
        if len(built) == 1:
            continue
        twin, twins = built[1], twins + 1
        assert TJ.replay(twin, store) == [] and twin["twin_of"] == original["id"] and twin["hops"] == 1
        asked, messages = twin["messages"][1]["content"], twin["messages"]
        assert asked != original["messages"][1]["content"] and messages[1]["role"] == "user"
        assert messages[0] == original["messages"][0] and asked.endswith(twin["twin_question"])
        cut = len(messages) - 1
        assert messages[2:cut] == original["messages"][2:cut]
        assert original["messages"][cut]["role"] == "assistant" and original["messages"][cut].get("tool_calls")
        answer = extract_answer(messages[-1]["content"])
        first_hop = world.entities[world.facts[(question["chain"][0], question["relations"][0])]["object"]]
        assert answer == first_hop["name"] == twin["answers"][0]
        assert any(visible(answer, m["content"]) for m in messages if m["role"] == "tool")
        assert not visible(answer, asked)
    assert twins >= 5


def test_a_missed_evidence_row_hides_one_searchs_fact_and_searches_again(setup):
    """--p-miss (data/trajectory_misses.py): the row is its trajectory up to a search whose snippet
    showed the fact, the same search without the fact's pages (no output line shows the fact), then a
    search with other words that the real datastore answers with such a page. It replays, only its
    last turn is trained, and the trajectory itself is the one build() makes."""
    from sft.data import first_turn_rows

    _, store, _ = setup
    rows = 0
    for _, built in with_extras(setup, p_miss=1.0):
        original = built[0]
        if len(built) == 1:
            continue
        row, rows = built[1], rows + 1
        assert row["miss_of"] == original["id"] and row["origin"] == "oracle_miss"
        assert TJ.replay(row, store) == [] and TJ.miss_problems(row) == []
        with pytest.raises(AssertionError):  # against the datastore as it is, the hidden search differs
            assert TJ.replay({k: v for k, v in row.items() if k != "hidden_docs"}, store) == []
        messages, cut = row["messages"], len(row["messages"]) - 2
        assert [{k: v for k, v in m.items() if k != "train"} for m in messages[:cut]] == original["messages"][:cut]
        assert [m.get("train", True) for m in messages if m["role"] == "assistant"][-1] is True
        assert not any(m.get("train", True) for m in messages[:cut] if m["role"] == "assistant")
        hidden, shown = messages[cut]["content"], original["messages"][cut]["content"]
        assert hidden != shown and not set(hit_lines(hidden)) & set(row["hidden_docs"])
        assert set(hit_lines(shown)) & set(row["hidden_docs"])
        again = messages[-1]["tool_calls"][0]["function"]
        assert again["name"] == "search" and again["arguments"]["query"] != row["hidden_query"]
        assert {h.doc_id for h in store.search(again["arguments"]["query"], DEFAULT_K)} & set(row["hidden_docs"])
        assert first_turn_rows([original, row]) == first_turn_rows([original])
    assert rows >= 20
    bad = {**row, "messages": row["messages"][:-1] + [{"role": "assistant", "content": "<answer>x</answer>"}]}
    assert TJ.miss_problems(bad)


def test_a_plan_names_the_later_hops_in_the_first_thought_and_changes_nothing_else(setup, oracle_run):
    """--plan: a multi-hop chain question's first thought ends with its later hops' needs, worded for
    the entity still unnamed ("that person"); every other message, and every other question's
    trajectory, is byte-identical to the plain oracle's."""
    root, store, questions = setup
    plain = {t["id"]: t for t in oracle_run[0]}
    planned, _ = build_all(TJ.Oracle(TJ.WorldIndex(root / "world"), store, plan=True), questions)
    assert {t["id"] for t in planned} == set(plain)
    with_plan = 0
    for trajectory in planned:
        base, question = plain[trajectory["id"]], oracle_run[2][trajectory["question_id"]]
        assert TJ.replay(trajectory, store) == [] and len(trajectory["messages"]) == len(base["messages"])
        first = next(i for i, m in enumerate(base["messages"]) if m["role"] == "assistant")
        others = [m for i, m in enumerate(trajectory["messages"]) if i != first]
        assert others == [m for i, m in enumerate(base["messages"]) if i != first]
        mine, theirs = trajectory["messages"][first]["content"], base["messages"][first]["content"]
        if question["type"] in ("bridge", "chain") and len(question["relations"]) > 1:
            added = mine[len(theirs):]
            assert mine.startswith(theirs) and added.startswith((" Then", " After that:"))
            assert added.count(", then ") == len(question["relations"]) - 2 and " that " in added
            with_plan += 1
        else:
            assert mine == theirs
    assert with_plan >= 5


def test_a_plan_without_a_wording_for_an_entity_type_fails_loudly(setup, monkeypatch):
    """A world type missing from T.THAT is a gap in the templates, not a chain to skip quietly."""
    from data import trajectory_text as T

    root, store, questions = setup
    oracle = TJ.Oracle(TJ.WorldIndex(root / "world"), store, plan=True)
    question = next(q for q in questions if q["type"] in ("bridge", "chain") and len(q["relations"]) > 1)
    assert oracle._plan(question["id"], question["chain"], question["relations"])
    monkeypatch.setattr(T, "THAT", {})
    with pytest.raises(KeyError):
        oracle._plan(question["id"], question["chain"], question["relations"])


def test_twins_and_missed_evidence_rows_need_oracle_trajectories_without_checks():
    with pytest.raises(SystemExit):
        TJ.parse_args(["--questions", "q.jsonl", "--out", "o", "--p-miss", "0.5", "--check-first"])
    with pytest.raises(SystemExit):
        TJ.parse_args(["--questions", "q.jsonl", "--out", "o", "--p-miss", "-0.1"])
    with pytest.raises(SystemExit):
        TJ.parse_args(["--questions", "q.jsonl", "--out", "o", "--p-twin", "0.5", "--check-first"])
    with pytest.raises(SystemExit):
        TJ.parse_args(["--questions", "q.jsonl", "--out", "o", "--p-twin", "1.5"])
    with pytest.raises(SystemExit):
        TJ.parse_args(["--questions", "q.jsonl", "--out", "o", "--p-twin", "0.5", "--plan"])


def test_make_data_passes_the_twin_share():
    """make data P_TWIN=0.5 builds the SFT trajectories with twins; the default builds none."""
    import subprocess

    def trajectories_line(*extra):
        lines = subprocess.run(["make", "-n", "data", *extra], capture_output=True, text=True, check=True).stdout
        return next(line for line in lines.splitlines() if "-m data.trajectories" in line)

    with_twins = trajectories_line("P_TWIN=0.5")
    assert with_twins.rstrip().endswith("--out runs/data/world/trajectories/sft --p-twin 0.5")
    assert TJ.parse_args(with_twins.split("-m data.trajectories", 1)[1].split()).p_twin == 0.5
    assert "--p-twin" not in trajectories_line() and "--p-twin" not in trajectories_line("P_TWIN=0")
    assert TJ.parse_args(trajectories_line("P_MISS=0.5").split("-m data.trajectories", 1)[1].split()).p_miss == 0.5
    assert "--p-miss" not in trajectories_line()
