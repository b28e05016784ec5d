"""The agent: template round trip, tool-call parsing, the episode loop with bad calls, run/resume."""
import json

import pytest

from agent.backends import Completion
from agent.chat import parse_assistant, render_tool_call
from agent.episode import EpisodeConfig, run_episodes
from agent.tools import SearchTools, tool_functions, tool_specs
from datastore.build import DatastoreConfig, build
from datastore.retriever import Datastore
from tests.test_datastore import write_corpus

SPECS = tool_specs()
TOOLS_OF_NONE = tool_functions(SearchTools(None))


@pytest.fixture
def store(runs, tmp_path):
    corpus = write_corpus(tmp_path / "corpus.jsonl")
    build(DatastoreConfig(name="agent", corpus=str(corpus), retrievers=["bm25"]), progress=False)
    return Datastore.load("agent")


class ScriptedBackend:
    """Replays fixed assistant texts, one per turn, for every conversation in the batch."""

    def __init__(self, script):
        self.script, self.calls = script, []

    def complete(self, conversations, tools):
        self.calls.append(len(conversations))
        return [Completion(self.script[sum(m["role"] == "assistant" for m in conv)], 7, 100) for conv in conversations]


def call(name, **arguments):
    return render_tool_call({"function": {"name": name, "arguments": arguments}})


def test_parse_valid_and_malformed_calls():
    turn = parse_assistant("I need Ada's birthplace.\n" + call("search", query="Ada Voss"), SPECS)
    assert turn.content == "I need Ada's birthplace."
    assert turn.tool_calls == [{"type": "function", "function": {"name": "search", "arguments": {"query": "Ada Voss"}}}]
    assert not turn.errors
    cases = {
        '<tool_call>\n{"name": "search", "arguments": {"query": "x"</tool_call>': "not valid JSON",
        '<tool_call>\n{"name": "browse", "arguments": {}}\n</tool_call>': "unknown tool 'browse'",
        '<tool_call>\n{"name": "open", "arguments": {}}\n</tool_call>': "needs the argument(s) doc_id",
        '<tool_call>\n{"name": "open", "arguments": {"doc_id": 5}}\n</tool_call>': "doc_id of open must be a string",
        '<tool_call>\n{"name": "search", "arguments": {"q": "x"}}\n</tool_call>': "needs the argument(s) query",
        '<tool_call>\n{"name": "open", "arguments": {"doc_id": "a", "page": 1, "x": 2}}\n</tool_call>': "takes no argument(s) x",
        '<tool_call>\n{"name": "search", "arguments": {"query": "unterminated"}}': None,  # cut off, still valid JSON
        "<tool_call>[1, 2]</tool_call>": 'needs a "name"',
    }
    for text, message in cases.items():
        turn = parse_assistant(text, SPECS)
        if message is None:
            assert turn.tool_calls and not turn.errors
        else:
            assert not turn.tool_calls and message in turn.errors[0], (text, turn.errors)
    plain = parse_assistant("<answer>1871</answer>", SPECS)
    assert not plain.has_tool_syntax and plain.content == "<answer>1871</answer>"


def test_trajectory_renders_and_parses_back(tokenizer, store):
    """A trajectory renders through the tool template; each assistant span parses back to its message."""
    tools = SearchTools(store)
    messages = [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "Where was Ada Voss born?"},
        {"role": "assistant", "content": "I need Ada Voss.", "tool_calls": [
            {"type": "function", "function": {"name": "search", "arguments": {"query": "Ada Voss"}}}]},
        {"role": "tool", "name": "search", "content": tools.search("Ada Voss")},
        {"role": "assistant", "content": "<answer>Kestrel</answer>"},
    ]
    text = tokenizer.apply_chat_template(messages, tools=tool_functions(tools), tokenize=False)
    assert '"name": "search"' in text and "<tools>" not in text  # the compact tool list, not Qwen's schemas
    for line in ("- search(query: string): Search the documents.", "- open(doc_id: string, page?: integer): Read",
                 "- find(doc_id: string, text: string): Find"):
        assert line in text, line
    spans = [part.split("<|im_end|>")[0] for part in text.split("<|im_start|>assistant\n")[1:]]
    parsed = [parse_assistant(span, SPECS) for span in spans]
    assert parsed[0].content == "I need Ada Voss." and parsed[0].tool_calls == messages[2]["tool_calls"]
    assert parsed[1].content == "<answer>Kestrel</answer>" and not parsed[1].has_tool_syntax
    # prefix preservation: rendering the first turns alone is a prefix of the whole
    prefix = tokenizer.apply_chat_template(messages[:4], tools=tool_functions(tools), tokenize=False)
    assert text.startswith(prefix)


