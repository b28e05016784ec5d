"""Probes of the agent's decisions and the calibrated stop: the first decision and the stop decisions
teacher-forced on oracle searches, evidence contrasts, openers, the oracle reading, the stop's threshold
fit, and the decoding rules built on it (answer threshold, hold below it, the release of a repeated call)."""
import json

import pytest

from tests.steer import writes_tag


def test_first_decision_prefix_and_probe(tiny):
    from agent.chat import prepare_tokenizer
    from agent.tools import SearchTools, tool_functions
    from eval.first_decision import first_decision_prefix, probe, summary

    call = {"type": "function", "function": {"name": "search", "arguments": {"query": "Kestrel"}}}
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "Who founded Kestrel?"},
                {"role": "assistant", "content": "First: the founder.", "tool_calls": [call]},
                {"role": "tool", "name": "search", "content": "[d1] Kestrel: founded by Ada."},
                {"role": "assistant", "content": "<answer>Ada</answer>"}]
    assert first_decision_prefix(messages) == messages[:4]
    assert first_decision_prefix(messages[:2]) is None
    model, tokenizer = tiny
    rows = probe(model, prepare_tokenizer(tokenizer), tool_functions(SearchTools(None)),
                 [{"id": "a", "messages": messages}, {"id": "b", "messages": messages[:2]}])
    assert [r["id"] for r in rows] == ["a"] and 0.0 < rows[0]["p_answer"] < 1.0
    assert summary([{"p_answer": 0.3, "answer_is_argmax": True}, {"p_answer": 0.6, "answer_is_argmax": True}]) == \
        {"episodes": 2, "mean_p_answer": 0.45, "p_answer_over_half": 1, "answer_is_argmax": 2}


def two_hop_oracle() -> list[dict]:
    """An oracle search that goes on after its first output and answers after its second."""
    call = {"type": "function", "function": {"name": "search", "arguments": {"query": "Kestrel"}}}
    tool = {"role": "tool", "name": "search", "content": "[d1] Kestrel: founded by Ada."}
    return [{"role": "system", "content": "s"}, {"role": "user", "content": "Where was Kestrel's founder born?"},
            {"role": "assistant", "content": "First: the founder.", "tool_calls": [call]}, tool,
            {"role": "assistant", "content": "Ada founded it; now her birthplace.", "tool_calls": [call]}, tool,
            {"role": "assistant", "content": "<answer>Oslo</answer>"}]


def test_stop_decisions_points_auc_and_probe(tiny):
    from agent.chat import prepare_tokenizer
    from agent.tools import SearchTools, tool_functions
    from eval.stop_decisions import auc, auc_ci, decision_points, probe, summary

    messages = two_hop_oracle()
    call = messages[2]["tool_calls"][0]
    points = list(decision_points(messages))
    assert [(len(prefix), answers, k) for prefix, answers, k in points] == [(4, False, 1), (6, True, 2)]
    chatty = messages[:-1] + [{"role": "assistant", "content": "So: <answer>Oslo</answer>"}]
    assert [answers for _, answers, _ in decision_points(chatty)] == [False, None]  # text first: not a stop token
    refused = {"role": "tool", "name": "search", "content": "Error: you already called search with these arguments"}
    repeat = messages[:4] + [{"role": "assistant", "content": "First: the founder.", "tool_calls": [call], "train": False},
                             refused] + messages[4:]
    assert [(len(prefix), answers, k) for prefix, answers, k in decision_points(repeat)] == [(6, False, 1), (8, True, 2)]
    assert auc([0.9, 0.8], [0.1, 0.2]) == 1.0 and auc([0.1], [0.9]) == 0.0 and auc([0.5], [0.5]) == 0.5
    assert auc([0.9, 0.3], [0.5]) == 0.5 and auc([], [0.5]) is None
    model, tokenizer = tiny
    rows, skipped = probe(model, prepare_tokenizer(tokenizer), tool_functions(SearchTools(None)),
                          [{"id": "a", "hops": 2, "type": "bridge", "messages": messages},
                           {"id": "b", "hops": 2, "type": "bridge", "messages": chatty}])
    assert [(r["id"], r["k"], r["oracle_answers"]) for r in rows] == [("a", 1, False), ("a", 2, True), ("b", 1, False)]
    assert skipped == 1 and all(0.0 < r["p_answer"] < 1.0 for r in rows)
    report = summary(rows)
    assert report["decisions"] == 3 and report["by_hops"]["2-hop, oracle answers"]["n"] == 1


