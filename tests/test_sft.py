"""SFT: the assistant-only loss mask per chat template, training lowers the loss, resume, reload, bad recipes."""
import json
import re

import pytest

from agent.tools import SearchTools, tool_functions
from common.errors import UserError
from sft.data import tokenize_trajectory, training_template
from tests.devices import DEVICES, trainer_flags
from tests.test_agent import store  # noqa: F401  (fixture)

TOOLS = tool_functions(SearchTools(None))


def trajectory(tools):
    """A real two-call trajectory over the small test datastore."""
    hits = tools.search("Kestrel company founder")
    page = tools.open("kestrel-co")
    return [
        {"role": "system", "content": "Answer with the tools."},
        {"role": "user", "content": "Who founded the company Kestrel?"},
        {"role": "assistant", "content": "I need the company Kestrel.",
         "tool_calls": [{"type": "function", "function": {"name": "search", "arguments": {"query": "Kestrel company founder"}}}]},
        {"role": "tool", "name": "search", "content": hits},
        {"role": "assistant", "content": "The snippet is short; I'll open it.",
         "tool_calls": [{"type": "function", "function": {"name": "open", "arguments": {"doc_id": "kestrel-co", "page": 1}}}]},
        {"role": "tool", "name": "open", "content": page},
        {"role": "assistant", "content": "<answer>Ada Voss</answer>"},
    ]


def template_variant(tokenizer, name):
    """The test tokenizer with a given family's template, prepared as the agent prepares it."""
    from trl import chat_template_utils as ctu

    from agent.chat import prepare_tokenizer

    tokenizer = type(tokenizer).from_pretrained(tokenizer.name_or_path)
    tokenizer.chat_template = {"compact": None, "qwen2_5": ctu.qwen2_5_chat_template, "qwen3": ctu.qwen3_chat_template}[name]
    return prepare_tokenizer(tokenizer)


@pytest.mark.parametrize("template", ["compact", "qwen2_5", "qwen3"])
def test_mask_covers_exactly_the_assistant_spans(tokenizer, store, template):  # noqa: F811
    tok = template_variant(tokenizer, template)
    messages = trajectory(SearchTools(store))
    ids, labels = tokenize_trajectory(tok, messages, TOOLS, training_template(tok))
    text = tok.apply_chat_template(messages, tools=TOOLS, tokenize=False)
    assert tok.decode(ids) == text  # the training template renders what inference renders
    trained = tok.decode([t for t in labels if t != -100])
    # expected: everything the model itself writes after each "<|im_start|>assistant", up to its <|im_end|>
    expected = re.findall(r"<\|im_start\|>assistant(.*?<\|im_end\|>)", text, flags=re.DOTALL)
    assert len(expected) == 3
    for span in expected:
        assert span.strip() in trained
    for forbidden in ("Answer with the tools.", "Who founded the company Kestrel?", "<tool_response>",
                      "shipping company", "# Tools", "<|im_start|>user", "<|im_start|>system"):
        assert forbidden not in trained, forbidden
    trained_chars = sum(len(span.strip()) for span in expected)
    assert len(trained.strip()) <= trained_chars + 3 * 8  # only newlines and the end-of-turn tokens besides


@pytest.mark.parametrize("template", ["compact", "qwen2_5", "qwen3"])
def test_each_turn_trains_on_the_token_ids_the_agent_prefills(tokenizer, store, template):  # noqa: F811
    """Token faithfulness of SFT: before each assistant turn, the training row holds exactly the ids the
    agent prefills at inference (its backend renders the conversation so far and tokenizes the text),
    and that turn's first generated token carries loss, and no token of that prompt does (the
    newline that closes `<|im_start|>assistant` is prefilled, never written). Equal text is not
    enough: BPE could cut it differently."""
    from types import SimpleNamespace

    from agent.backends import TransformersBackend

    tok = template_variant(tokenizer, template)
    messages = trajectory(SearchTools(store))
    ids, labels = tokenize_trajectory(tok, messages, TOOLS, training_template(tok))
    agent = SimpleNamespace(tokenizer=tok)
    turns = [i for i, message in enumerate(messages) if message["role"] == "assistant"]
    for turn in turns:
        prompt = tok(TransformersBackend.render(agent, messages[:turn], TOOLS), add_special_tokens=False)["input_ids"]
        assert ids[:len(prompt)] == prompt, f"turn {turn}: the context differs from what inference prefills"
        assert labels[len(prompt)] != -100, f"turn {turn}: its first generated token carries no loss"
        assert labels[len(prompt) - 1] == -100, f"turn {turn}: the generation prompt's last token carries loss"


