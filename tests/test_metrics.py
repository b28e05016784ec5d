"""Answer metrics pinned to the official HotpotQA script's behaviour on its edge cases."""
import pytest

from eval.metrics import (aggregate, answer_shown, answers_after_unshown, best_em, best_f1, breakdown, evidence_recall, exact_match,
                          extract_answer, f1_score, normalize_answer)


@pytest.mark.parametrize("raw, normalized", [
    ("The Theater!", "theater"),                 # article dropped as a word, kept inside "theater"
    ("An Anne of the Andes", "anne of andes"),
    ("A.B.C.", "abc"),                            # punctuation removed, letters joined
    ("the-end", "theend"),                        # punctuation goes before articles: no word "the" left
    ("  Barack   Obama\n", "barack obama"),
    ("1990\u20131995", "1990\u20131995"),         # en dash is not in string.punctuation: kept
    ("\u201cHello\u201d", "\u201chello\u201d"),   # curly quotes kept too
    ("¿Qué?", "¿qué"),                            # only the ASCII '?' goes
    ("a an the", ""),
])
def test_normalize_answer(raw, normalized):
    assert normalize_answer(raw) == normalized


def test_exact_match():
    assert exact_match("The Eiffel Tower.", "eiffel tower") == 1.0
    assert exact_match("Eiffel", "eiffel tower") == 0.0
    assert exact_match("1990\u20131995", "1990-1995") == 0.0  # the dash difference survives
    assert exact_match(None, "Paris") == 0.0
    assert exact_match("", "") == 1.0                  # official: EM compares normalized strings
    assert exact_match("", "Paris") == 0.0


def test_f1_yes_no_noanswer():
    assert f1_score("yes", "no") == (0.0, 0.0, 0.0)
    assert f1_score("Yes.", "yes") == (1.0, 1.0, 1.0)
    assert f1_score("no", "no") == (1.0, 1.0, 1.0)
    # a yes/no side that differs scores 0 even when tokens overlap
    assert f1_score("yes", "yes it is")[0] == 0.0
    assert f1_score("yes it is", "yes")[0] == 0.0
    assert f1_score("noanswer", "no answer")[0] == 0.0


def test_f1_partial_overlap_by_hand():
    f1, precision, recall = f1_score("Barack Obama", "Obama")
    assert (precision, recall) == (0.5, 1.0) and f1 == pytest.approx(2 / 3)
    # "cat sat on mat" vs "cat on mat": 3 shared of 4 predicted, 3 gold
    f1, precision, recall = f1_score("the cat sat on the mat", "cat on a mat")
    assert (precision, recall) == (0.75, 1.0) and f1 == pytest.approx(6 / 7)
    # multiset overlap: "new" counts once
    f1, precision, recall = f1_score("new new york", "New York")
    assert precision == pytest.approx(2 / 3) and recall == 1.0 and f1 == pytest.approx(0.8)
    assert f1_score("Paris", "London") == (0.0, 0.0, 0.0)


def test_f1_empty_and_none():
    assert f1_score("", "Paris") == (0.0, 0.0, 0.0)
    assert f1_score("", "")[0] == 0.0   # official: no shared tokens -> 0, even though EM is 1
    assert f1_score("the", "Paris")[0] == 0.0
    assert f1_score(None, "Paris") == (0.0, 0.0, 0.0)


def test_best_over_aliases():
    aliases = ["New York City", "NYC", "Big Apple"]
    assert best_em("nyc", aliases) == 1.0
    assert best_em("New York", aliases) == 0.0
    assert best_f1("New York", aliases) == pytest.approx(0.8)   # p=1, r=2/3 on the first alias
    assert best_f1("the big apple!", aliases) == 1.0
    assert best_em(None, aliases) == 0.0 and best_f1(None, aliases) == 0.0
    assert best_em("x", []) == 0.0 and best_f1("x", []) == 0.0


@pytest.mark.parametrize("text, answer", [
    ("<answer>Paris</answer>", "Paris"),
    ("I think <answer>A</answer>, no: <answer>  B \n</answer>", "B"),
    ("<answer>x <answer>y</answer> z</answer>", "y"),              # nested: innermost last pair
    ("<answer>A</answer> then <answer>unclosed", "A"),            # an unclosed tag is ignored
    ("<ANSWER>upper</Answer>", "upper"),
    ("<answer>line one\nline two</answer>", "line one\nline two"),
    ("<answer>A</answer><answer>  </answer>", None),              # the last answer is empty
    ("no tags at all", None),
    ("<answer></answer>", None),
    ("", None),
    (None, None),
])
def test_extract_answer(text, answer):
    assert extract_answer(text) == answer


def test_evidence_recall():
    assert evidence_recall(["d1", "d2"], ["d2", "d9"]) == 0.5
    assert evidence_recall(["d1", "d2"], ["d1", "d2", "d1"]) == 1.0
    assert evidence_recall(["d1"], ["d1#3"]) == 1.0          # a chunk counts for its document
    assert evidence_recall(["d1"], []) == 0.0
    assert evidence_recall([], ["d1"]) is None


