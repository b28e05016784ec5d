"""RL: the environment, token faithfulness through TRL's tool loop, a tiny GRPO run with resume, bad recipes."""
import contextlib
import copy
import json
import re
import shutil
from types import SimpleNamespace

import pytest

from agent.chat import prepare_tokenizer, render_tool_call
from agent.prompt import first_messages
from agent.tools import SearchTools, tool_functions
from common.errors import UserError
from rl.environment import SearchEnvironment
from tests.devices import DEVICES, trainer_flags, trainer_settings
from tests.steer import writes_tag
from tests.test_agent import store  # noqa: F401  (fixture)

QUESTIONS = [
    {"id": "q0", "question": "Who founded the company Kestrel?", "answers": ["Ada Voss"], "gold_doc_ids": ["kestrel-co"]},
    {"id": "q1", "question": "Where was Ada Voss born?", "answers": ["Kestrel"], "gold_doc_ids": ["ada"]},
    {"id": "q2", "question": "What is the capital of Norvania?", "answers": ["Kestrel"], "gold_doc_ids": ["norvania"]},
    {"id": "q3", "question": "What did Bram Ollen paint?", "answers": ["harbours"], "gold_doc_ids": ["bram"]},
]


def env_tools(env):
    return [env.search, env.open, env.find]


# ---- the environment ---------------------------------------------------------------------------
def test_environment_tools_match_the_agent_and_never_raise(store, tokenizer):  # noqa: F811
    env = SearchEnvironment(store, max_tool_calls=5)
    messages = first_messages("Who founded Kestrel?", 4)
    # the model sees the same tool schema in RL as in SFT and evaluation
    assert (tokenizer.apply_chat_template(messages, tools=env_tools(env), tokenize=False, add_generation_prompt=True)
            == tokenizer.apply_chat_template(messages, tools=tool_functions(SearchTools(store)), tokenize=False,
                                             add_generation_prompt=True))
    assert env.reset(**QUESTIONS[0], prompt=messages) is None  # nothing appended to the prompt
    assert env.answers == ["Ada Voss"] and env.gold_doc_ids == ["kestrel-co"]
    assert "[kestrel-co]" in env.search("Kestrel shipping company")
    assert env.open("kestrel-co").startswith("[kestrel-co]")
    bad = [env.open("no-such-doc"), env.search(""), env.open("ada", page=999)]
    assert all(text.startswith("Error:") for text in bad), bad
    assert env.log.n_calls == 5 and env.log.n_valid == 2
    assert env.search("Ada").startswith("Error: the budget of 5 tool calls is used up") and env.budget_refusals == 1
    assert "kestrel-co" in env.documents_seen
    env.reset(**QUESTIONS[1])  # a new rollout starts clean
    assert env.log.n_calls == 0 and env.budget_refusals == 0 and env.answers == ["Kestrel"]
    # wrong types from a confused model come back as errors too
    assert env.search(None).startswith("Error:") and env.find("ada", 7).startswith("Error:")


# ---- token faithfulness through TRL's multi-turn tool loop ------------------------------------
def template_tokenizer(tokenizer, template):
    from trl import chat_template_utils as ctu

    from rl.trainer import add_response_parser

    tok = type(tokenizer).from_pretrained(tokenizer.name_or_path)  # tool-less ChatML: gets the compact template
    if template == "qwen2_5":
        tok.chat_template = ctu.qwen2_5_chat_template
    if template == "qwen3":
        tok.chat_template = ctu.qwen3_chat_template  # prepare_tokenizer swaps in TRL's training variant
    return add_response_parser(prepare_tokenizer(tok))