def test_evidence_contrast_pairs_each_hidden_output_with_the_shown_one(tiny, tmp_path):
    """eval.evidence_contrast: a missed-evidence row and its trajectory give the two contexts and the
    two turns; each turn token's log-probability, read with the shared prefix run once, is the one a
    pass over the whole sequence gives; P(<answer>) is eval.stop_decisions' and is read only where the
    oracle's turn after the shown output opens with it."""
    import math

    from agent.backends import ANSWER_TAG, tag_probability, tag_steps
    from agent.chat import prepare_tokenizer, training_template
    from agent.tools import SearchTools, tool_functions
    from eval import evidence_contrast as EC
    from sft.data import content_offset

    shown = two_hop_oracle()
    again = {"role": "assistant", "content": "None of the results is about Ada; I'll try other words.",
             "tool_calls": [{"type": "function", "function": {"name": "search", "arguments": {"query": "Ada born"}}}]}
    hidden = {"role": "tool", "name": "search", "content": "[d9] Norvania: a country."}
    last = {"id": "t-miss", "miss_of": "t", "messages": [{**m, "train": False} if m["role"] == "assistant" else m
                                                         for m in shown[:5]] + [hidden, again]}
    first = {"id": "t2-miss", "miss_of": "t2", "messages": shown[:2] + [{**shown[2], "train": False}, hidden, again]}
    found = EC.pairs([{"id": "t", "messages": shown}, last, {"id": "t2", "messages": shown}, first,
                      {"id": "orphan-miss", "miss_of": "gone", "messages": first["messages"]}])
    assert [p["id"] for p in found] == ["t-miss", "t2-miss"]
    untrained = [{k: v for k, v in m.items() if k != "train"} for m in found[0]["shown"]]  # contexts are never trained
    assert untrained == shown[:6] and found[0]["hidden"][-1] == hidden and found[0]["go_on"] == shown[6]
    assert found[1]["go_on"] == shown[4] and found[1]["again"] == again and len(found[1]["hidden"]) == 4

    model, tokenizer = tiny
    tokenizer, tools = prepare_tokenizer(tokenizer), tool_functions(SearchTools(None))
    template, tag = training_template(tokenizer), tokenizer(ANSWER_TAG, add_special_tokens=False).input_ids
    sequences = [EC.rendered(tokenizer, tools, template, found[0][context], found[0][turn])
                 for context in ("shown", "hidden") for turn in ("go_on", "again")]
    read = EC.turn_logprobs(model, sequences)  # shown: go on, again; hidden: go on, again
    for (ids, labels), logprobs in zip(sequences, read):  # the shared prefix run once
        start = next(i for i, label in enumerate(labels) if label != -100)
        steps, _ = tag_steps(model, ids[:start], [label for label in labels if label != -100])  # the whole sequence
        assert logprobs == pytest.approx([math.log(p) for p in steps], abs=1e-3)
    rows = [EC.probe_pair(model, tokenizer, tools, template, tag, content_offset(tokenizer, template), pair)
            for pair in found]
    prompt = tokenizer.apply_chat_template(found[0]["shown"], tools=tools, tokenize=False, add_generation_prompt=True)
    alone = tag_probability(model, tokenizer(prompt, add_special_tokens=False).input_ids, tag)[0]
    assert rows[0]["p_answer_shown"] == pytest.approx(alone, abs=1e-3)  # eval.stop_decisions' P(answer)
    assert "p_answer_hidden" in rows[0] and "p_answer_shown" not in rows[1]
    assert rows[0]["again|hidden"] != rows[0]["again|shown"] and all(v < 0 for k, v in rows[0].items() if "|" in k)
    first = content_offset(tokenizer, template)
    prefer = [read[again][first] - read[go_on][first] for go_on, again in ((0, 1), (2, 3))]
    assert rows[0]["first_shift"] == pytest.approx(prefer[1] - prefer[0], abs=1e-3)
    made = EC.summary([{**rows[0], "shift": 1.0, "first_shift": 0.5}, {**rows[1], "shift": 0.0, "first_shift": -1.0},
                       {**rows[1], "shift": -2.0, "first_shift": 0.0}])
    assert (made["pairs"], made["follows_evidence"], made["shift"], made["stop_pairs"]) == (3, 0.5, -0.333, 1)
    assert (made["first_token_follows_evidence"], made["first_token_shift"]) == (0.5, -0.167)
    from common.errors import UserError

    data = tmp_path / "plain.jsonl"
    data.write_text(json.dumps({"id": "t", "messages": shown}) + "\n")
    with pytest.raises(UserError, match="--p-miss 1"):
        EC.main(["--model", "tiny", "--trajectories", str(data)])