@pytest.mark.parametrize("template", ["compact", "qwen2_5", "qwen3"])
def test_an_untrained_assistant_message_is_left_out_of_the_loss(tokenizer, store, template):  # noqa: F811
    tok = template_variant(tokenizer, template)
    messages = trajectory(SearchTools(store))
    _, full = tokenize_trajectory(tok, messages, TOOLS, training_template(tok))
    repeat = {**messages[4], "content": "Let me open it once more.", "train": False}
    refusal = {"role": "tool", "name": "open", "content": "Error: you already called open with these arguments."}
    ids, labels = tokenize_trajectory(tok, messages[:6] + [repeat, refusal] + messages[6:], TOOLS, training_template(tok))
    trained = tok.decode([t for t in labels if t != -100])
    assert "once more" in tok.decode(ids) and "once more" not in trained
    assert trained == tok.decode([t for t in full if t != -100])  # the other turns train exactly as before


def write_trajectories(path, store, n=6):  # noqa: F811
    rows = [{"id": f"t{i}", "messages": trajectory(SearchTools(store))} for i in range(n)]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def sft_args(tmp_path, trajectories, *extra):
    return ["--config", "recipes/tiny/sft.yaml", "--trajectories", str(trajectories),
            "--output_dir", str(tmp_path / "sft"), *extra]


@pytest.mark.parametrize("template", ["compact", "qwen2_5", "qwen3"])
def test_decision_tokens_are_the_first_tokens_after_each_tool_output(tokenizer, store, template):  # noqa: F811
    """The weighted tokens open each assistant turn that follows a tool output, never the first turn."""
    import torch

    from sft.data import content_offset, decision_marker, decision_positions

    tok = template_variant(tokenizer, template)
    messages = trajectory(SearchTools(store))
    ids, labels = tokenize_trajectory(tok, messages, TOOLS, training_template(tok))
    found = decision_positions(torch.tensor([labels, labels]), torch.tensor([ids, ids]), decision_marker(tok, training_template(tok)))
    assert found[0].tolist() == found[1].tolist()
    decided = [tok.decode([ids[i]]) for i in found[0].nonzero().flatten().tolist()]
    after_tools = [m["content"] for prev, m in zip(messages, messages[1:]) if prev["role"] == "tool"]
    assert len(decided) == len(after_tools) == 2
    for token, content in zip(decided, after_tools):
        assert token.strip() and content.startswith(token.strip()), (token, content)
    assert "tool_response" in tok.decode(decision_marker(tok, training_template(tok)).gap)
    if template == "compact":  # its inference variant has no generation markers: nothing located, nothing weighted
        assert content_offset(tok, tok.chat_template) is None


def test_decision_positions_in_a_padded_batch(tokenizer, store):  # noqa: F811
    """Rows of different lengths (right padding), a row whose only turn follows the question, and an
    untrained repeat: the marked labels are exactly the first tokens of the trained post-tool turns."""
    import torch

    from agent.chat import prepare_tokenizer
    from sft.data import decision_marker, decision_positions

    tok = prepare_tokenizer(type(tokenizer).from_pretrained(tokenizer.name_or_path))
    full = trajectory(SearchTools(store))
    refusal = {"role": "tool", "name": "open", "content": "Error: you already called open with these arguments"}
    repeat = full[:6] + [{**full[4], "train": False}, refusal] + full[6:]
    no_tools = full[:2] + [{"role": "assistant", "content": "<answer>Ada Voss</answer>"}]
    one_turn = full[:2] + [{**full[2], "train": False}] + full[3:5]  # a missed-evidence row's shape
    rendered = [tokenize_trajectory(tok, m, TOOLS, training_template(tok)) for m in (full, no_tools, repeat, one_turn)]
    width = max(len(ids) for ids, _ in rendered)
    labels = torch.tensor([row + [-100] * (width - len(row)) for _, row in rendered])
    ids = torch.tensor([row + [tok.pad_token_id] * (width - len(row)) for row, _ in rendered])
    found = decision_positions(labels, ids, decision_marker(tok, training_template(tok)))
    decided = [[tok.decode([labels[r, i].item()]).strip() for i in found[r].nonzero().flatten().tolist()] for r in range(4)]
    # the repeat itself is not a target, nor the question's turn; a row's only trained turn is, after an output
    assert decided == [["The", "<"], [], ["The", "<"], ["The"]]


