"""SFT's rows: which trajectories it trains on and how they are batched. Stale oracle trajectories, random
steps of like-length micro-batches, twins in one step, first-turn rows, missed-evidence rows, evidence pairs,
the model card's counts, and type repeats."""
import json

import pytest

from agent.tools import SearchTools
from common.errors import UserError
from sft.data import tokenize_trajectory, training_template
from tests.test_agent import store  # noqa: F401  (fixture)
from tests.test_sft import TOOLS, sft_args, trajectory, write_trajectories


def test_trajectories_from_older_oracle_code_are_flagged(tmp_path, store):  # noqa: F811
    from agent.prompt import prompt_hash
    from data.trajectories import code_hash
    from datastore.retriever import Datastore
    from sft.data import stale_warning

    data = write_trajectories(tmp_path / "trajectories.jsonl", store)
    assert stale_warning(str(data)) is None  # hand-made, no manifest: nothing to compare
    manifest = {"generator": "data.trajectories", "inputs": {"code": "an older oracle"}}
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    assert "make data" in stale_warning(str(tmp_path)) and "make data" in stale_warning(str(data))
    manifest["inputs"]["code"] = code_hash(Datastore)
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    assert "make data" in stale_warning(str(tmp_path))  # the prompt is not recorded: another prompt
    manifest["inputs"]["prompt"] = prompt_hash()
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    assert stale_warning(str(tmp_path)) is None


def test_rebalanced_batches_are_random_steps_of_like_length_micro_batches_seeded_by_the_recipe(tmp_path, store):  # noqa: F811
    """`batch_rebalance`: each optimizer step is a random draw of rows, split into micro-batches of like
    length; the recipe's seed (not transformers' fixed 42) picks the draws; training runs on them."""
    from common.recipe import parse_recipe
    from sft.train import SFTScriptArguments, build_trainer, make_dataset
    from trl import ModelConfig, SFTConfig

    long = trajectory(SearchTools(store))
    variants = [long, long[:5] + [{"role": "assistant", "content": "<answer>Ada Voss</answer>"}],
                long[:3] + [{"role": "tool", "name": "search", "content": "no hits"}, {"role": "assistant", "content": "<answer>x</answer>"}]]
    data = tmp_path / "t.jsonl"
    data.write_text("".join(json.dumps({"id": str(i), "messages": variants[i % 3]}) + "\n" for i in range(12)))

    def steps(seed):
        script, args, model_args = parse_recipe((SFTScriptArguments, SFTConfig, ModelConfig), sft_args(
            tmp_path, data, "--max_steps", "2", "--per_device_train_batch_size", "2", "--gradient_accumulation_steps",
            "2", "--train_sampling_strategy", "batch_rebalance", "--save_strategy", "no", "--seed", str(seed)))
        dataset, _, _ = make_dataset(script, args, model_args.model_name_or_path)
        trainer = build_trainer(script, args, model_args, dataset)
        micro = list(trainer._get_train_sampler())
        return trainer, [len(ids) for ids in dataset["input_ids"]], [micro[i:i + 2] for i in range(0, len(micro), 2)]

    trainer, lengths, seed0 = steps(0)
    assert sorted(i for step in seed0 for batch in step for i in batch) == list(range(12))  # an epoch, each row once
    for first, second in seed0:
        assert len(first) + len(second) == 4
        a, b = [lengths[i] for i in first], [lengths[i] for i in second]
        assert min(a) >= max(b) or min(b) >= max(a)  # sorted into like-length micro-batches within the step
    composition = [sorted(i % 3 for batch in step for i in batch) for step in seed0]
    assert any(len(set(c)) > 1 for c in composition)  # steps mix lengths (group_by_length would not)
    assert steps(0)[2] == seed0 and steps(1)[2] != seed0
    trainer.train()
    assert trainer.state.global_step == 2