def test_contrast_compare_pools_sets_and_pairs_checkpoints_on_shared_pairs(tmp_path, capsys):
    """eval.contrast_compare: shares over every pair of a report (ties count half), the stop's gap only
    where the oracle answers, and the paired difference on the pairs both reports read."""
    from common.errors import UserError
    from eval.contrast_compare import main, paired, pooled, read_report

    def report(name, shifts, gaps=None):
        rows = {f"set{s}.jsonl": {"rows": [{"id": f"p{i}", "first_shift": x} for i, x in enumerate(shifts) if i % 2 == s]}
                for s in (0, 1)}
        for (i, gap) in (gaps or {}).items():
            row = next(r for found in rows.values() for r in found["rows"] if r["id"] == f"p{i}")
            row.update(p_answer_shown=0.5 + gap, p_answer_hidden=0.5)
        path = tmp_path / name
        path.write_text(json.dumps({"model": name, "sets": {f"dev/{k}": v for k, v in rows.items()}}))
        return str(path)

    new = report("new.json", [1.0, 0.5, 0.0, -1.0, 2.0], gaps={0: 0.2, 3: 0.0})
    old = report("old.json", [-1.0, -0.5, 0.0, -1.0], gaps={0: 0.1})
    summary = pooled(read_report(new))
    assert summary["first_token_follows_evidence"]["n"] == 5
    assert summary["first_token_follows_evidence"]["mean_ci"][0] == 0.7  # (1 + 1 + 0.5 + 0 + 1) / 5
    assert summary["p_answer_shown_minus_hidden"]["n"] == 2 and summary["p_answer_shown_minus_hidden"]["mean_ci"][0] == 0.1
    both = paired(read_report(new), read_report(old))
    follows = both["first_token_follows_evidence"]
    assert (follows["n"], follows["base"], follows["new"], follows["difference"]) == (4, 0.125, 0.625, 0.5)
    assert follows["ci"][0] <= 0.5 <= follows["ci"][1]
    assert both["p_answer_shown_minus_hidden"]["n"] == 1  # p3 has a gap in new only
    main([new, "--against", old])
    assert json.loads(capsys.readouterr().out)["against"]["first_token_follows_evidence"]["difference"] == 0.5
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"sets": {"dev/x.jsonl": {"rows": [{"id": "q", "first_shift": 1.0}]}}}))
    with pytest.raises(UserError, match="share no probe pairs"):
        main([new, "--against", str(other)])
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(UserError, match="not an eval.evidence_contrast report"):
        main([str(tmp_path / "bad.json")])