class ScriptedPolicy:
    """Stands in for sampling (GRPOTrainer._generate_single_turn): fixed token ids per turn, some of them a
    deliberately non-canonical tokenization, so any decode/re-encode on the way to the loss would show."""

    def __init__(self, tok, think: bool):
        self.tok, self.think = tok, think
        self.im_start = tok.convert_tokens_to_ids("<|im_start|>")
        self.sampled = {0: [], 1: []}  # rollout -> ids it sampled, turn after turn

    def canonical(self, text):
        return self.tok(text, add_special_tokens=False).input_ids

    def by_char(self, text):
        ids = [i for ch in text for i in self.canonical(ch)]
        assert ids != self.canonical(text)
        return ids

    def turn(self, rollout, turn):
        think = self.canonical("<think>\n\n</think>\n\n") if self.think else []
        end = [self.tok.convert_tokens_to_ids("<|im_end|>")]
        if rollout == 1:
            return think + self.canonical("<answer>Kestrel</answer>") + end
        search = render_tool_call({"function": {"name": "search", "arguments": {"query": "Kestrel shipping company"}}})
        browse = render_tool_call({"function": {"name": "browse", "arguments": {"url": "x"}}})  # not a tool
        return [think + self.by_char("I need the company.") + self.canonical("\n" + search) + end,
                think + self.canonical(browse) + end,
                think + self.by_char("<answer>Ada Voss</answer>") + end][turn]

    def __call__(self, prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False):
        out = []
        for row, ids in enumerate(prompt_ids):
            turn = (ids.count(self.im_start) - 3) // 2  # system, user, then (tool reply, assistant) per turn
            rollout = row if turn == 0 else 0
            out.append(self.turn(rollout, turn))
            self.sampled[rollout] += out[-1]
        return out, None


def scripted_grpo_args(tmp_path, device):
    """One GRPO step of two scripted rollouts (ScriptedPolicy) on `device`."""
    from trl import GRPOConfig

    return GRPOConfig(output_dir=str(tmp_path / "out"), max_steps=1, num_generations=2, per_device_train_batch_size=2,
                      max_completion_length=1024, max_tool_calling_iterations=3, gradient_checkpointing=False,
                      report_to="none", save_strategy="no", logging_steps=1, beta=0.0, **trainer_settings(device))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("template", ["compact", "qwen2_5", "qwen3"])
def test_trained_tokens_are_the_sampled_tokens(tmp_path, store, tiny, template, device):  # noqa: F811
    from datasets import Dataset

    from rl.rewards import build_rewards
    from rl.trainer import AgentGRPOTrainer

    tok = template_tokenizer(tiny[1], template)
    seen, trained = {}, []

    def spy(completions, completion_ids, tool_mask, environments, **kwargs):
        seen.update(completions=completions, completion_ids=completion_ids, tool_mask=tool_mask,
                    docs=[env.documents_seen for env in environments], calls=[env.log.n_calls for env in environments])
        return [0.0] * len(completions)

    args = scripted_grpo_args(tmp_path, device)
    messages = first_messages(QUESTIONS[0]["question"], 3)
    dataset = Dataset.from_list([{"id": "q0", "prompt": messages, "answers": ["Ada Voss"], "gold_doc_ids": ["kestrel-co"]}])
    trainer = AgentGRPOTrainer(model=copy.deepcopy(tiny[0]), reward_funcs=[*build_rewards(["em"]), spy], args=args,
                               train_dataset=dataset, processing_class=tok,
                               environment_factory=lambda: SearchEnvironment(store, max_tool_calls=3))
    policy = ScriptedPolicy(tok, think=template == "qwen3")
    trainer._generate_single_turn = policy
    compute_loss = trainer._compute_loss
    trainer._compute_loss = lambda model, inputs: trained.append(inputs) or compute_loss(model, inputs)
    trainer.train()

    # what the loss saw: completion ids with completion_mask (padding) and tool_mask (tool output)
    (inputs,) = trained
    rows = []
    for ids, cmask, tmask, pids, pmask in zip(inputs["completion_ids"].tolist(), inputs["completion_mask"].tolist(),
                                              inputs["tool_mask"].tolist(), inputs["prompt_ids"].tolist(),
                                              inputs["prompt_mask"].tolist()):
        n = sum(cmask)
        rows.append({"ids": ids[:n], "mask": tmask[:n], "prompt": [i for i, m in zip(pids, pmask) if m]})
    rows.sort(key=lambda row: -len(row["ids"]))
    tool_row, direct_row = rows
    for row, rollout in ((tool_row, 0), (direct_row, 1)):
        policy_ids = [i for i, m in zip(row["ids"], row["mask"]) if m]
        assert policy_ids == policy.sampled[rollout]  # exactly the sampled ids, non-canonical splits kept
    assert direct_row["mask"] == [1] * len(direct_row["ids"])
    # the tool-output spans are the template's rendering of the tool replies, tokenized canonically
    spans, current = [], []
    for i, m in zip(tool_row["ids"], tool_row["mask"]):
        if not m:
            current.append(i)
        elif current:
            spans, current = spans + [current], []
    assert len(spans) == 2
    for span in spans:
        text = tok.decode(span)
        assert "<tool_response>" in text and text.endswith("<|im_start|>assistant\n")
        assert tok(text, add_special_tokens=False).input_ids == span
    assert "[kestrel-co]" in tok.decode(spans[0]) and "browse" in tok.decode(spans[1])
    # the prompt is the agent's prompt (same tools, same order), and the whole sequence is what the chat
    # template renders for this conversation
    agent_prompt = tok.apply_chat_template(messages, tools=tool_functions(SearchTools(store)), tokenize=True,
                                           add_generation_prompt=True, return_dict=False)
    assert tool_row["prompt"] == direct_row["prompt"] == agent_prompt
    conversation = messages + seen["completions"][[len(c) for c in seen["completions"]].index(5)]
    rendered = tok.apply_chat_template(conversation, tools=env_tools(SearchEnvironment(store)), tokenize=False)
    assert rendered.rstrip("\n") == tok.decode(tool_row["prompt"] + tool_row["ids"])
    # rewards saw the same mask, and the environment saw the calls that reached it
    assert sorted(sum(m) for m in seen["tool_mask"]) == sorted(len(s) for s in policy.sampled.values())
    assert sorted(seen["calls"]) == [0, 1] and any("kestrel-co" in docs for docs in seen["docs"])
    assert trainer.state.log_history[0]["rewards/em/mean"] == 0.5  # one rollout answered Ada Voss
    assert trainer.state.log_history[0]["episode/invalid_call_rate"] == 0.5  # browse is not a tool
    # by tool, per episode: one browse call over two rollouts; none of the agent's tools failed
    assert trainer.state.log_history[0]["episode/invalid/other"] == 0.5
    assert all(trainer.state.log_history[0][f"episode/invalid/{name}"] == 0.0 for name in ("search", "open", "find"))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("rewards", [["constant"], ["em"]])