def test_twin_order_keeps_each_group_in_one_step():
    """sft.data.twin_order: a permutation of the rows in which a trajectory and its twins share a step,
    reproducible from the generator's seed."""
    import torch

    from sft.data import twin_groups, twin_order

    rows = [{"id": f"q{i}-oracle"} for i in range(30)] + [{"id": f"q{i}-twin", "twin_of": f"q{i}-oracle"} for i in range(0, 30, 2)]
    groups = twin_groups(rows)
    assert groups[0] == groups[30] and groups[2] == groups[31] and groups[0] != groups[1]
    assert twin_groups(rows[:30]) is None  # no twins: the sampler stays transformers' own
    order = twin_order(groups, 8, torch.Generator().manual_seed(0))
    assert sorted(order) == list(range(45))
    step_of = {row: position // 8 for position, row in enumerate(order)}
    assert all(step_of[2 * i] == step_of[30 + i] for i in range(15))
    assert twin_order(groups, 8, torch.Generator().manual_seed(0)) == order
    assert twin_order(groups, 8, torch.Generator().manual_seed(1)) != order
    few_singles = [i // 2 for i in range(40)] + [20, 21, 22]  # 20 pairs, 3 single rows: some pairs must split
    assert sorted(twin_order(few_singles, 8, torch.Generator().manual_seed(0))) == list(range(43))


def test_twins_are_drawn_in_the_same_step_as_their_original(tmp_path, store):  # noqa: F811
    """Trajectories with `twin_of` (data/trajectory_twins.py): every step of a batch_rebalance run draws
    each pair together; other samplers are refused rather than drawing pairs apart."""
    from common.recipe import parse_recipe
    from sft.train import SFTScriptArguments, build_trainer, make_dataset
    from trl import ModelConfig, SFTConfig

    long = trajectory(SearchTools(store))
    short = long[:5] + [{"role": "assistant", "content": "<answer>Ada Voss</answer>"}]
    rows = [{"id": f"q{i}-oracle", "messages": long} for i in range(8)]
    rows += [{"id": f"q{i}-twin", "twin_of": f"q{i}-oracle", "messages": short} for i in range(8)]
    data = tmp_path / "t.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))

    def trainer_with(*extra):
        script, args, model_args = parse_recipe((SFTScriptArguments, SFTConfig, ModelConfig), sft_args(
            tmp_path, data, "--max_steps", "2", "--per_device_train_batch_size", "2", "--gradient_accumulation_steps",
            "2", "--save_strategy", "no", *extra))
        dataset, stats, groups = make_dataset(script, args, model_args.model_name_or_path)
        assert stats["twins"] == 8
        return build_trainer(script, args, model_args, dataset, groups)

    micro = list(trainer_with("--train_sampling_strategy", "batch_rebalance")._get_train_sampler())
    steps = [sorted(i for batch in micro[s:s + 2] for i in batch) for s in range(0, len(micro), 2)]
    assert sorted(i for step in steps for i in step) == list(range(16))
    for step in steps:
        assert sorted(i % 8 for i in step) == sorted(2 * [i % 8 for i in step if i < 8])  # each original with its twin
    with pytest.raises(UserError, match="batch_rebalance"):
        trainer_with("--train_sampling_strategy", "group_by_length")
    with pytest.raises(UserError, match="packing"):
        trainer_with("--train_sampling_strategy", "batch_rebalance", "--packing", "true")


def test_twin_groups_must_index_the_trainers_rows():
    from transformers.trainer_pt_utils import BatchRebalanceSampler

    from sft.train import twins_together

    sampler = BatchRebalanceSampler(lengths=[5, 6, 7, 8], effective_batch_size=4, dp_size=1, grad_accum=2)
    assert sorted(i for batch in twins_together(sampler, [0, 0, 1, 2]) for i in batch) == [0, 1, 2, 3]
    with pytest.raises(UserError, match="3 twin groups"):
        twins_together(sampler, [0, 0, 1])


def test_first_turn_rows_train_exactly_the_first_turn_of_each_trajectory(tmp_path, tokenizer, store):  # noqa: F811
    """first_turns: each trajectory also gives a row that ends with its first thought and call. The
    row's tokens are a prefix of the whole trajectory's and its labels are exactly that first turn's;
    a trajectory that answers without a call adds no row."""
    from common.recipe import parse_recipe
    from sft.data import first_turn_rows
    from sft.train import SFTScriptArguments, make_dataset
    from trl import ModelConfig, SFTConfig

    whole = trajectory(SearchTools(store))
    direct = [whole[0], whole[1], {"role": "assistant", "content": "<answer>Ada Voss</answer>"}]
    rows = [{"id": "a", "messages": whole}, {"id": "b", "messages": direct}]
    firsts = first_turn_rows(rows)
    assert [(r["id"], r["first_turn_of"]) for r in firsts] == [("a-first", "a")] and firsts[0]["messages"] == whole[:3]
    template = training_template(tokenizer)
    ids, labels = tokenize_trajectory(tokenizer, whole, TOOLS, template)
    first_ids, first_labels = tokenize_trajectory(tokenizer, firsts[0]["messages"], TOOLS, template)
    assert ids[:len(first_ids)] == first_ids
    first_span = [t for t in first_labels if t != -100]
    end = next(i for i in range(len(labels)) if labels[i] != -100 and labels[i + 1] == -100) + 1
    assert first_span == [t for t in labels[:end] if t != -100] and tokenizer.decode(first_span).count("<tool_call>") == 1

    data = tmp_path / "t.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    for extra, used in (([], 2), (["--first_turns", "true"], 3)):
        script, args, model_args = parse_recipe((SFTScriptArguments, SFTConfig, ModelConfig),
                                                sft_args(tmp_path, data, *extra))
        dataset, stats, _ = make_dataset(script, args, model_args.model_name_or_path)
        assert (stats["trajectories"], stats["used"], len(dataset), stats.get("first_turns")) == (
            2, used, used, 1 if extra else None)


def test_a_missed_evidence_row_trains_only_its_search_again(tmp_path, tokenizer, store):  # noqa: F811
    """data/trajectory_misses.py marks the turns before the hidden output "train": false: the row's
    labels are exactly its last thought and call, and make_dataset counts it (not as a first turn)."""
    from common.recipe import parse_recipe
    from sft.train import SFTScriptArguments, make_dataset
    from trl import ModelConfig, SFTConfig

    whole = trajectory(SearchTools(store))
    again = {"role": "assistant", "content": "None of the results is about Kestrel; I'll try other words.",
             "tool_calls": [{"type": "function", "function": {"name": "search", "arguments": {"query": "Kestrel"}}}]}
    hidden = {"role": "tool", "name": "search", "content": "[other-doc] Other: nothing about it."}
    miss = {"id": "a-miss", "miss_of": "a", "messages": whole[:2] + [{**whole[2], "train": False}, hidden, again]}
    ids, labels = tokenize_trajectory(tokenizer, miss["messages"], TOOLS, training_template(tokenizer))
    trained = tokenizer.decode([t for t in labels if t != -100])
    assert "None of the results" in trained and '"Kestrel"' in trained and "I need the company" not in trained
    assert trained.count("<tool_call>") == 1 and "nothing about it" not in trained

    data = tmp_path / "t.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in [{"id": "a", "messages": whole}, miss]))
    script, args, model_args = parse_recipe((SFTScriptArguments, SFTConfig, ModelConfig),
                                            sft_args(tmp_path, data, "--first_turns", "true"))
    _, stats, _ = make_dataset(script, args, model_args.model_name_or_path)
    assert (stats["used"], stats["first_turns"], stats["missed_evidence"]) == (3, 1, 1)


def test_evidence_pairs_train_each_side_of_a_pair_on_its_one_turn_in_one_step(tmp_path, tokenizer, store):  # noqa: F811
    """evidence_pairs (sft/data.py shown_rows): a missed-evidence row's other side is its trajectory up
    to the same output, which shows the fact, and the oracle's next turn, only that turn trained; the
    two differ in that output and that turn alone, and share a draw group. `only` keeps the pairs."""
    from common.recipe import parse_recipe
    from sft.data import evidence_pair_rows, shown_rows, twin_groups
    from sft.train import SFTScriptArguments, make_dataset
    from trl import ModelConfig, SFTConfig

    whole = trajectory(SearchTools(store))
    again = {"role": "assistant", "content": "None of the results is about Kestrel; I'll try other words.",
             "tool_calls": [{"type": "function", "function": {"name": "search", "arguments": {"query": "Kestrel"}}}]}
    hidden = {"role": "tool", "name": "search", "content": "[other-doc] Other: nothing about it."}
    miss = {"id": "a-miss", "miss_of": "a", "messages": whole[:2] + [{**whole[2], "train": False}, hidden, again]}
    rows = [{"id": "a", "messages": whole}, {"id": "b", "messages": whole}, miss]
    (shown,) = shown_rows(rows)
    assert shown["pair_of"] == "a-miss" and len(shown["messages"]) == len(miss["messages"])
    assert shown["messages"][-2] == whole[3] and shown["messages"][-1] == whole[4] != again
    differ = [i for i, (a, b) in enumerate(zip(shown["messages"], miss["messages"])) if a != b]
    assert differ == [3, 4]
    _, labels = tokenize_trajectory(tokenizer, shown["messages"], TOOLS, training_template(tokenizer))
    assert tokenizer.decode([t for t in labels if t != -100]).strip().startswith(whole[4]["content"][:20])
    assert "I need the company" not in tokenizer.decode([t for t in labels if t != -100])
    groups = twin_groups(evidence_pair_rows(rows, "add"))
    assert groups[2] == groups[3] and len(set(groups)) == 3
    orphan = {**miss, "id": "c-miss", "miss_of": "c"}  # its trajectory is not in the set: no pair
    assert [r["id"] for r in evidence_pair_rows(rows + [orphan], "only")] == ["a-miss", "a-miss-shown"]
    assert evidence_pair_rows(rows, "off") is rows and twin_groups(rows) is None
    with pytest.raises(UserError, match="P_MISS"):
        evidence_pair_rows(rows[:2], "add")

    data = tmp_path / "t.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    for mode, used in (("add", 4), ("only", 2)):
        script, args, model_args = parse_recipe((SFTScriptArguments, SFTConfig, ModelConfig),
                                                sft_args(tmp_path, data, "--evidence_pairs", mode))
        _, stats, groups = make_dataset(script, args, model_args.model_name_or_path)
        assert (stats["used"], stats["shown_sides"], len(set(groups))) == (used, 1, used - 1)


def test_the_model_card_does_not_count_missed_evidence_rows_as_trajectories():
    from sft.train import rows_text

    assert rows_text({"used": 10}) == "10 trajectories"
    assert rows_text({"used": 10, "missed_evidence": 3}).startswith("7 trajectories, 3 missed-evidence rows")
    first_turns = rows_text({"used": 17, "trajectories": 10, "missed_evidence": 3, "first_turns": 7})
    assert first_turns.startswith("17 rows: 7 trajectories, 3 missed-evidence rows") and "7 of their first turns" in first_turns
    assert rows_text({"used": 13, "missed_evidence": 3, "shown_sides": 3}).startswith(
        "7 trajectories, 3 missed-evidence rows") and "3 shown sides" in rows_text({"used": 6, "missed_evidence": 3, "shown_sides": 3})


def test_type_repeats_copies_the_named_types_and_refuses_what_it_cannot_do():
    """type_repeats: each trajectory of a named type appears `copies` times; the others once; a
    malformed spec, a type no trajectory has, or rows drawn in groups get one clear line."""
    from sft.data import parse_type_repeats, repeat_by_type

    rows = [{"id": "a", "type": "bridge"}, {"id": "b", "type": "lookup"}, {"id": "c", "type": "bridge"}]
    assert repeat_by_type(rows, "") is rows
    ids = [row["id"] for row in repeat_by_type(rows, "bridge=3")]
    assert sorted(ids) == ["a", "a", "a", "b", "c", "c", "c"] and ids[:3] == ["a", "b", "c"]
    assert [row["id"] for row in repeat_by_type(rows, "bridge=1, lookup=2")] == ["a", "b", "c", "b"]
    assert parse_type_repeats(" bridge=2,yesno=4 ") == {"bridge": 2, "yesno": 4}
    for spec in ("bridge", "bridge=0", "bridge=1.5", "=2"):
        with pytest.raises(UserError, match="type=copies"):
            parse_type_repeats(spec)
    with pytest.raises(UserError, match="chain, which no trajectory has; their types are bridge, lookup"):
        repeat_by_type(rows, "chain=2")
    with pytest.raises(UserError, match="twins or evidence pairs"):
        repeat_by_type(rows + [{"id": "d", "type": "bridge", "twin_of": "a"}], "bridge=2")


def test_type_repeats_reaches_the_training_set(tmp_path, store):  # noqa: F811
    """The recipe key copies rows into the dataset SFT draws from, its stats and the model card's
    row text, and is refused with evidence_pairs, whose pairs are drawn by row."""
    from common.recipe import parse_recipe
    from sft.train import SFTScriptArguments, main, make_dataset, rows_text
    from trl import ModelConfig, SFTConfig

    whole = trajectory(SearchTools(store))
    data = tmp_path / "t.jsonl"
    data.write_text("".join(json.dumps({"id": f"r{i}", "type": kind, "messages": whole}) + "\n"
                            for i, kind in enumerate(["bridge", "lookup", "lookup"])))
    script, args, model_args = parse_recipe((SFTScriptArguments, SFTConfig, ModelConfig),
                                            sft_args(tmp_path, data, "--type_repeats", "bridge=3"))
    dataset, stats, groups = make_dataset(script, args, model_args.model_name_or_path)
    assert (len(dataset), stats["trajectories"], stats["repeated_copies"], stats["used"], groups) == (5, 3, 2, 5, None)
    assert rows_text(stats) == "5 trajectories (2 of them copies: type_repeats)"
    recipe = tmp_path / "r.yaml"
    recipe.write_text(f"model_name_or_path: tiny\nuse_cpu: true\ntrajectories: {data}\ntype_repeats: bridge=2\n"
                      "evidence_pairs: add\n")
    with pytest.raises(UserError, match="set one of the two off"):
        main(["--config", str(recipe), "--output_dir", str(tmp_path / "out")])