def test_stop_fit_is_recorded_for_its_checkpoint_and_not_redone(tiny, tmp_path, capsys):
    """make stop-fit: the fit names the checkpoint's weights and dtype (eval's sft_stop checks both) and a
    rerun on the same checkpoint, dtype and probe sets does nothing."""
    from agent.models import checkpoint_digest
    from eval.stop_decisions import fitted_stop, main

    messages = two_hop_oracle()
    probes = tmp_path / "probes.jsonl"
    probes.write_text(json.dumps({"id": "a", "hops": 2, "type": "bridge", "messages": messages}) + "\n")
    out = tmp_path / "stop_fit.json"
    argv = ["--model", "tiny", "--trajectories", str(probes), "--fit-threshold", "--out", str(out)]
    main([*argv, "--dtype", "float32"])
    stored = json.loads(out.read_text())
    assert stored["checkpoint"] == checkpoint_digest("tiny")
    threshold = stored["fitted"]["two_sided"]["threshold"]
    assert fitted_stop(out, "tiny") == threshold and 0 < threshold < 1
    assert stored["dtype"] == "float32" and fitted_stop(out, "tiny", "float32") == threshold
    assert "generate in bfloat16" in fitted_stop(out, "tiny", "bfloat16")  # fitted in float32: refused for bf16
    capsys.readouterr()
    main([*argv, "--dtype", "float32"])
    assert "up to date" in capsys.readouterr().out
    probes.write_text(json.dumps({"id": "b", "hops": 2, "type": "bridge", "messages": messages}) + "\n")
    main([*argv, "--dtype", "float32"])
    assert "up to date" not in capsys.readouterr().out  # other probe questions: fitted again
    main([*argv, "--dtype", "bfloat16"])
    assert "up to date" not in capsys.readouterr().out  # another dtype: fitted again, and recorded
    assert json.loads(out.read_text())["dtype"] == "bfloat16"


def test_openers_compare_the_model_with_the_oracle_by_action(tiny):
    """eval.openers: a model that always writes the oracle's own first token matches the oracle's
    distances between actions exactly; one that opens the same way everywhere has distance 0."""
    import torch

    from agent.chat import prepare_tokenizer
    from agent.tools import SearchTools, tool_functions
    from eval import openers as OP

    def call(name, **arguments):
        return [{"type": "function", "function": {"name": name, "arguments": arguments}}]

    start = [{"role": "system", "content": "s"}, {"role": "user", "content": "Where was Kestrel's founder born?"},
             {"role": "assistant", "content": "First: the founder.", "tool_calls": call("search", query="Kestrel")},
             {"role": "tool", "name": "search", "content": "[d1] Kestrel: founded by Ada."}]
    moves_on = start + [{"role": "assistant", "content": "Ada founded it; now her birthplace.",
                         "tool_calls": call("search", query="Ada")},
                        {"role": "tool", "name": "search", "content": "[d2] Ada: born in Oslo."},
                        {"role": "assistant", "content": "<answer>Oslo</answer>"}]
    unclear = start[:3] + [{"role": "tool", "name": "search", "content": "[d1] Kestrel: a company."}]
    find = call("find", doc_id="d1", text="founded")
    reads = unclear + [{"role": "assistant", "content": "Let me find it.", "tool_calls": find},
                     {"role": "tool", "name": "find", "content": "Ada, born in Oslo, founded it."},
                     {"role": "assistant", "content": "<answer>Oslo</answer>"}]
    chatty = moves_on[:-1] + [{"role": "assistant", "content": "Oslo it is. <answer>Oslo</answer>"}]
    trajectories = [{"id": f"t{i}", "messages": m} for i in range(5) for m in (moves_on, reads, chatty)]
    model, tokenizer = tiny
    tokenizer, tools = prepare_tokenizer(tokenizer), tool_functions(SearchTools(None))
    vocab = len(tokenizer)

    class Scripted(torch.nn.Module):
        """Puts all the mass on `fixed`, or else on the next input token (it reads ahead, so it
        writes the oracle's turn), uniform past the input's end."""
        def __init__(self, fixed=None):
            super().__init__()
            self.fixed, self.config, self.device = fixed, model.config, torch.device("cpu")

        def forward(self, ids, logits_to_keep=1):
            logits, n = torch.zeros((1, logits_to_keep, vocab)), ids.shape[1]
            for row in range(logits_to_keep):
                at = n - logits_to_keep + row
                target = self.fixed if self.fixed is not None else ids[0, at + 1] if at + 1 < n else None
                if target is not None:
                    logits[0, row, :] = -1e4
                    logits[0, row, target] = 0.0
            return type("Out", (), {"logits": logits})

    expected_rest = {}  # the reader gets each later token right but the last (not in its input)
    for t in trajectories:
        for prefix, answers, _ in OP.decision_points(t["messages"]):
            prompt = tokenizer.apply_chat_template(prefix, tools=tools, tokenize=False, add_generation_prompt=True)
            full = tokenizer.apply_chat_template(t["messages"][:len(prefix) + 1], tools=tools, tokenize=False)
            turn = OP.turn_tokens(tokenizer, tokenizer(prompt, add_special_tokens=False).input_ids, full, prompt)
            assert turn[-1] == tokenizer.eos_token_id  # up to the end of turn, as SFT's labels
            action = OP.oracle_action(t["messages"][len(prefix)], answers)
            expected_rest[action] = expected_rest.get(action, 0.0) + (len(turn) - 2 + 1 / vocab) / (len(turn) - 1)
    raw = OP.probe(Scripted(), tokenizer, tools, trajectories)
    for action, group in raw["groups"].items():
        assert abs(group["p_rest"] - expected_rest[action]) < 1e-4, action
    like_oracle = OP.summary(raw, tokenizer)
    assert {a: c["n"] for a, c in like_oracle["by_oracle_action"].items()} == \
        {"answer": 10, "answer after text": 5, "search": 10, "find": 5}
    for cell in like_oracle["by_oracle_action"].values():
        assert cell["p_oracle_opener"] == 1.0 == cell["greedy_writes_oracle_opener"]
    distances = like_oracle["total_variation"]
    assert len(distances) == 6  # every pair of the four groups
    assert all(d["model"] == d["oracle"] == 1.0 for d in distances.values())  # "<", "Os", "Ada", "Let"
    constant = OP.summary(OP.probe(Scripted(fixed=42), tokenizer, tools, trajectories), tokenizer)
    assert all(d["model"] == 0.0 and d["oracle"] == 1.0 for d in constant["total_variation"].values())
    real = OP.probe(model, tokenizer, tools, trajectories)
    assert real["skipped_too_long"] == 0
    assert abs(float(real["groups"]["answer"]["model"].sum()) - 10) < 1e-3  # ten distributions of mass 1
    assert 0.0 < real["groups"]["find"]["p_rest"] / 5 < 1.0
    assert 0.0 <= OP.summary(real, tokenizer)["total_variation"]["search vs find"]["model"] < 1.0