def test_answer_shown_in_tool_outputs_only():
    messages = [{"role": "user", "content": "Who married Ada Voss?"},
                {"role": "assistant", "content": "Ada Voss married Bram Ollen."},
                {"role": "tool", "content": "[ada] Ada Voss: She married The Bram Ollen in 1871."}]
    assert answer_shown(["Bram Ollen"], messages) and answer_shown(["x", "1871"], messages)
    assert not answer_shown(["Ada Voss married"], messages[:2])            # the model's own words do not count
    assert not answer_shown(["187"], messages) and not answer_shown([""], messages)  # whole words only


def test_answers_after_unshown_counts_answers_right_after_outputs_without_the_answer():
    call = {"role": "assistant", "content": "I need X.", "tool_calls": [{"type": "function", "function": {"name": "search"}}]}
    messages = [{"role": "user", "content": "Who married Ada Voss?"}, call,
                {"role": "tool", "content": "[ada] Ada Voss: a painter."}, call,            # no answer shown, searched on
                {"role": "tool", "content": "Error: you already called search with these arguments"}, call,  # not an output
                {"role": "tool", "content": "[ada2] Ada Voss: she was born in 1871."},      # no answer shown, answered
                {"role": "assistant", "content": "<answer>Carl Berg</answer>"}]
    assert answers_after_unshown(["Bram Ollen"], "Who married Ada Voss?", messages) == (2, 1)
    shown = messages[:-2] + [{"role": "tool", "content": "She married Bram Ollen."}, messages[-1]]
    assert answers_after_unshown(["Bram Ollen"], "Who married Ada Voss?", shown) == (1, 0)  # answered where shown
    assert answers_after_unshown(["yes"], "Did Ada Voss paint?", messages) is None
    assert answers_after_unshown(["Ada Voss"], "Who is older, Ada Voss or Bo Lind?", messages) is None  # named in the question
    records = [{"unshown_outputs": (2, 1)}, {"unshown_outputs": (2, 0)}, {"unshown_outputs": None}, {}]
    assert aggregate(records)["answer_after_unshown"] == pytest.approx(1 / 4)
    assert aggregate([{"unshown_outputs": (0, 0)}])["answer_after_unshown"] is None


RECORDS = [
    {"em": 1.0, "f1": 1.0, "answered": True, "tool_calls": 3, "valid_tool_calls": 2, "repeated_tool_calls": 1,
     "tokens_generated": 100, "evidence_recall": 1.0, "hops": 2, "type": "bridge", "answer_shown": True},
    {"em": 0.0, "f1": 0.5, "answered": True, "tool_calls": 1, "valid_tool_calls": 1,
     "tokens_generated": 50, "evidence_recall": None, "hops": 2, "type": "comparison", "answer_shown": True},
    {"em": 0.0, "f1": 0.0, "answered": False, "tool_calls": 0, "valid_tool_calls": 0,
     "tokens_generated": 30, "evidence_recall": 0.5, "hops": 3, "type": "bridge"},
]


def test_aggregate():
    result = aggregate(RECORDS)
    assert result["n"] == 3
    assert result["em"] == pytest.approx(1 / 3)
    assert result["f1"] == pytest.approx(0.5)
    assert result["answer_rate"] == pytest.approx(2 / 3)
    assert result["valid_tool_call_rate"] == pytest.approx(3 / 4)   # over all calls, not per episode
    assert result["tool_calls"] == pytest.approx(4 / 3)
    assert result["repeated_calls"] == pytest.approx(1.0)           # only the record that has the key
    assert result["tokens_generated"] == pytest.approx(60)
    assert result["evidence_recall"] == pytest.approx(0.75)         # the None is ignored
    assert result["answer_shown"] == pytest.approx(1.0)             # the record without the key is ignored
    assert result["em_when_shown"] == pytest.approx(0.5)
    assert result["answered_in_one_call"] == pytest.approx(1 / 3)  # not the 3-call one, nor the unanswered one


def test_aggregate_empty_and_no_calls():
    assert aggregate([])["n"] == 0 and aggregate([])["em"] is None
    only = aggregate([RECORDS[2]])
    assert only["valid_tool_call_rate"] is None and only["evidence_recall"] == 0.5
    assert aggregate([RECORDS[1]])["evidence_recall"] is None


def test_breakdown():
    by_hops = breakdown(RECORDS, "hops")
    assert list(by_hops) == [2, 3]
    assert by_hops[2]["n"] == 2 and by_hops[2]["em"] == 0.5
    assert by_hops[3]["valid_tool_call_rate"] is None
    by_type = breakdown(RECORDS, "type")
    assert by_type["bridge"]["n"] == 2 and by_type["comparison"]["f1"] == 0.5
    assert list(breakdown(RECORDS, "pool")) == [None]