def test_zero_advantage_micro_batches_skip_backward_with_the_same_update(tmp_path, store, tiny, rewards, device):  # noqa: F811
    """All rollouts scored alike: no backward, zero gradients as TRL's own loss gives, weights unchanged, entropy
    still logged. Rollouts scored differently (em: one of two right): the usual backward and an update."""
    import torch
    from datasets import Dataset
    from trl import GRPOTrainer

    from rl.rewards import build_rewards
    from rl.trainer import AgentGRPOTrainer

    tok = template_tokenizer(tiny[1], "compact")
    reward_funcs = build_rewards(["em"]) if rewards == ["em"] else [lambda completions, **kw: [0.0] * len(completions)]
    args = scripted_grpo_args(tmp_path, device)
    dataset = Dataset.from_list([{"id": "q0", "prompt": first_messages(QUESTIONS[0]["question"], 3), "answers": ["Ada Voss"],
                                  "gold_doc_ids": ["kestrel-co"]}])
    trainer = AgentGRPOTrainer(model=copy.deepcopy(tiny[0]), reward_funcs=reward_funcs, args=args, train_dataset=dataset,
                               processing_class=tok, environment_factory=lambda: SearchEnvironment(store, max_tool_calls=3))
    trainer._generate_single_turn = ScriptedPolicy(tok, think=False)
    seen = []
    compute_loss = trainer.compute_loss
    trainer.compute_loss = lambda model, inputs, *a, **k: seen.append(inputs) or compute_loss(model, inputs, *a, **k)
    before = {name: p.detach().clone() for name, p in trainer.model.named_parameters()}
    trainer.train()

    row = trainer.state.log_history[0]
    changed = any(not torch.equal(before[name], p) for name, p in trainer.model.named_parameters())
    assert "entropy" in row
    if rewards == ["em"]:
        assert row["backward_skipped"] == 0.0 and changed
        return
    assert row["backward_skipped"] == 1.0 and not changed
    model = trainer.model
    model.zero_grad()
    GRPOTrainer.compute_loss(trainer, model, seen[0]).backward()  # TRL's own loss on the same micro-batch
    assert all(p.grad is None or not p.grad.any() for p in model.parameters())