def test_stop_decision_auc_interval_resamples_trajectories():
    from eval.stop_decisions import auc_ci, summary

    def row(t, answers, p, greedy=False, hops=1, k=1):
        return {"trajectory": t, "oracle_answers": answers, "p_answer": p, "greedy_answers": greedy, "hops": hops, "k": k}

    separated = [row(t, True, 0.9, True) for t in range(5)] + [row(t, False, 0.1) for t in range(5, 10)]
    assert auc_ci(separated) == (1.0, 1.0)
    mixed = [row(0, True, 0.9, True), row(1, True, 0.2), row(2, False, 0.5), row(3, False, 0.1)]
    low, high = auc_ci(mixed)
    assert low < 0.75 < high and 0.0 <= low and high <= 1.0
    report = summary(mixed)
    assert report["auc"] == 0.75 and report["greedy_agreement"] == 0.75  # row 1 is the one greedy gets wrong
    assert report["oracle_answers"] == {"n": 2, "mean_p_answer": 0.55, "greedy_answers": 1}


def _reading_messages(final: str = "<answer>Oslo</answer>"):
    call = {"type": "function", "function": {"name": "search", "arguments": {"query": "Ada"}}}
    return [{"role": "system", "content": "s"}, {"role": "user", "content": "Where was Kestrel's founder born?"},
            {"role": "assistant", "content": "First: the founder.", "tool_calls": [call]},
            {"role": "tool", "name": "search", "content": "[d1] Ada: Ada was born in Oslo."},
            {"role": "assistant", "content": final}]


