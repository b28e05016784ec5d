"""The RL reward registry on hand-made rollouts: outcome, format, length (policy tokens only), building."""
import pytest

from common.errors import UserError
from types import SimpleNamespace

from rl.rewards import REWARDS, build_rewards, em, episode_view, evidence, f1, format_reward, kimi, overlong, policy_lengths, target, tool_cost


def call(name, **arguments):
    return {"type": "function", "function": {"name": name, "arguments": arguments}}


def rollout(*turns):
    """Messages as TRL builds them: assistant turns (dict or text) and tool replies (tuples)."""
    messages = []
    for turn in turns:
        if isinstance(turn, tuple):
            messages.append({"role": "tool", "name": turn[0], "content": turn[1]})
        elif isinstance(turn, dict):
            messages.append({"role": "assistant", **turn})
        else:
            messages.append({"role": "assistant", "content": turn})
    return messages


SEARCHED = rollout({"content": "I need Ada.", "tool_calls": [call("search", query="Ada Voss")]},
                   ("search", "[ada] Ada Voss: Ada Voss was born in Kestrel."),
                   "<answer>Kestrel</answer>")
DIRECT = rollout("<answer>the Kestrel</answer>")
WRONG = rollout("<answer>Norvania</answer>")
NO_TAG = rollout("It is Kestrel.")
MALFORMED = rollout('I search.\n<tool_call>\n{"name": "search", "arguments": {"query": "Ada"</tool_call>')
BAD_TOOL = rollout({"content": "", "tool_calls": [call("browse", url="x")]}, ("browse", "{'error': 'Tool browse not found.'}"),
                   {"content": "", "tool_calls": [call("open", doc_id="nope")]}, ("open", "Error: unknown document id 'nope'"),
                   "<answer>Kestrel</answer>")
PENDING = rollout({"content": "More.", "tool_calls": [call("search", query="x")]}, ("search", "No documents matched."))


def test_episode_view_reads_answers_calls_and_errors():
    view = episode_view(SEARCHED)
    assert (view.prediction, view.tool_calls, view.invalid_calls, view.ended_on_tool) == ("Kestrel", 1, 0, False)
    assert episode_view(NO_TAG).prediction is None and not episode_view(NO_TAG).answered
    malformed = episode_view(MALFORMED)
    assert (malformed.tool_calls, malformed.invalid_calls, malformed.answered) == (1, 1, False)
    assert malformed.invalid_by_tool == {"unparsed": 1}
    bad = episode_view(BAD_TOOL)
    assert (bad.tool_calls, bad.invalid_calls, bad.prediction) == (2, 2, "Kestrel")
    assert bad.invalid_by_tool == {"browse": 1, "open": 1}
    assert view.invalid_by_tool == {}
    pending = episode_view(PENDING)
    assert pending.ended_on_tool and pending.prediction is None
    assert episode_view("<answer>x</answer>").prediction == "x"  # plain-text completions too


def test_outcome_rewards_use_aliases_and_the_final_turn():
    completions = [SEARCHED, DIRECT, WRONG, NO_TAG, PENDING]
    answers = [["Kestrel", "Kestrel City"]] * 5
    assert em(completions=completions, answers=answers) == [1.0, 1.0, 0.0, 0.0, 0.0]
    scores = f1(completions=[rollout("<answer>Kestrel harbour</answer>"), WRONG], answers=[["Kestrel"], ["Kestrel"]])
    assert scores[0] == pytest.approx(2 / 3) and scores[1] == 0.0
    # an answer inside a turn that also calls a tool is not final
    early = rollout({"content": "<answer>Kestrel</answer>", "tool_calls": [call("search", query="x")]}, ("search", "..."))
    assert em(completions=[early], answers=[["Kestrel"]]) == [0.0]


def test_format_penalizes_no_answer_invalid_calls_and_budget():
    rewards = format_reward(completions=[SEARCHED, NO_TAG, MALFORMED, BAD_TOOL, PENDING], max_tool_calls=8)
    assert rewards == [0.0, -1.0, -1.5, -0.5, -1.5]
    three = rollout(*[t for q in "abc" for t in ({"content": "", "tool_calls": [call("search", query=q)]}, ("search", "hit"))],
                    "<answer>x</answer>")
    assert format_reward(completions=[three], max_tool_calls=2) == [-0.5]
    assert format_reward(completions=[three], max_tool_calls=3) == [0.0]