def test_decision_weight_adds_only_the_decision_tokens_loss(tmp_path, store, tiny):  # noqa: F811
    import torch
    from datasets import Dataset
    from trl import SFTConfig

    from sft.data import decision_marker, decision_positions, tokenize_all
    from sft.train import loss_positions_trainer

    model, tok = tiny
    tok.padding_side = "right"
    data = tokenize_all(tok, [{"messages": trajectory(SearchTools(store))}] * 2, TOOLS, 4096)
    dataset = Dataset.from_dict({"input_ids": data.input_ids, "labels": data.labels})
    args = SFTConfig(output_dir=str(tmp_path / "x"), use_cpu=True, report_to="none", per_device_train_batch_size=2)
    marker = decision_marker(tok, training_template(tok))
    losses = {}
    for weight in (1.0, 3.0):
        trainer = loss_positions_trainer(weight, marker)(model=model, args=args, train_dataset=dataset, processing_class=tok)
        batch = trainer.data_collator([dataset[0], dataset[1]])
        with torch.no_grad():
            losses[weight] = trainer.compute_loss(model, dict(batch))
    labels = batch["labels"][:, 1:]
    with torch.no_grad():
        logits = model(input_ids=batch["input_ids"]).logits[:, :-1]
    per_token = torch.nn.functional.cross_entropy(logits.transpose(1, 2).float(), labels, reduction="none", ignore_index=-100)
    extra = 2.0 * per_token[decision_positions(labels, batch["input_ids"][:, 1:], marker)].sum() / (labels != -100).sum()
    assert extra > 0
    assert torch.allclose(losses[3.0] - losses[1.0], extra, rtol=1e-3), (losses, extra)


@pytest.mark.parametrize("device", DEVICES)
def test_tiny_sft_lowers_loss_resumes_and_reloads(tmp_path, store, tiny, device):  # noqa: F811
    from sft.train import main

    data = write_trajectories(tmp_path / "t.jsonl", store)
    flags = trainer_flags(device)
    main(sft_args(tmp_path, data, *flags, "--max_steps", "3"))
    summary = json.loads((tmp_path / "sft/train_summary.json").read_text())
    assert summary["global_step"] == 3 and summary["resumed_from"] is None
    assert summary["device"].split(":")[0] == device  # where the model trained
    main(sft_args(tmp_path, data, *flags, "--max_steps", "6"))
    summary = json.loads((tmp_path / "sft/train_summary.json").read_text())
    assert summary["global_step"] == 6 and summary["resumed_from"].endswith("checkpoint-3")
    losses = [row["loss"] for row in summary["loss_history"]]
    assert [row["step"] for row in summary["loss_history"]] == [1, 2, 3, 4, 5, 6]  # history survives the resume
    assert losses[-1] < losses[0]
    assert all(row["decision_loss"] > 0 for row in summary["loss_history"])  # the two post-tool turns' first tokens
    assert (tmp_path / "sft/loss.png").stat().st_size > 1000
    final = tmp_path / "sft/final"
    card = (final / "README.md").read_text()
    assert f"trained on: `{data}`" in card and "seen in training: 12" in card  # the path, not the count
    weights = (final / "model.safetensors").stat().st_mtime_ns
    main(sft_args(tmp_path, data, *flags, "--max_steps", "6"))  # same recipe, finished: not trained again
    assert (final / "model.safetensors").stat().st_mtime_ns == weights
    main(sft_args(tmp_path, data, *flags, "--max_steps", "2", "--learning_rate", "1e-4"))  # another recipe: starts over
    summary = json.loads((tmp_path / "sft/train_summary.json").read_text())
    assert summary["global_step"] == 2 and summary["resumed_from"] is None
    assert sorted(p.name for p in (tmp_path / "sft").glob("checkpoint-*")) == ["checkpoint-2"]
    from agent.backends import Sampling, TransformersBackend
    from agent.chat import prepare_tokenizer
    from agent.episode import EpisodeConfig, run_episodes
    from agent.models import load_model

    model, tok = load_model(str(final))
    assert "<tool_call>" in tok.chat_template
    backend = TransformersBackend(model, prepare_tokenizer(tok), Sampling(max_new_tokens=6))
    episode = run_episodes([{"id": "q", "question": "Who founded Kestrel?"}], backend,
                           lambda: SearchTools(store), EpisodeConfig(max_turns=1), progress=False)[0]
    assert episode.done and episode.tokens_generated >= 1