def test_compact_template_is_qwen_apart_from_the_tool_list(tokenizer):
    """Only the system turn's tool block differs from TRL's Qwen2.5 template, in both variants, so
    TRL's prefix-preserving check, generation markers and Qwen tool-call parser all still apply."""
    from trl import chat_template_utils as ctu

    from agent.chat import response_parser_template, tool_chat_template, training_template

    assert ctu.is_chat_template_prefix_preserving(tokenizer)
    assert training_template(tokenizer) == tool_chat_template(training=True)
    assert response_parser_template(tokenizer.chat_template) == ctu.qwen2_5_chat_template
    messages = [{"role": "system", "content": "sys"}, {"role": "user", "content": "q"},
                {"role": "assistant", "content": "<answer>a</answer>"}]
    for compact, qwen in ((tool_chat_template(), ctu.qwen2_5_chat_template),
                          (tool_chat_template(training=True), ctu.qwen2_5_training_chat_template)):
        ours = tokenizer.apply_chat_template(messages, tools=TOOLS_OF_NONE, chat_template=compact, tokenize=False)
        theirs = tokenizer.apply_chat_template(messages, tools=TOOLS_OF_NONE, chat_template=qwen, tokenize=False)
        assert ours.split("<|im_end|>", 1)[1] == theirs.split("<|im_end|>", 1)[1]
        assert len(tokenizer(ours)["input_ids"]) < len(tokenizer(theirs)["input_ids"]) - 250


def test_episode_loop_with_malformed_calls(store):
    script = [
        '<tool_call>\n{"name": "search", "arguments": {"query": "Ada"</tool_call>',  # bad JSON
        call("open", doc_id="no-such-doc"),  # valid call, tool error
        "Ada Voss was born in Kestrel.\n" + call("search", query="Ada Voss born"),
        "<answer>Kestrel</answer>",
    ]
    backend = ScriptedBackend(script)
    episodes = run_episodes([{"id": "q1", "question": "Where was Ada Voss born?", "answers": ["Kestrel"]},
                             {"id": "q2", "question": "Same?", "answers": ["x"]}],
                            backend, lambda: SearchTools(store), EpisodeConfig(), progress=False)
    record = episodes[0].record()
    assert record["finish"] == "answer" and record["prediction"] == "Kestrel"
    assert record["tool_calls"] == 3 and record["valid_tool_calls"] == 1
    assert "ada" in record["retrieved"]
    roles = [m["role"] for m in record["messages"]]
    assert roles == ["system", "user", "assistant", "tool", "assistant", "tool", "assistant", "tool", "assistant"]
    assert record["messages"][3]["content"].startswith("Error: the tool call is not valid JSON")
    assert "unknown document id" in record["messages"][5]["content"]
    assert backend.calls == [2, 2, 2, 2]  # both questions advance together, one batch per round
    assert record["tokens_generated"] == 28