def test_rollouts_after_a_tool_output_follow_the_calibrated_stop(tmp_path, store, tiny):  # noqa: F811
    """rollout_stop: TRL's own generation of a turn after a tool output opens with `<answer>` at
    P >= threshold and never below it (but on the loop's last turn); the first turn is the model's."""
    from datasets import Dataset
    from trl import GRPOConfig

    from rl.health import health_panels
    from rl.rewards import build_rewards
    from rl.trainer import AgentGRPOTrainer

    tok = template_tokenizer(tiny[1], "compact")
    question = first_messages(QUESTIONS[0]["question"], 3)
    call = {"function": {"name": "search", "arguments": {"query": "Kestrel"}}}
    after_tool = question + [{"role": "assistant", "content": "", "tool_calls": [call]},
                             {"role": "tool", "name": "search", "content": SearchEnvironment(store).search("Kestrel")}]
    tools = env_tools(SearchEnvironment(store))
    prompts = [tok.apply_chat_template(m, tools=tools, add_generation_prompt=True, tokenize=True, return_dict=False)
               for m in (after_tool, question)]
    tag = tok("<answer>", add_special_tokens=False).input_ids
    args = GRPOConfig(output_dir=str(tmp_path), num_generations=2, per_device_train_batch_size=2, max_completion_length=6,
                      max_tool_calling_iterations=3, temperature=0.05, report_to="none", **trainer_settings("cpu"))
    dataset = Dataset.from_list([{"id": "q0", "prompt": question, "answers": ["Ada Voss"]}])

    def opens_with_tag(threshold, turn, steer=True):
        trainer = AgentGRPOTrainer(model=copy.deepcopy(tiny[0]), reward_funcs=build_rewards(["em"]), args=args,
                                   train_dataset=dataset, processing_class=tok, rollout_stop=threshold,
                                   environment_factory=lambda: SearchEnvironment(store, max_tool_calls=3))
        trainer._tool_turn = turn
        with writes_tag(trainer.model, tag) if steer else contextlib.nullcontext():  # steered: greedy opens every
            completions, _ = trainer._generate_single_turn(prompts[:1] if turn else prompts[1:], None, {}, 1)  # turn with it
        assert "generate" not in vars(trainer.model)  # TRL's generate is back for the next turn
        return completions[0][:len(tag)] == tag, trainer

    assert not opens_with_tag(None, 1, steer=False)[0]  # the tiny model itself does not write the tag
    forced, trainer = opens_with_tag(1e-30, 1, steer=False)  # the random tiny model gives the tag P < 1e-9
    assert forced and +trainer._stop_counts == {"turns": 1, "forced": 1}
    trainer._log_episode_metrics([], [])  # the step's shares go to the health log, and the counts start over
    assert trainer._pending_metrics["episode/stop_forced"] == [1.0] and not +trainer._stop_counts
    held, trainer = opens_with_tag(1.0, 1)
    assert not held and +trainer._stop_counts == {"turns": 1, "held": 1}
    assert opens_with_tag(1.0, 3)[0]  # the loop's last turn: only an answer can still score
    first, trainer = opens_with_tag(1.0, 0)
    assert first and not +trainer._stop_counts  # the first turn, after the question: the stop does not apply
    assert dict(health_panels([{"step": 1, "episode/stop_forced": 1.0, "episode/stop_held": 0.0}])) == {
        "rollout stop: turns after a tool output forced / held": ["episode/stop_forced", "episode/stop_held"]}
    for generation in ("use_vllm", "use_transformers_continuous_batching"):  # paths that do not call generate
        with pytest.raises(ValueError, match="rollout_stop_fit needs transformers' generate"):
            AgentGRPOTrainer(model=tiny[0], reward_funcs=build_rewards(["em"]), train_dataset=dataset,
                             processing_class=tok, rollout_stop=0.5, environment_factory=lambda: SearchEnvironment(store),
                             args=GRPOConfig(output_dir=str(tmp_path), **{generation: True}, **trainer_settings("cpu")))