def test_oracle_reading_forces_the_tag_and_reads_the_free_turn(tiny):
    from agent.backends import Completion, Sampling, TransformersBackend
    from agent.chat import prepare_tokenizer
    from agent.tools import SearchTools, tool_functions
    from eval.oracle_reading import final_context, forced_prediction, read, summary

    messages = _reading_messages()
    assert final_context(messages) == messages[:4]
    assert final_context(messages[:3] + [{"role": "user", "content": "?"}, messages[4]]) is None  # not after a tool
    assert final_context(messages[:4] + [{"role": "assistant", "content": "I'll search more."}]) is None
    assert forced_prediction("Oslo</answer>") == "Oslo" and forced_prediction("Oslo and more") is None
    assert forced_prediction("Oslo</ANSWER>") == "Oslo"  # read as agent.run reads answers

    model, tokenizer = tiny
    tokenizer = prepare_tokenizer(tokenizer)
    tag = tokenizer("<answer>", add_special_tokens=False).input_ids

    class Scripted(TransformersBackend):
        """Reads the right answer only when the turn is forced; searches again when free."""
        def complete_ids(self, ids, keys=None, max_new_tokens=None):
            self.seen.append([row[-len(tag):] == tag for row in ids])
            return [Completion("Oslo</answer>" if row[-len(tag):] == tag else
                               'More. <tool_call>{"name": "search", "arguments": {"query": "x"}}</tool_call>', 3, len(row))
                    for row in ids]

    backend = Scripted(model, tokenizer, Sampling(), reuse_cache=False)
    backend.seen = []
    trajectories = [{"id": "a", "hops": 2, "type": "bridge", "answers": ["Oslo"], "messages": messages},
                    {"id": "b", "hops": 2, "type": "yesno", "answers": ["no"], "messages": messages[:3]}]
    rows, skipped = read(backend, tool_functions(SearchTools(None)), trajectories)
    assert backend.seen == [[True], [False]] and skipped == {"no_answer_after_a_tool_output": 1, "context_too_long": 0}
    assert rows[0]["forced_em"] == 1.0 and not rows[0]["free_answers"] and rows[0]["free_em"] == 0.0
    assert rows[0]["shown"] and not rows[0]["oracle_text_first"]
    report = summary(rows)
    assert report["forced_em"] == 1.0 and report["free_answers"] == 0.0 and report["by_type"]["bridge/2"]["n"] == 1

    # smoke test with a real model (the tiny one writes noise); the budget is restored after
    real = TransformersBackend(model, tokenizer, Sampling(max_new_tokens=7), reuse_cache=False)
    rows, _ = read(real, tool_functions(SearchTools(None)), trajectories[:1])
    assert len(rows) == 1 and isinstance(rows[0]["free"], str) and real.sampling.max_new_tokens == 7


def test_stop_threshold_fit_prefers_the_higher_of_tied_thresholds():
    from eval.stop_decisions import fit_threshold

    def row(answers, p, greedy=False):
        return {"oracle_answers": answers, "p_answer": p, "greedy_answers": greedy}

    rows = [row(True, 0.30), row(True, 0.25), row(False, 0.10), row(False, 0.05), row(True, 0.6, True)]
    fitted = fit_threshold(rows)
    assert fitted["threshold"] == 0.25 and fitted["agreement"] == 1.0 and fitted["greedy_agreement"] == 0.6
    # a go-on point between the answer points: 0.30 and 0.20 agree on 4 of 5 alike; the higher wins
    tied = [row(True, 0.30), row(False, 0.25), row(True, 0.20), row(False, 0.10), row(False, 0.05)]
    assert fit_threshold(tied)["threshold"] == 0.30 and fit_threshold(tied)["agreement"] == 0.8
    # greedy decoding alone is best: no threshold
    greedy_best = [row(False, 0.9), row(True, 0.5, True), row(False, 0.1)]
    assert fit_threshold(greedy_best) == {"threshold": None, "two_sided": False, "agreement": 1.0,
                                          "greedy_agreement": 1.0, "decisions": 3}
    # a tiny probability is kept as it is (rounding it to 0.0 would make agent.run refuse it)
    assert fit_threshold([row(True, 3e-5), row(False, 1e-6)])["threshold"] == 3e-5


def test_two_sided_threshold_fit_ignores_greedy_answers_below_it():
    from eval.stop_decisions import fit_threshold

    def row(answers, p, greedy=False):
        return {"oracle_answers": answers, "p_answer": p, "greedy_answers": greedy}

    # greedy answers at the 0.20 go-on point: one-sided every threshold keeps that error, two-sided
    # a threshold of 0.25 refuses it and reproduces every stop
    rows = [row(True, 0.30), row(True, 0.25, True), row(False, 0.20, True), row(False, 0.05)]
    assert fit_threshold(rows)["agreement"] == 0.75
    fitted = fit_threshold(rows, two_sided=True)
    assert fitted["threshold"] == 0.25 and fitted["agreement"] == 1.0 and fitted["two_sided"]
    assert fitted["greedy_agreement"] == 0.5
    # always a threshold, even where greedy decoding does as well (the rule is then the same)
    assert fit_threshold([row(True, 0.9, True), row(False, 0.1)], two_sided=True)["threshold"] == 0.9