def test_budget_and_no_answer(store):
    looping = ScriptedBackend([call("search", query="Kestrel")] * 10)
    episode = run_episodes([{"id": "q", "question": "?"}], looping, lambda: SearchTools(store),
                           EpisodeConfig(max_turns=3), progress=False)[0]
    assert episode.finish == "budget" and episode.turns == 3 and episode.prediction is None
    searching = ScriptedBackend([call("search", query=f"Kestrel {n}") for n in range(10)])
    capped = run_episodes([{"id": "q", "question": "?"}], searching, lambda: SearchTools(store),
                          EpisodeConfig(max_turns=5, max_tool_calls=2), progress=False)[0]
    assert capped.tools.log.n_valid == 2 and "budget of 2 tool calls" in capped.messages[-1]["content"]
    chatty = run_episodes([{"id": "q", "question": "?"}], ScriptedBackend(["I think it is Kestrel."]),
                          lambda: SearchTools(store), EpisodeConfig(), progress=False)[0]
    assert chatty.finish == "no_answer" and chatty.prediction is None


def test_a_repeated_call_is_refused_and_counted(store):
    script = [call("search", query="Ada Voss"), call("find", doc_id="ada", text="born"),
              call("find", doc_id="ada", text="born"), call("search", query="Ada Voss"),
              call("find", doc_id="ada", text="city"), "<answer>Kestrel</answer>"]
    record = run_episodes([{"id": "q", "question": "Where was Ada Voss born?", "answers": ["Kestrel"]}],
                          ScriptedBackend(script), lambda: SearchTools(store), EpisodeConfig(), progress=False)[0].record()
    tools = [m["content"] for m in record["messages"] if m["role"] == "tool"]
    assert "Kestrel" in tools[1] and tools[2].startswith("Error: you already called find") \
        and tools[3].startswith("Error: you already called search") and not tools[4].startswith("Error")
    assert record["tool_calls"] == 5 and record["valid_tool_calls"] == 3 and record["repeated_tool_calls"] == 2


def test_naive_rag_and_closed_book_modes(store):
    script = [call("search", query="Kestrel") + "<answer>Kestrel</answer>"]
    question = {"id": "q", "question": "Where was Ada Voss born?", "answers": ["Kestrel"]}
    rag = run_episodes([question], ScriptedBackend(script), lambda: SearchTools(store), EpisodeConfig(rag=True),
                       progress=False)[0].record()
    user = rag["messages"][1]["content"]
    assert user.startswith("Documents:\n[ada] ") and user.endswith("Question: Where was Ada Voss born?")
    # one search with the question, shown up front; tool-call text in the reply is not run
    assert rag["retrieved"] and rag["tool_calls"] == 0 and rag["turns"] == 1 and rag["prediction"] == "Kestrel"
    closed = run_episodes([question], ScriptedBackend(script), lambda: SearchTools(store),
                          EpisodeConfig(closed_book=True), progress=False)[0].record()
    assert closed["retrieved"] == [] and len(closed["messages"]) == 3 and closed["tool_calls"] == 0


def test_tiny_model_episode_end_to_end(store, tiny):
    from agent.backends import Sampling, TransformersBackend

    model, tokenizer = tiny
    backend = TransformersBackend(model, tokenizer, Sampling(max_new_tokens=8), batch_size=2)
    questions = [{"id": f"q{i}", "question": q, "answers": ["Kestrel"]} for i, q in enumerate(["Where?", "Who founded Kestrel?", "When?"])]
    episodes = run_episodes(questions, backend, lambda: SearchTools(store), EpisodeConfig(max_turns=2), progress=False)
    for episode in episodes:
        assert episode.done and episode.turns >= 1
        assert 1 <= episode.tokens_generated <= 16
        assert episode.messages[0]["role"] == "system"