def test_the_rollout_stop_holds_every_turn_of_trls_tool_loop_but_its_last(tmp_path, store, tiny, monkeypatch):  # noqa: F811
    """Through TRL's own tool loop (3 rounds): the first turn is free, the next two are held from
    answering, and the last, after which no tool runs, is not (only an answer can still score)."""
    from datasets import Dataset
    from trl import GRPOTrainer

    from rl.rewards import build_rewards
    from rl.trainer import AgentGRPOTrainer

    tok = template_tokenizer(tiny[1], "compact")
    call = tok(render_tool_call({"function": {"name": "search", "arguments": {"query": "Kestrel"}}}),
               add_special_tokens=False).input_ids + [tok.convert_tokens_to_ids("<|im_end|>")]
    held_rows = []

    def always_search(self, prompt_ids, *args, **kwargs):  # TRL's sampling, replaced: every turn calls a tool
        processors = getattr(vars(self.model).get("generate"), "keywords", {}).get("logits_processor") or []
        held_rows.append([sorted(p.holds) for p in processors if hasattr(p, "holds")])
        return [list(call) for _ in prompt_ids], None

    monkeypatch.setattr(GRPOTrainer, "_generate_single_turn", always_search)
    dataset = Dataset.from_list([{"id": "q0", "prompt": first_messages(QUESTIONS[0]["question"], 8), "answers": ["Ada Voss"]}])
    trainer = AgentGRPOTrainer(model=copy.deepcopy(tiny[0]), reward_funcs=build_rewards(["em"]), processing_class=tok,
                               args=scripted_grpo_args(tmp_path, "cpu"), train_dataset=dataset, rollout_stop=1.0,
                               environment_factory=lambda: SearchEnvironment(store, max_tool_calls=8))
    trainer.train()
    assert held_rows == [[], [[0, 1]], [[0, 1]], [[]]]  # both rollouts, turn by turn


# ---- the training stage ------------------------------------------------------------------------
def write_questions(path):
    path.write_text("".join(json.dumps(q) + "\n" for q in QUESTIONS))
    return path


def rl_args(tmp_path, *extra):
    return ["--config", "recipes/tiny/rl.yaml", "--questions", str(write_questions(tmp_path / "q.jsonl")),
            "--datastore", "agent", "--output_dir", str(tmp_path / "rl"), *extra]


@pytest.mark.parametrize("device", DEVICES)
def test_tiny_grpo_logs_health_resumes_and_saves(tmp_path, store, tiny, capsys, device):  # noqa: F811
    from agent.models import load_model
    from rl.health import health_panels
    from rl.train import main
    from rl.trainer import INVALID_KINDS

    (tmp_path / "rl").mkdir()
    (tmp_path / "rl/health.jsonl").write_text('{"step": 12, "reward": 0.5}\n')  # left by another run
    flags = trainer_flags(device)
    main(rl_args(tmp_path, *flags, "--max_steps", "1"))
    summary = json.loads((tmp_path / "rl/train_summary.json").read_text())
    assert summary["global_step"] == 1 and summary["resumed_from"] is None
    assert summary["device"].split(":")[0] == device  # where the policy trained
    main(rl_args(tmp_path, *flags, "--max_steps", "2"))
    summary = json.loads((tmp_path / "rl/train_summary.json").read_text())
    assert summary["global_step"] == 2 and summary["resumed_from"].endswith("checkpoint-1")
    history = summary["log_history"]
    assert [row["step"] for row in history] == [1, 2]  # the step count continues across the resume
    for key in ("reward", "reward_std", "frac_reward_zero_std", "entropy", "rewards/em/mean", "rewards/kimi/mean",
                "episode/answer_rate", "episode/tool_calls", "episode/policy_tokens", "episode/right_unseen",
                "episode/gold_docs", "tools/call_frequency", "episode/invalid/find", "episode/invalid/unparsed"):
        assert all(key in row for row in history), key
    assert all(row["episode/gold_docs"] == 1.0 for row in history)  # each test question names one gold document
    health = [json.loads(line) for line in (tmp_path / "rl/health.jsonl").read_text().splitlines()]
    assert [row["step"] for row in health] == [1, 2]  # one row per step of this run, none replayed
    by_tool = dict(health_panels(health))["invalid calls / episode, by tool"]  # one panel, a line per kind
    assert by_tool == sorted(f"episode/invalid/{kind}" for kind in INVALID_KINDS)
    assert (tmp_path / "rl/health.png").stat().st_size > 5000
    final = tmp_path / "rl/final"
    card = (final / "README.md").read_text()
    assert "GRPOTrainer" in card and "em, kimi" in card
    model, tok = load_model(str(final))
    assert "<tool_call>" in tok.chat_template and model.config.num_hidden_layers == 2
    capsys.readouterr()
    main(rl_args(tmp_path, *flags, "--max_steps", "2"))  # finished with this recipe: a rerun does nothing
    assert "already trained with this recipe (2 steps); nothing to do" in capsys.readouterr().out