def ids_and_mask(policy, tool):
    """A completion of `policy` sampled tokens then `tool` tool-output tokens (mask 0)."""
    return [7] * (policy + tool), [1] * policy + [0] * tool


def test_policy_lengths_ignore_tool_tokens():
    ids, mask = ids_and_mask(10, 200)
    assert policy_lengths([ids], [mask]) == [10]
    assert policy_lengths([[1, 2, 3]]) == [3]  # no tools, no mask: the plain length
    with pytest.raises(ValueError, match="tool_mask"):
        policy_lengths([ids], None, [SEARCHED])


def group(lengths, outcomes, tools=None):
    """One GRPO group: completions with given policy lengths (and tool-output tokens), right or wrong."""
    tools = tools or [0] * len(lengths)
    pairs = [ids_and_mask(n, t) for n, t in zip(lengths, tools)]
    return dict(completions=[DIRECT if ok else WRONG for ok in outcomes], answers=[["Kestrel"]] * len(lengths),
                completion_ids=[p[0] for p in pairs], tool_mask=[p[1] for p in pairs], id=["q"] * len(lengths))


def test_kimi_is_group_relative_and_never_rewards_wrong_answers():
    case = group([10, 20, 30, 10], [True, True, False, False])
    assert kimi(**case, length_penalty_scope="correct") == [0.5, 0.0, 0.0, 0.0]
    assert kimi(**case, length_penalty_scope="all") == [0.5, 0.0, -0.5, 0.0]  # the paper: min(0, lambda) when wrong
    for scope in ("correct", "all"):
        wrong = kimi(**group([5, 50, 500], [False] * 3), length_penalty_scope=scope)
        assert all(r <= 0 for r in wrong), wrong
    assert kimi(**group([12, 12], [True, True])) == [0.0, 0.0]  # equal lengths: no signal
    # groups are separated by question id
    two = group([10, 30, 10, 90], [True] * 4)
    two["id"] = ["a", "a", "b", "b"]
    assert kimi(**two) == [0.5, -0.5, 0.5, -0.5]


def test_length_rewards_ignore_tool_output_tokens():
    """Same policy lengths, very different tool outputs: the same length rewards."""
    plain = group([10, 30], [True, True])
    tooly = group([10, 30], [True, True], tools=[900, 5])
    assert kimi(**tooly) == kimi(**plain) == [0.5, -0.5]
    assert target(**tooly, target_length=20) == target(**plain, target_length=20) == [-0.5, -0.5]
    assert overlong(**tooly, overlong_max_tokens=20, overlong_buffer=10) == [0.0, -1.0]


def test_target_overlong_tool_cost_values_and_scope():
    case = group([64, 96, 200, 400], [True, True, True, False])
    assert target(**case, target_length=64) == [0.0, -0.5, -1.0, 0.0]
    assert target(**case, target_length=64, length_penalty_scope="all")[3] == -1.0
    # TRL's DAPO soft punishment: 0 up to max-buffer, linear to -1 at max, -1 beyond
    assert overlong(**case, overlong_max_tokens=128, overlong_buffer=64) == [0.0, -0.5, -1.0, 0.0]
    costs = tool_cost(completions=[SEARCHED, BAD_TOOL, WRONG], answers=[["Kestrel"]] * 3, tool_call_cost=0.1)
    assert costs == [pytest.approx(-0.1), pytest.approx(-0.2), 0.0]
    assert tool_cost(completions=[WRONG, MALFORMED], answers=[["Kestrel"]] * 2, tool_call_cost=0.1,
                     length_penalty_scope="all") == [0.0, pytest.approx(-0.1)]


def test_no_length_reward_gives_a_wrong_answer_a_gain():
    case = group([1, 40, 80, 160], [False] * 4, tools=[0, 300, 0, 30])
    case["completions"] = [WRONG, NO_TAG, MALFORMED, PENDING]
    for name in ("kimi", "target", "overlong", "tool_cost"):
        for scope in ("correct", "all"):
            rewards = build_rewards([name], None, length_penalty_scope=scope, target_length=50,
                                    overlong_max_tokens=100, overlong_buffer=50, tool_call_cost=0.1)[0](**case)
            assert all(r <= 0 for r in rewards), (name, scope, rewards)


def seen(*documents, gold=("ada", "kestrel")):
    """A rollout's environment as the rewards read it: its question's gold ids and the ids it saw."""
    return SimpleNamespace(gold_doc_ids=list(gold), documents_seen=list(documents))