def test_opening_ban_draws_the_turn_given_that_it_does_not_open_with_the_tag():
    import math

    import torch

    from agent.backends import Hold, OpeningBan, branch_index

    assert branch_index([44, 11247, 46], [44, 19324, 79, 4350, 46]) == 1  # SmolLM2: `<` `answer` `>` / `<` `tool` ...
    assert branch_index([5, 6], [7, 8]) == 0
    with pytest.raises(ValueError):
        branch_index([44], [44, 19324])
    tag, width = [44, 11247, 46], 3
    hold = Hold([0.6, 0.9], greedy_answers=True)  # P(<) = 0.6, P(answer | <) = 0.9
    ban = OpeningBan(tag, width, [hold, None, hold])
    scores = torch.zeros(3, 20000)
    opening = ban(torch.tensor([[1, 2, 3]] * 3), scores.clone())
    # `<` keeps only the mass that does not lead to `answer`: 0.6 x 0.1
    assert math.isclose(opening[0, 44].item(), math.log(0.1), rel_tol=1e-5) and opening[1, 44] == 0
    assert (opening[0, :44] == 0).all() and (opening[2] == opening[0]).all()
    after = ban(torch.tensor([[1, 2, 3, 44], [1, 2, 3, 44], [1, 2, 3, 9]]), scores.clone())
    assert after[0, 11247] == float("-inf") and after[1, 11247] == 0  # held / not held
    assert (after[2] == 0).all()  # held, but the turn opened with another token
    later = ban(torch.tensor([[1, 2, 3, 44, 19324]] * 3), scores.clone())  # past the branch: nothing changes
    assert (later == 0).all()


def test_forced_opening_writes_the_tag_in_forced_rows_only():
    import torch

    from agent.backends import ForcedOpening, Hold

    tag = [44, 11247, 46]
    force = ForcedOpening(tag, None, ["force", None, Hold([0.5, 0.5], False)])
    scores = torch.zeros(3, 20000)
    for step in range(len(tag)):  # left-padded prompts of width 4, then the tag so far
        ids = torch.tensor([[0, 0, 1, 2, *tag[:step]]] * 3)
        out = force(ids, scores.clone())
        assert out[0].isinf().sum() == 19999 and out[0, tag[step]] == 0  # only the tag's next token is left
        assert (out[1:] == 0).all()  # the others are untouched (a Hold is OpeningBan's)
    assert (force(torch.tensor([[0, 0, 1, 2, *tag, 9]] * 3), scores.clone()) == 0).all()  # after the tag: free


def test_hold_below_keeps_a_turn_from_opening_with_the_answer_tag(tiny):
    from agent.backends import Sampling, TransformersBackend, tag_probability
    from agent.chat import prepare_tokenizer

    model, tokenizer = tiny
    tokenizer = prepare_tokenizer(tokenizer)
    messages = _reading_messages()[:4]
    backend = TransformersBackend(model, tokenizer, Sampling(max_new_tokens=4), reuse_cache=False)
    tag = backend.answer_tag
    with writes_tag(model, tag):  # the tiny model, pushed to write `<answer>` everywhere
        ids = tokenizer(backend.render(messages, None), add_special_tokens=False).input_ids
        p, greedy = tag_probability(model, ids, tag)
        assert greedy and p < 1.0
        assert backend.complete([messages], None)[0].text.startswith("<answer>")
        backend.answer_threshold, backend.hold_below = 1.0, True  # p < 1: held
        held = backend.complete([messages], None)[0]
        assert not held.text.startswith("<answer>") and held.held and backend.held_answers == 1
        backend.max_turns = 2  # the conversation holds one assistant turn: the next is the last, never held
        assert backend.complete([messages], None)[0].text.startswith("<answer>") and backend.held_answers == 1