def test_agent_run_writes_and_resumes(store, tmp_path, tiny):
    from agent.run import check_same_settings, main, parse_args
    from common.errors import UserError

    questions = tmp_path / "q.jsonl"
    questions.write_text("".join(json.dumps({"id": f"q{i}", "question": f"Question {i}?", "answers": ["x"], "hops": 1})
                                 + "\n" for i in range(3)))
    out = tmp_path / "out"
    args = ["--model", "tiny", "--questions", str(questions), "--datastore", "agent", "--out", str(out),
            "--max-new-tokens", "4", "--max-turns", "1", "--quiet"]
    main(args + ["--limit", "2"])
    assert len((out / "predictions.jsonl").read_text().splitlines()) == 2
    main(args)
    lines = (out / "predictions.jsonl").read_text().splitlines()
    assert [json.loads(line)["id"] for line in lines] == ["q0", "q1", "q2"]
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["overall"]["n"] == 3 and metrics["run"]["n_run_now"] == 1
    assert 0 < metrics["run"]["cpu_share"] < 2  # how much of the CPU the episodes got (eval's timing table)
    assert metrics["run"]["forced_answers"] == 0 and all(json.loads(line)["answer_threshold"] is None for line in lines)
    with pytest.raises(UserError, match="another --answer-threshold"):  # never mixed into one set of predictions
        main(args + ["--answer-threshold", "0.2"])
    with pytest.raises(UserError, match="another --max-new-tokens, --temperature, --top-p, --seed; use a new --out folder"):
        main(args + ["--max-new-tokens", "5", "--temperature", "1", "--seed", "3"])
    main(args + ["--seed", "3"])  # greedy: the seed changes nothing, so the folder is reused
    assert len((out / "predictions.jsonl").read_text().splitlines()) == 3
    settings = json.loads((out / "settings.json").read_text())
    del settings["release_repeats"]  # a folder from before the key: its episodes ran without the release
    (out / "settings.json").write_text(json.dumps(settings))
    with pytest.raises(UserError, match="--release-repeats; use a new --out folder"):
        check_same_settings(out, parse_args(args + ["--answer-threshold", "0.2", "--hold-below", "--release-repeats"]),
                            {"q0": {}})
    for bad in (["--answer-threshold", "0"], ["--answer-threshold", "0.2", "--closed-book"],
                ["--answer-threshold", "0.2", "--release-repeats"]):  # releases --hold-below's hold: needs it
        with pytest.raises(SystemExit):
            main(args + bad)