def test_answer_needs_evidence_scores_a_right_guess_as_wrong():
    """Right answers count only with every gold document seen: a short right guess gets neither the
    outcome reward nor Kimi's bonus (lambda still spans the whole group's lengths, as in the paper)."""
    case = group([5, 40, 60, 20], [True, True, True, False])
    case["environments"] = [seen(), seen("ada", "kestrel", "x"), seen("kestrel", "ada"), seen("ada", "kestrel")]
    assert em(**case) == [1.0, 1.0, 1.0, 0.0]  # off by default: the guess (no document seen) scores
    assert em(**case, answer_needs_evidence=True) == [0.0, 1.0, 1.0, 0.0]
    assert f1(**case, answer_needs_evidence=True) == [0.0, 1.0, 1.0, 0.0]
    assert kimi(**case) == [0.5, pytest.approx(0.5 - 35 / 55), -0.5, 0.0]
    assert kimi(**case, answer_needs_evidence=True) == [0.0, pytest.approx(0.5 - 35 / 55), -0.5, 0.0]
    half = dict(case, environments=[seen("ada")] * 4, completions=[SEARCHED] * 3 + [WRONG])  # 1 of 2 gold documents
    settings = dict(overlong_max_tokens=40, overlong_buffer=30, target_length=10)
    for name in ("kimi", "target", "overlong", "tool_cost"):
        assert any(build_rewards([name], None, **settings)[0](**half)), name  # right: a length reward
        assert build_rewards([name], None, answer_needs_evidence=True, **settings)[0](**half) == [0.0] * 4, name
    passage = dict(case, environments=[seen("ada#2", "kestrel")] * 4)  # a passage id counts for its document
    assert em(**passage, answer_needs_evidence=True) == [1.0, 1.0, 1.0, 0.0]
    assert em(**dict(case, environments=[seen(gold=())] * 4), answer_needs_evidence=True) == [1.0, 1.0, 1.0, 0.0]
    with pytest.raises(ValueError, match="environments"):
        em(completions=[DIRECT], answers=[["Kestrel"]], answer_needs_evidence=True)


def test_evidence_reward_pays_recall_to_answered_rollouts_only():
    """The share of gold documents seen, right answer or not; nothing without an answer (searching on
    without answering never pays) or when the question names no gold documents."""
    rollouts = [SEARCHED, WRONG, WRONG, NO_TAG, PENDING, WRONG]
    environments = [seen("ada", "kestrel"), seen("ada#2", "x"), seen(), seen("ada", "kestrel"), seen("ada", "kestrel"),
                    seen("ada", gold=())]
    assert evidence(completions=rollouts, environments=environments) == [1.0, 0.5, 0.0, 0.0, 0.0, 0.0]
    bound = build_rewards(["em", "evidence"], [1.0, 0.5])[1]
    assert bound.settings == {} and bound(completions=rollouts[:2], environments=environments[:2], answers=[["Kestrel"]] * 2) == [1.0, 0.5]
    with pytest.raises(ValueError, match="environments"):
        evidence(completions=[WRONG])


def test_build_rewards_binds_settings_and_checks_names_and_weights():
    funcs = build_rewards(["em", "format", "kimi"], [1.0, 0.5, 1.0], max_tool_calls=3, length_penalty_scope="all")
    assert [f.__name__ for f in funcs] == ["em", "format", "kimi"]
    assert funcs[0].settings == {} and funcs[1].settings == {"max_tool_calls": 3}
    assert funcs[2].settings == {"length_penalty_scope": "all"}
    # TRL calls them with keyword arguments plus extras they ignore
    assert funcs[0](prompts=[[]], completions=[DIRECT], completion_ids=[[1]], answers=[["Kestrel"]],
                    trainer_state=None, tool_mask=[[1]]) == [1.0]
    with pytest.raises(UserError, match="unknown reward.*lenght.*the registry has: em, f1"):
        build_rewards(["em", "lenght"])
    with pytest.raises(UserError, match="reward_weights has 1 value.*reward_funcs has 2"):
        build_rewards(["em", "kimi"], [1.0])
    with pytest.raises(UserError, match="length_penalty_scope must be one of correct, all"):
        build_rewards(["kimi"], length_penalty_scope="wrong")
    assert set(REWARDS) == {"em", "f1", "evidence", "format", "kimi", "target", "overlong", "tool_cost"}