def test_a_resumed_run_is_the_straight_run_bit_for_bit(tmp_path, store, tiny, monkeypatch):  # noqa: F811
    """A run resumed after a kill, or resumed to more steps under the RL recipe's constant learning rate, ends with
    the weights of one that never stopped: optimizer, RNG and the data's position all come back (stop 60 resumed
    stop 55-57's runs from step 12 to 16, and seed 0 matched its straight 16-step run bit for bit). The random model
    never answers right, so a test reward scores each group's rollouts 0 and 1: every step updates."""
    from agent.models import checkpoint_digest
    from rl.rewards import REWARDS
    from rl.train import main

    def spread(completions, **kwargs):
        return [float(i % 2) for i in range(len(completions))]

    monkeypatch.setitem(REWARDS, "spread", spread)
    learning = ["--reward_funcs", "spread", "--reward_weights", "1.0", "--lr_scheduler_type", "constant"]
    straight = rl_args(tmp_path, *learning, "--max_steps", "2", "--output_dir", str(tmp_path / "straight"))
    main(straight)
    digest = checkpoint_digest(str(tmp_path / "straight/final"))
    main(rl_args(tmp_path, *learning, "--max_steps", "1"))
    main(rl_args(tmp_path, *learning, "--max_steps", "2"))  # the longer run resumes the shorter one
    assert checkpoint_digest(str(tmp_path / "rl/final")) == digest
    assert len({checkpoint_digest("tiny"), checkpoint_digest(str(tmp_path / "rl/checkpoint-1")), digest}) == 3
    for path in ("final", "checkpoint-2", "train_summary.json"):  # killed before step 2 was saved
        target = tmp_path / "straight" / path
        shutil.rmtree(target) if target.is_dir() else target.unlink()
    main(straight)
    summary = json.loads((tmp_path / "straight/train_summary.json").read_text())
    assert summary["resumed_from"].endswith("checkpoint-1")
    assert checkpoint_digest(str(tmp_path / "straight/final")) == digest


def test_a_longer_run_resumed_under_a_decaying_learning_rate_says_it_is_not_the_straight_run(tmp_path):
    from common.io import resume_message

    (tmp_path / "checkpoint-1").mkdir()
    (tmp_path / "checkpoint-1/trainer_state.json").write_text(json.dumps({"max_steps": 1, "global_step": 1}))
    checkpoint = str(tmp_path / "checkpoint-1")
    plain = f"resuming from {checkpoint}"
    # RL's constant rate, a kill (the same max_steps), a run sized by epochs: nothing to say
    for schedule, steps in (("constant", 2), ("linear", 1), ("linear", -1)):
        assert resume_message(checkpoint, SimpleNamespace(lr_scheduler_type=schedule, max_steps=steps)) == plain
    message = resume_message(checkpoint, SimpleNamespace(lr_scheduler_type="linear", max_steps=2))
    assert message.endswith("saved by a 1-step run: its steps so far followed that run's linear learning rate, so this "
                            "is not what a straight run with max_steps 2 would train")