def test_a_held_turn_that_repeats_a_call_is_released_to_the_models_own_turn(tiny, monkeypatch):
    """--release-repeats: a held turn whose call the tools would refuse as a repeat is generated again
    unheld, and only where greedy decoding wanted to answer; a new call or a non-answering hold stays."""
    from agent.backends import Completion, Hold, Sampling, TransformersBackend, repeats_a_call
    from agent.chat import prepare_tokenizer, render_tool_call

    model, tokenizer = tiny
    messages = _reading_messages()[:4]
    repeat = messages[2]["tool_calls"][0]
    other = {"type": "function", "function": {"name": "search", "arguments": {"query": "Kestrel founder"}}}
    assert repeats_a_call([repeat], messages) and not repeats_a_call([other], messages)
    assert not repeats_a_call([other, other], messages) and repeats_a_call([other, repeat], messages)
    assert not repeats_a_call([repeat], messages[:2])  # nothing called yet

    backend = TransformersBackend(model, prepare_tokenizer(tokenizer), Sampling(max_new_tokens=4), reuse_cache=False,
                                  answer_threshold=0.5, hold_below=True, release_repeats=True)
    holds = [Hold([0.3, 0.9], greedy_answers=True), Hold([0.1, 0.2], greedy_answers=False),
             Hold([0.3, 0.9], greedy_answers=True)]
    texts = [render_tool_call(repeat), render_tool_call(repeat), render_tool_call(other)]
    asked = []

    def fake_complete_ids(ids, keys=None, max_new_tokens=None, hold=None, only_these=True):
        asked.append(only_these)
        if hold is not None:  # the held turns
            return [Completion(text, 5, len(row)) for text, row in zip(texts, ids)]
        return [Completion("<answer>Oslo</answer>", 6, len(row)) for row in ids]

    monkeypatch.setattr(backend, "_stops", lambda conversations, ids, keys: list(holds))
    monkeypatch.setattr(backend, "complete_ids", fake_complete_ids)
    released, kept, new_call = backend.complete([messages, list(messages), list(messages)], None)
    assert released.released and not released.held and released.text == "<answer>Oslo</answer>"
    assert not kept.released and kept.text == texts[1]  # greedy did not want to answer: the hold changed nothing
    assert not new_call.released and new_call.held and new_call.text == texts[2]
    assert backend.released_holds == 1 and backend.held_answers == 1
    assert asked == [True, False]  # the second pass keeps the other conversations' turn caches
    backend.release_repeats = False
    assert not any(c.released for c in backend.complete([messages], None)) and backend.released_holds == 1
    monkeypatch.undo()
    cached = TransformersBackend(model, prepare_tokenizer(tokenizer), Sampling(max_new_tokens=4))
    first, second = list(messages), messages[:2]
    cached.complete([first, second], None)
    ids = tokenizer(cached.render(first, None), add_special_tokens=False).input_ids
    cached.complete_ids([ids], [id(first)], only_these=False)
    assert set(cached.turn_cache.entries) == {id(first), id(second)}
    cached.complete_ids([ids], [id(first)])  # a round's only conversation: the others are forgotten
    assert set(cached.turn_cache.entries) == {id(first)}


def test_answer_threshold_opens_the_turn_with_the_tag_after_tool_outputs_only(tiny):
    from agent.backends import Sampling, TransformersBackend, tag_probability
    from agent.chat import prepare_tokenizer

    model, tokenizer = tiny
    tokenizer = prepare_tokenizer(tokenizer)
    messages = _reading_messages()[:4]
    backend = TransformersBackend(model, tokenizer, Sampling(max_new_tokens=4), reuse_cache=False)
    ids = tokenizer(backend.render(messages, None), add_special_tokens=False).input_ids
    p, greedy = tag_probability(model, ids, backend.answer_tag)
    assert 0.0 < p < 1e-3 and not greedy  # the tiny random model never picks the tag by itself
    unforced = backend.complete([messages], None)[0]
    backend.answer_threshold = p / 2
    after_tool, after_question = backend.complete([messages, messages[:2]], None)
    assert after_tool.text.startswith("<answer>") and not after_question.text.startswith("<answer>")
    assert backend.forced_answers == 1 and after_tool.tokens == unforced.tokens + len(backend.answer_tag)
    backend.answer_threshold = p * 2
    assert backend.complete([messages], None)[0].text == unforced.text and backend.forced_answers == 1