def test_where_filters_questions_before_the_limit(tmp_path):
    from agent.run import read_questions
    from common.errors import UserError

    path = tmp_path / "q.jsonl"
    rows = [{"id": f"q{i}", "question": "?", "hops": 1 + i % 3, "pool": "sft" if i < 6 else "rl"} for i in range(9)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    kept = read_questions(str(path), limit=3, where=["pool=sft", "hops=1,2"])
    assert [q["id"] for q in kept] == ["q0", "q1", "q3"]
    with pytest.raises(UserError, match="hops values: 1, 2, 3"):
        read_questions(str(path), where=["hops=4"])
    with pytest.raises(UserError, match="FIELD=VALUE"):
        read_questions(str(path), where=["hops"])


def test_sampled_runs_repeat_with_the_same_seed(store, tmp_path, tiny):
    from agent.run import main

    questions = tmp_path / "q.jsonl"
    questions.write_text("".join(json.dumps({"id": f"q{i}", "question": f"Question {i}?", "answers": ["x"]}) + "\n"
                                 for i in range(4)))

    def texts(seed, name):
        out = tmp_path / name
        main(["--model", "tiny", "--questions", str(questions), "--datastore", "agent", "--out", str(out),
              "--max-new-tokens", "12", "--max-turns", "1", "--temperature", "1.0", "--seed", str(seed), "--quiet"])
        return [json.loads(line)["messages"][-1]["content"] for line in (out / "predictions.jsonl").read_text().splitlines()]

    first = texts(0, "a")
    assert texts(0, "b") == first and texts(1, "c") != first


def _reading_model(tokenizer):
    """A random model with large weights: unlike the tiny model, its outputs depend on its context."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    return LlamaForCausalLM(LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, initializer_range=0.5, pad_token_id=tokenizer.pad_token_id))


def test_calibrated_stop_probe_reads_the_turn_cache_and_matches_a_full_forward(tiny):
    """The calibrated stop's probe of `<answer>` after a tool output runs batched, left-padded, over
    only the tokens each conversation's turn cache does not hold; each row's tag steps and greedy
    flag equal one unpadded forward over the whole context (`tag_steps`)."""
    import torch

    from agent.backends import Sampling, TransformersBackend, tag_steps

    tokenizer = tiny[1]
    model = _reading_model(tokenizer)
    backend = TransformersBackend(model, tokenizer, Sampling(max_new_tokens=8), batch_size=4)
    questions = ["Where was Ada Voss born?", "Who founded the Kestrel Works, and when did it open?", "When?"]
    system = {"role": "system", "content": "Answer with tools, and cite each document you read. " * 4}
    conversations = [[system, {"role": "user", "content": q}] for q in questions]
    for number, completion in enumerate(backend.complete(conversations, None)):
        conversations[number] += [{"role": "assistant", "content": completion.text},
                                  {"role": "tool", "name": "search", "content": "Ada Voss, born in Oslo. " * (number + 1)}]
    ids = [tokenizer(backend.render(c, None), add_special_tokens=False).input_ids for c in conversations]
    keys = [id(c) for c in conversations]
    prompts_before = backend.turn_cache.prompt_tokens
    assert all(backend.turn_cache.new_tokens(key, row) < len(row) // 2 for key, row in zip(keys, ids))
    probed = backend._tag_steps(ids, keys)
    assert backend.turn_cache.prompt_tokens == prompts_before  # a probe is not a turn's prefill
    for row, (steps, greedy) in zip(ids, probed):
        full, full_greedy = tag_steps(model, row, backend.answer_tag)
        # this model's probabilities are tiny (1e-11 to 1e-6): compare their logarithms
        assert torch.allclose(torch.tensor(steps).log(), torch.tensor(full).log(), atol=1e-3) and greedy == full_greedy
    assert len({f"{steps[0]:.3e}" for steps, _ in probed}) == len(ids)  # the rows' contexts differ, and so do their probes


def test_turn_cache_gives_the_same_turns_as_a_full_prefill(tiny):
    """Greedy turns with each conversation's KV cache kept between turns equal those that re-read
    the whole conversation, while most of the later turns' prompts come from the cache; with a
    memory budget that holds two, then one, then none, batches mix cached and uncached rows, same turns."""
    import copy

    from agent.backends import Sampling, TransformersBackend

    tokenizer = tiny[1]
    model = _reading_model(tokenizer)  # the tiny model always says "\n"
    questions = ["Where was Ada Voss born?", "Who founded the Kestrel Works, and when?", "When?"]
    start = [[{"role": "system", "content": "Answer with tools."}, {"role": "user", "content": q}] for q in questions]
    turns, caches = {}, {}
    for mode, budget in (("full", None), ("cache", 1 << 30), ("small", 40_000)):
        backend = TransformersBackend(model, tokenizer, Sampling(max_new_tokens=12), batch_size=2,
                                      reuse_cache=budget is not None)
        if budget:
            backend.turn_cache.max_bytes = budget  # an entry here is ~18 KB after turn 1, ~50 KB after turn 3
        conversations, texts = copy.deepcopy(start), []
        for turn in range(3):
            completions = backend.complete(conversations, None)
            texts.append([c.text for c in completions])
            if budget and turn == 0:
                first_prompts = backend.turn_cache.prompt_tokens
            for number, (conversation, completion) in enumerate(zip(conversations, completions)):
                # the re-rendered turn differs from the generated tokens, as a parsed tool call's does
                conversation.append({"role": "assistant", "content": "Edited: " + completion.text})
                conversation.append({"role": "user", "content": "tool output " * (number + turn + 1)})
        turns[mode], caches[mode] = texts, (backend.turn_cache, first_prompts if budget else None)
    assert turns["cache"] == turns["full"] and turns["small"] == turns["full"]
    cache, first = caches["cache"]
    assert cache.reused_tokens > 0.5 * (cache.prompt_tokens - first)  # turns 2, 3: mostly from the cache
    small, _ = caches["small"]
    assert 0 < small.reused_tokens < cache.reused_tokens
    assert sum(k.nbytes + v.nbytes for e in small.entries.values() for k, v in e.layers) <= 40_000
    backend.complete(conversations[:1], None)
    assert len(backend.turn_cache.entries) <= 1  # finished conversations are forgotten