@pytest.mark.parametrize("checkpointing", [[], ["--gradient_checkpointing", "true", "--share_prompt_prefix", "false"]])
def test_frozen_layers_stay_fixed_and_the_rest_trains(tmp_path, store, tiny, checkpointing):  # noqa: F811
    """Also under gradient checkpointing, whose recomputed layers get no gradient when nothing below them needs one."""
    import torch

    from agent.models import load_model
    from sft.train import main

    base, _ = tiny
    data = write_trajectories(tmp_path / "t.jsonl", store)
    main(sft_args(tmp_path, data, "--max_steps", "3", "--freeze_layers", "1", *checkpointing))
    trained, _ = load_model(str(tmp_path / "sft/final"))
    before, after = base.state_dict(), trained.state_dict()
    frozen = [k for k in before if k.startswith(("model.embed_tokens.", "model.layers.0.", "lm_head."))]
    rest = [k for k in before if k.startswith("model.layers.1.") and k.endswith("weight")]
    assert frozen and rest
    assert all(torch.equal(before[k], after[k]) for k in frozen)
    assert all(not torch.equal(before[k], after[k]) for k in rest)
    assert "first 1 decoder layers (kept fixed)" in (tmp_path / "sft/final/README.md").read_text()
    summary = json.loads((tmp_path / "sft/train_summary.json").read_text())
    assert summary["loss_history"][-1]["loss"] < summary["loss_history"][0]["loss"]


@pytest.mark.parametrize("extra, message", [
    (["--freeze_layers", "2"], "freeze_layers must be between 0 and 1"),
    (["--freeze_layers", "1", "--use_peft", "true"], "set freeze_layers: 0 or use_peft: false"),
])
def test_freeze_layers_refuses_what_it_cannot_do(tmp_path, store, extra, message):  # noqa: F811
    from sft.train import main

    data = write_trajectories(tmp_path / "t.jsonl", store)
    with pytest.raises(UserError, match=message):
        main(sft_args(tmp_path, data, "--max_steps", "1", *extra))


@pytest.mark.parametrize("device", DEVICES)
def test_loss_positions_trainer_matches_full_loss(tmp_path, store, tiny, device):  # noqa: F811
    import copy

    import torch
    from trl import SFTConfig, SFTTrainer

    from sft.data import tokenize_all
    from sft.train import loss_positions_trainer

    model, tok = copy.deepcopy(tiny[0]).to(device), tiny[1]
    tok.padding_side = "right"
    rows = [{"messages": trajectory(SearchTools(store))}] * 2
    data = tokenize_all(tok, rows, TOOLS, 4096)
    from datasets import Dataset
    dataset = Dataset.from_dict({"input_ids": data.input_ids, "labels": data.labels})
    args = SFTConfig(output_dir=str(tmp_path / "x"), use_cpu=device == "cpu", report_to="none", per_device_train_batch_size=2)
    plain = SFTTrainer(model=model, args=args, train_dataset=dataset, processing_class=tok)
    fast = loss_positions_trainer()(model=model, args=args, train_dataset=dataset, processing_class=tok)
    batch = {key: value.to(device) for key, value in plain.data_collator([dataset[0], dataset[1]]).items()}
    with torch.no_grad():
        expected = plain.compute_loss(model, dict(batch))
        got = fast.compute_loss(model, dict(batch))
    assert torch.allclose(expected, got, rtol=1e-4), (expected, got)  # same loss up to float rounding