def test_health_monitor_warns_on_collapse(capsys):
    from rl.health import HealthMonitor

    monitor = HealthMonitor(min_answer_rate=0.2, window=2, zero_std_steps=3)
    rows = [{"step": 1, "episode/answer_rate": 0.8, "entropy": 2.0, "frac_reward_zero_std": 1.0},
            {"step": 2, "episode/answer_rate": 0.5, "entropy": 1.5, "frac_reward_zero_std": 1.0},
            {"step": 3, "episode/answer_rate": 0.1, "entropy": 0.3, "frac_reward_zero_std": 1.0},
            {"step": 4, "episode/answer_rate": 0.0, "entropy": 0.2, "frac_reward_zero_std": 0.5},
            {"step": 5, "episode/answer_rate": 0.0, "entropy": 0.1, "frac_reward_zero_std": 0.5}]
    messages = [m for row in rows for m in monitor.add(row)]
    assert len(messages) == 3  # each problem once
    assert messages[0].startswith("health warning (step 3): every group had zero reward variance")
    assert "answer rate collapsed" in messages[1] and "(step 4)" in messages[1]
    assert "entropy collapsed" in messages[2]
    quiet = HealthMonitor()
    assert not [m for row in ({"step": s, "episode/answer_rate": 0.9, "entropy": 2.0} for s in range(9)) for m in quiet.add(row)]
    # tool calls per episode (stop 31's lr 1e-4 run): warned once they stay at one call, not on a dip
    calls = HealthMonitor(window=3)
    per_step = [3.62, 2.62, 1.25, 1.38, 1.0, 1.12, 0.88, 1.0, 1.0, 1.0]
    warned = [m for s, c in enumerate(per_step, 1) for m in calls.add({"step": s, "episode/tool_calls": c})]
    assert len(warned) == 1 and warned[0].startswith("health warning (step 9): tool calls collapsed: 3.62")
    steady = HealthMonitor(window=3)  # calls like stop 28's 36-step run, with two one-call dips added: no warning
    assert not [m for s, c in enumerate([2.38, 4.25, 3.75, 2.75, 1.62, 1.62, 2.38, 1.0, 1.0, 1.75, 1.38, 1.88], 1)
                for m in steady.add({"step": s, "episode/tool_calls": c})]


@pytest.mark.parametrize("extra, message", [
    (["--reward_funcs", "em", "lenght"], "unknown reward(s) lenght in reward_funcs; the registry has: em, f1"),
    (["--reward_weights", "1.0"], "reward_weights has 1 value(s) but reward_funcs has 2 (em, kimi)"),
    (["--model_name_or_path", "runs/nowhere/sft/final"], "the starting checkpoint runs/nowhere/sft/final does not exist; train it with `make sft`"),
    (["--datastore", "missing"], "no complete datastore at"),
    (["--questions", "runs/none.jsonl"], "question file runs/none.jsonl does not exist"),
    (["--length_penalty_scope", "wrong"], "length_penalty_scope must be one of correct, all"),
    (["--pass_rate_file", "nope.jsonl"], "pass_rate_file nope.jsonl does not exist"),
    (["--rollout_stop_fit", "runs/nowhere/sft/stop_fit.json", "--use_vllm", "true"],
     "rollout_stop_fit needs transformers' generate: set use_vllm"),
    (["--rollout_stop_fit", "runs/nowhere/sft/stop_fit.json"],
     "rollout_stop_fit: no stop fit at runs/nowhere/sft/stop_fit.json (python -m eval.stop_decisions --model "
     "runs/nowhere/sft/final"),
])
def test_bad_input_fails_at_start_naming_the_fix(tmp_path, runs, extra, message):
    from rl.train import main

    args = ["--config", "recipes/tiny/rl.yaml", "--questions", str(write_questions(tmp_path / "q.jsonl")),
            "--output_dir", str(tmp_path / "rl"), *extra]
    with pytest.raises(UserError, match=re.escape(message)):
        main(args)
    assert not (tmp_path / "rl").exists()


def test_bad_recipe_keys_are_named(tmp_path):
    from rl.train import main

    for line, message in (("reward_func: [em]", "unknown key(s) reward_func"), ("reward_weights: 1.0", "key reward_weights must be"),
                          ("max_tool_calls: many", "key max_tool_calls must be int")):
        recipe = tmp_path / "bad.yaml"
        recipe.write_text("model_name_or_path: tiny\n" + line + "\n")
        with pytest.raises(UserError, match=re.escape(message)):
            main(["--config", str(recipe)])