def test_tokens_seen_count_no_padding(tmp_path, store, tiny):  # noqa: F811
    """tokens/s in the summary counts real tokens: two trajectories of different lengths in one batch."""
    from common.recipe import parse_recipe
    from sft.train import SFTScriptArguments, build_trainer, make_dataset
    from trl import ModelConfig, SFTConfig

    long = trajectory(SearchTools(store))
    short = long[:3] + [{"role": "tool", "name": "search", "content": "no hits"}, {"role": "assistant", "content": "<answer>x</answer>"}]
    data = tmp_path / "t.jsonl"
    data.write_text("".join(json.dumps({"id": str(i), "messages": m}) + "\n" for i, m in enumerate([long, short])))
    script, args, model_args = parse_recipe((SFTScriptArguments, SFTConfig, ModelConfig), sft_args(
        tmp_path, data, "--max_steps", "1", "--per_device_train_batch_size", "2", "--gradient_accumulation_steps", "1",
        "--save_strategy", "no"))
    dataset, stats, _ = make_dataset(script, args, model_args.model_name_or_path)
    lengths = sorted(len(ids) for ids in dataset["input_ids"])
    assert lengths[0] < lengths[1]  # the batch is padded
    trainer = build_trainer(script, args, model_args, dataset)
    trainer.train()
    assert trainer.state.num_input_tokens_seen == stats["tokens"] == sum(lengths)


def test_compiled_layers_give_the_same_loss_and_gradients(store, tiny):  # noqa: F811
    """compile_layers (the default recipe's setting) changes speed only: same loss and gradients as
    eager on a fixed batch, same parameter names in what is saved."""
    import copy

    import torch

    from sft.data import tokenize_all
    from sft.train import compile_decoder_layers

    from agent.models import load_model

    _, tok = tiny
    tok.padding_side = "right"
    data = tokenize_all(tok, [{"messages": trajectory(SearchTools(store))}], TOOLS, 4096)
    ids = torch.tensor(data.input_ids)
    labels = torch.tensor(data.labels)
    model = load_model("tiny")[0].train()  # fresh: other tests leave the shared fixture's model in other modes
    eager, compiled = copy.deepcopy(model), copy.deepcopy(model)
    compile_decoder_layers(compiled)
    losses = []
    for m in (eager, compiled):
        loss = m(input_ids=ids, labels=labels).loss
        loss.backward()
        losses.append(loss.detach())
    assert torch.allclose(*losses, rtol=1e-4), losses
    compared = 0
    for (name, a), (name_c, b) in zip(eager.named_parameters(), compiled.named_parameters()):
        assert name == name_c and (a.grad is None) == (b.grad is None), name
        if a.grad is not None:
            assert torch.allclose(a.grad, b.grad, rtol=1e-3, atol=1e-5), name
            compared += 1
    assert compared > 0
    assert list(compiled.state_dict()) == list(eager.state_dict())


def test_common_prefix_stops_at_the_first_difference_or_padding():
    import torch

    from sft.prefix import common_prefix_length

    ids = torch.tensor([[5, 6, 7, 8, 9], [5, 6, 7, 1, 0], [5, 6, 7, 8, 0]])
    assert common_prefix_length(ids) == 3
    assert common_prefix_length(ids[[0, 2]]) == 4
    assert common_prefix_length(ids[[0, 2]], torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]])) == 3  # padding ends it
    assert common_prefix_length(torch.tensor([[1, 2], [2, 2]])) == 0  # a later match does not count


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("compiled", [False, True])
def test_shared_prompt_prefix_gives_the_same_loss_and_gradients(store, tiny, compiled, device):  # noqa: F811
    """share_prompt_prefix runs the rows' common prompt once: the loss and every gradient must be those of
    the plain batch (two trajectories of different lengths, padded), with compiled parts too."""
    import copy

    import torch
    import torch.nn.functional as F

    from agent.models import load_model
    from sft.data import tokenize_all
    from sft.prefix import common_prefix_length, decoder_hidden
    from sft.train import compile_decoder_layers

    _, tok = tiny
    long = trajectory(SearchTools(store))
    short = long[:3] + [{"role": "tool", "name": "search", "content": "no hits"},
                        {"role": "assistant", "content": "<answer>x</answer>"}]
    data = tokenize_all(tok, [{"messages": long}, {"messages": short}], TOOLS, 4096)
    width = max(map(len, data.input_ids))
    ids = torch.tensor([row + [tok.pad_token_id] * (width - len(row)) for row in data.input_ids])
    labels = torch.tensor([row + [-100] * (width - len(row)) for row in data.labels])[:, 1:]
    mask = torch.tensor([[1] * len(row) + [0] * (width - len(row)) for row in data.input_ids])
    shared_length = common_prefix_length(ids, mask)
    assert 20 < shared_length < len(data.input_ids[1])  # the system prompt and question are shared, then they differ
    ids, labels, mask = ids.to(device), labels.to(device), mask.to(device)
    model = load_model("tiny")[0].to(device).train()
    plain, shared = copy.deepcopy(model), copy.deepcopy(model)
    if compiled:
        compile_decoder_layers(shared)
    losses = []
    for m, share in ((plain, False), (shared, True)):
        hidden = decoder_hidden(m.get_decoder(), ids, mask, share)[:, :-1]
        keep = labels != -100
        loss = F.cross_entropy(m.get_output_embeddings()(hidden[keep]).float(), labels[keep])
        loss.backward()
        losses.append(loss.detach())
    assert torch.allclose(*losses, rtol=1e-4), losses
    compared = 0
    for (name, a), (_, b) in zip(plain.named_parameters(), shared.named_parameters()):
        if a.grad is not None:
            assert torch.allclose(a.grad, b.grad, rtol=1e-3, atol=1e-5), name
            compared += 1
    assert compared == len(list(plain.parameters()))


@pytest.mark.parametrize("keys, message", [
    ("loss_positions_only: false\ngradient_checkpointing: false", "share_prompt_prefix need loss_positions_only: true"),
    ("gradient_checkpointing: true", "share_prompt_prefix needs gradient_checkpointing: false"),
])
def test_shared_prompt_prefix_refuses_settings_it_cannot_run_with(tmp_path, keys, message):
    from sft.train import main

    recipe = tmp_path / "r.yaml"
    recipe.write_text(f"model_name_or_path: tiny\nuse_cpu: true\nshare_prompt_prefix: true\n{keys}\n"
                      f"trajectories: {tmp_path / 'none.jsonl'}\n")
    (tmp_path / "none.jsonl").write_text(json.dumps({"id": "x", "messages": [
        {"role": "user", "content": "q"}, {"role": "assistant", "content": "<answer>a</answer>"}]}) + "\n")
    with pytest.raises(UserError, match=message):
        main(["--config", str(recipe), "--output_dir", str(tmp_path / "out")])


def test_compile_layers_refuses_a_model_without_layers():
    import torch

    from sft.train import compile_decoder_layers

    class Flat(torch.nn.Module):
        def get_decoder(self):
            return self

    with pytest.raises(UserError, match="set compile_layers: false"):
        compile_decoder_layers(Flat())


@pytest.mark.parametrize("line, message", [
    ("learning_rat: 0.1", "unknown key(s) learning_rat"),
    ("learning_rate: fast", "key learning_rate must be float/int"),
    ("loss_positions_only: 3", "key loss_positions_only must be bool"),
    ("per_device_train_batch_size: 2.5", "key per_device_train_batch_size must be int"),
    ("use_cpu: true\ndecision_loss_weight: 0", "decision_loss_weight must be > 0"),
])
def test_bad_recipe_names_the_key(tmp_path, line, message):
    from sft.train import main

    recipe = tmp_path / "bad.yaml"
    recipe.write_text("model_name_or_path: tiny\n" + line + "\n")
    with pytest.raises(UserError, match=re.escape(message)):
        main(["--config", str(recipe)])


def test_missing_or_empty_trajectories(tmp_path):
    from sft.data import read_trajectories

    with pytest.raises(UserError, match="no trajectories"):
        read_trajectories(str(tmp_path / "none.jsonl"))
    (tmp_path / "e.jsonl").write_text("")
    with pytest.raises(UserError, match="holds no trajectories"):
        read_trajectories(str(tmp_path / "e.jsonl"))
    (tmp_path / "m.jsonl").write_text('{"id": "x", "question": "no messages"}\n')
    with pytest.raises(UserError, match="needs a \"messages\" list"):
        read_trajectories(str(tmp_path / "m.jsonl"))


def test_bench_averages_only_measured_steady_state_rates():
    from sft.bench import _mean_known

    assert _mean_known([None, 10.0, 20.0]) == 15.0  # a one-step run has no rate after its first step
    assert _mean_known([None, None]) is None


def test_micro_batch_bench_keeps_the_recipes_rows_a_step(tmp_path):
    """--micro-batches compares ways of cutting the same step, the recipe's own way first (the baseline)."""
    from sft.bench import micro_batches

    recipe = tmp_path / "sft.yaml"
    recipe.write_text("per_device_train_batch_size: 4\ngradient_accumulation_steps: 2\n")
    setups = micro_batches(str(recipe))
    assert [(o["per_device_train_batch_size"], o["gradient_accumulation_steps"]) for o in setups.values()] == \
        [(4, 2), (2, 4), (8, 1)]
    assert next(iter(setups)) == "recipe setup, micro-batches of 4 x 2"
    recipe.write_text("per_device_train_batch_size: 3\n")  # TRL's accumulation default of 1: 3 rows a step
    assert [o["per_device_train_batch_size"] for o in micro_batches(str(recipe)).values()] == [3]


@pytest.mark.parametrize("template,tail", [("compact", 1), ("qwen2_5", 1), ("qwen3", 0)])
def test_generation_prompt_tail_per_template(tokenizer, template, tail):
    from sft.data import generation_prompt_tail

    tok = template_variant(tokenizer, template)
    assert generation_prompt_tail(tok, training_template(tok)) == tail


def test_a_template_whose_generation_prompt_is_not_its_context_is_refused(tokenizer):
    """Inference would prefill `<think>` that training never shows: SFT must not quietly train on other tokens."""
    from sft.data import generation_prompt_tail

    template = ("{% for m in messages %}<|im_start|>{{ m.role }}\n{% if m.role == 'assistant' %}{% generation %}"
                "{{ m.content }}<|im_end|>{% endgeneration %}{% else %}{{ m.content }}<|im_end|>{% endif %}\n"
                "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n<think>{% endif %}")
    with pytest.raises(UserError, match="differently from the generation prompt"):
        generation_prompt_tail(tokenizer, template)


def test_profile_groups_operators_by_what_they_do():
    from sft.profile import group_of, grouped_shares

    assert group_of("aten::_scaled_dot_product_flash_attention_for_cpu_backward") == "attention"
    assert group_of("aten::mm") == group_of("aten::addmm") == "matmul"
    assert group_of("aten::_fused_adamw_") == "optimizer"
    assert group_of("aten::topk") == group_of("aten::transpose") == "other"  # not copies, though they start like aten::to
    shares = grouped_shares([("aten::mm", 3.0), ("aten::_scaled_dot_product_flash_attention_for_cpu", 1.0)])
    assert shares == {"matmul": 0.75, "attention": 0.25}


@pytest.mark.parametrize("queries", [5, 9])
def test_padded_causal_attention_equals_the_shared_prompts_masked_attention(queries):
    """The rewrite that sft.profile --attention times is the same attention, values and gradients."""
    import torch

    from sft.profile import masked_attention, padded_causal_attention

    torch.manual_seed(0)
    q, k, v = (torch.randn(2, heads, length, 8, dtype=torch.float64, requires_grad=True)
               for heads, length in ((6, queries), (2, 9), (2, 9)))
    first = masked_attention(q, k, v)
    grads = torch.autograd.grad(first.square().sum(), (q, k, v))
    second = padded_causal_attention(q, k, v)
    assert torch.allclose(first, second)
    assert all(torch.allclose(a, b) for a, b in zip(grads, torch.autograd.grad(second.square().sum(), (q, k, v))))
    # a top-left causal square without the padding would differ: the alignment is the point
    unaligned = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    assert queries == 9 or not torch.allclose(first, unaligned)


def test_profile_of_a_few_tiny_steps_accounts_for_their_time(tmp_path, store, tiny):  # noqa: F811
    from sft.profile import grouped_shares, profile_steps

    data = tmp_path / "t.jsonl"
    data.write_text("".join(json.dumps({"id": str(i), "messages": trajectory(SearchTools(store))}) + "\n" for i in range(6)))
    result = profile_steps("recipes/tiny/sft.yaml", steps=3, skip=1,
                           overrides=("--trajectories", str(data), "--output_dir", str(tmp_path / "sft")))
    assert result["steps"] == 2 and result["tokens"] > 0 and result["seconds"] > 0
    shares = grouped_shares(result["operators"])
    assert abs(sum(shares.values()) - 1) < 1e-9
    assert shares["attention"] > 0 and shares["matmul"] > 0


@pytest.mark.parametrize("flags", [["--prefix", "740"], ["--heads", "8", "--kv-heads", "3"], ["--steps", "2", "--skip", "2"]])
def test_profile_refuses_shapes_and_windows_it_cannot_measure(flags, capsys):
    from sft.profile import main

    with pytest.raises(SystemExit) as exit_info:
        main((["--attention"] if "--skip" not in flags else []) + flags)
    assert exit_info.value.code == 2 and "--" in capsys.readouterr().err
