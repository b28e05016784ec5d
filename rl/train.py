"""RL: GRPO on the search agent, outcome reward plus a length penalty, the search tools as environment.

    python -m rl.train --config recipes/smollm2-135m/rl.yaml          # the CPU default (make rl)
    python -m rl.train --config recipes/tiny/rl.yaml --questions <jsonl> --datastore <name>   # seconds
    accelerate launch --config_file recipes/accelerate/zero2.yaml -m rl.train \
        --config recipes/<model>/rl.yaml --use_vllm true --vllm_mode colocate       # an 8-GPU node

TRL's GRPOTrainer runs the multi-turn tool loop: each dataset row's `prompt` is the agent's own
system + user prompt (agent.prompt.first_messages), the tools are rl.environment.SearchEnvironment
(one per rollout, the same search/open/find as the agent, in-process or over HTTP with
`retrieval_url`), tool outputs are masked out of the loss, and the rewards come from the registry
in rl/rewards.py (`reward_funcs`, weighted by GRPOConfig's `reward_weights`). Starts from the SFT
checkpoint, resumes from the last checkpoint after a kill, logs health signals (rl/health.py) and
saves the final policy as a plain HF folder with a model card.
"""
from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

from agent.tools import DEFAULT_K
from common.disk import check_disk_room
from common.errors import UserError, cli_main
from common.hardware import CpuShare, on_gpu
from common.io import (atomic_dir, atomic_write_json, file_sha256, finished_run, resumable_checkpoint, resume_message,
                       run_fingerprints)
from common.recipe import parse_training_recipe
from rl.data import check_pass_rates_model, load_questions, make_dataset, make_retriever

DEFAULT_MODEL = "runs/smollm2-135m/sft/final"
SFT_HINT = "train it with `make sft` (python -m sft.train --config recipes/<model>/sft.yaml) or set model_name_or_path"


@dataclass
class RLScriptArguments:
    questions: str = field(default="runs/data/world/questions/train_rl.jsonl", metadata={"help": "question JSONL"})
    max_questions: int | None = field(default=None, metadata={"help": "use only the first N questions (after filtering)"})
    pass_rate_file: str | None = field(default=None, metadata={
        "help": "out/predictions.jsonl of `python -m rl.pass_rate` (sampled SFT episodes): keeps the measured questions within the pass-rate bounds"})
    min_pass_rate: float = field(default=0.0, metadata={"help": "keep questions whose pass rate is at least this"})
    max_pass_rate: float = field(default=1.0, metadata={"help": "keep questions whose pass rate is at most this"})
    datastore: str = field(default="world", metadata={"help": "datastore name or folder (in-process retrieval)"})
    retrieval_url: str | None = field(default=None, metadata={"help": "a datastore.serve URL instead of in-process"})
    search_method: str | None = field(default=None, metadata={"help": "bm25 | dense | hybrid (default: the datastore's)"})
    k: int = field(default=DEFAULT_K, metadata={"help": "hits per search"})
    max_tool_calls: int = field(default=8, metadata={"help": "tool-call budget stated in the prompt and enforced"})
    max_turn_tokens: int | None = field(default=None, metadata={
        "help": "new tokens per assistant turn (max_completion_length bounds the whole rollout, tool outputs included)"})
    reward_funcs: list[str] = field(default_factory=lambda: ["em", "kimi"], metadata={"help": "names from rl/rewards.py"})
    answer_needs_evidence: bool = field(default=False, metadata={
        "help": "an answer is right only if the rollout saw all its gold documents (rewards and the pass-rate filter): "
                "a right guess scores 0 (rl/rewards.py)"})
    length_penalty_scope: str = field(default="correct", metadata={"help": "correct: length rewards only for correct answers; all"})
    target_length: int = field(default=64, metadata={"help": "policy tokens the `target` reward aims at"})
    overlong_max_tokens: int = field(default=192, metadata={"help": "`overlong`: -1 beyond this many policy tokens"})
    overlong_buffer: int = field(default=64, metadata={"help": "`overlong`: linear penalty over the last this many"})
    tool_call_cost: float = field(default=0.05, metadata={"help": "`tool_cost`: penalty per tool call"})
    health_min_answer_rate: float = field(default=0.1, metadata={"help": "warn when the answer rate stays below this"})
    rollout_stop_fit: str | None = field(default=None, metadata={
        "help": "the starting checkpoint's stop_fit.json (`make stop-fit`): rollouts decode with its two-sided "
                "calibrated stop, the agent of eval stage sft_stop (rl/trainer.py)"})
    cpu_bf16: str = field(default="auto", metadata={
        "help": "auto: on a CPU train in fp32 even with bf16 set unless a matmul probe finds bf16 faster "
                "(common/hardware.py; emulated bf16 is ~24x slower); always: keep bf16"})


def resolve_start(model_name_or_path: str | None) -> str:
    """The policy to start from (the SFT checkpoint by default), or a UserError naming the fix."""
    from agent.models import SHORT_NAMES, resolve_model

    name = model_name_or_path or DEFAULT_MODEL
    if name in SHORT_NAMES:
        return resolve_model(name)
    path = Path(name).expanduser()
    if path.exists():
        if not (path / "config.json").exists():
            raise UserError(f"{name} is not a finished model folder (no config.json); {SFT_HINT}")
        return str(path)
    if name.startswith((".", "/", "~", "runs/")) or name.count("/") > 1:
        raise UserError(f"the starting checkpoint {name} does not exist; {SFT_HINT}")
    return name  # a hub id (online users)


def configure(training_args, script: RLScriptArguments) -> None:
    """Fill GRPOConfig settings derived from the script's: turn budget, per-turn token cap."""
    if training_args.max_tool_calling_iterations is None:
        training_args.max_tool_calling_iterations = script.max_tool_calls
    kwargs = training_args.generation_kwargs or {}
    kwargs = json.loads(kwargs) if isinstance(kwargs, str) else dict(kwargs)
    if script.max_turn_tokens:
        kwargs["max_tokens" if training_args.use_vllm else "max_new_tokens"] = script.max_turn_tokens
    training_args.generation_kwargs = kwargs or None
    per_process = training_args.per_device_train_batch_size * training_args.steps_per_generation
    if "kimi" in script.reward_funcs and per_process % training_args.num_generations:
        print(f"note: {per_process} rollouts per process is not a multiple of num_generations "
              f"({training_args.num_generations}); kimi sees only the local part of a split group")


def rollout_stop(script, training_args, model_path: str) -> float | None:
    """The threshold of `rollout_stop_fit`, fitted for the starting checkpoint, or a UserError."""
    from eval.stop_decisions import fitted_stop
    from rl.trainer import samples_with_generate

    if not script.rollout_stop_fit:
        return None
    if not samples_with_generate(training_args):
        raise UserError("rollout_stop_fit needs transformers' generate: set use_vllm and "
                        "use_transformers_continuous_batching to false, or drop rollout_stop_fit")
    threshold = fitted_stop(Path(script.rollout_stop_fit), model_path)
    if isinstance(threshold, str):
        raise UserError(f"rollout_stop_fit: {threshold}")
    return threshold


def build_trainer(script, training_args, model_args, model_path, dataset, retriever, rewards, callbacks,
                  stop: float | None = None):
    from agent.chat import prepare_tokenizer
    from agent.models import load_model
    from rl.environment import SearchEnvironment
    from rl.trainer import AgentGRPOTrainer, add_response_parser

    model, tokenizer = load_model(model_path, dtype=model_args.dtype or "float32")
    peft_config = None
    if model_args.use_peft:
        from trl import get_peft_config
        peft_config = get_peft_config(model_args)

    def environment():
        return SearchEnvironment(retriever, k=script.k, method=script.search_method, max_tool_calls=script.max_tool_calls)

    return AgentGRPOTrainer(model=model, reward_funcs=rewards, args=training_args, train_dataset=dataset,
                            processing_class=add_response_parser(prepare_tokenizer(tokenizer)), environment_factory=environment,
                            peft_config=peft_config, callbacks=callbacks, rollout_stop=stop)


MODEL_CARD = """# {name}

Search agent trained with this recipe's RL stage: TRL GRPOTrainer, the search tools (search, open, find)
as its environment, tool outputs masked out of the loss.

- started from: `{start}`
- questions: `{questions}` ({used} used)
- rewards: {rewards} with weights {weights}; length penalties on {scope} answers, counting only the policy's tokens{evidence}
- GRPO: {steps} steps, {num_generations} generations per question, max_completion_length {max_completion_length}
  (tool outputs included), turn cap {max_turn_tokens} tokens, learning rate {lr}, beta {beta}, seed {seed}{stop}
- wall time: {seconds:.0f} s this run ({seconds_per_step:.1f} s/step)
- health: see health.png / health.jsonl beside this folder{warnings}
- chat template: the agent's tool template (agent.chat.prepare_tokenizer), as in SFT and evaluation
- evaluate with: `python -m agent.run --model {out} --questions ... --out ...`
"""


def save_final(trainer, model_path: str, out: Path, card: dict) -> None:
    from transformers import AutoTokenizer

    from agent.chat import prepare_tokenizer

    model = trainer.model
    if hasattr(model, "merge_and_unload"):  # LoRA: ship a plain model
        model = model.merge_and_unload()
    with atomic_dir(out) as tmp:
        model.save_pretrained(tmp)
        prepare_tokenizer(AutoTokenizer.from_pretrained(model_path)).save_pretrained(tmp)
        (tmp / "README.md").write_text(MODEL_CARD.format(**card))


REWARD_SETTINGS = ("length_penalty_scope", "target_length", "overlong_max_tokens", "overlong_buffer", "tool_call_cost",
                   "max_tool_calls", "answer_needs_evidence")


def reward_settings(script) -> dict:
    """The script arguments the reward functions take (each binds the ones its signature names)."""
    return {key: getattr(script, key) for key in REWARD_SETTINGS}


def script_settings(script) -> dict:
    """The script arguments a run's identity depends on: cpu_bf16 is only how bf16 was decided, and
    the bf16 actually used is in the training arguments, so it is left out. answer_needs_evidence and
    rollout_stop_fit are left out while off, so runs from before them keep their fingerprint."""
    settings = {key: value for key, value in asdict(script).items() if key != "cpu_bf16"}
    for key in ("answer_needs_evidence", "rollout_stop_fit"):
        if not settings[key]:
            del settings[key]
    return settings


def fingerprints(script, training_args, model_path: str, weights: str,
                 rollout_stop: float | None = None) -> tuple[str, str]:
    """(fingerprint, identity): a finished run with the same fingerprint is not run again; a
    checkpoint with the same identity (the fingerprint without LENGTH_KEYS) may be resumed."""
    questions = Path(script.questions)
    settings = {"script": script_settings(script), "model": model_path, "weights": weights,
                **({"rollout_stop": rollout_stop} if rollout_stop is not None else {}),
                "questions": file_sha256(questions) if questions.is_file() else None,
                **({"pass_rates": file_sha256(Path(script.pass_rate_file))} if script.pass_rate_file else {}),
                "grpo": {k: v for k, v in training_args.to_dict().items() if not k.startswith(("logging", "output_dir"))}}
    return run_fingerprints(settings, "grpo")


def main(argv=None) -> None:
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    from trl import GRPOConfig, ModelConfig

    from rl.health import HealthCallback, HealthMonitor
    from rl.rewards import build_rewards

    script, training_args, model_args = parse_training_recipe((RLScriptArguments, GRPOConfig, ModelConfig), argv)
    rewards = build_rewards(script.reward_funcs, training_args.reward_weights, **reward_settings(script))
    from agent.models import checkpoint_digest

    model_path = resolve_start(model_args.model_name_or_path)
    weights = checkpoint_digest(model_path)  # ~1 s for the 135M model: once, for the pass-rate check and the fingerprint
    if script.pass_rate_file:
        check_pass_rates_model(script.pass_rate_file, model_path, weights)
    stop = rollout_stop(script, training_args, model_path)
    questions, stats = load_questions(script)
    retriever = make_retriever(script)
    configure(training_args, script)
    out = Path(training_args.output_dir)
    digest, identity = fingerprints(script, training_args, model_path, weights, stop)
    done = finished_run(out, digest)
    if done:
        print(f"{out / 'final'} is already trained with this recipe ({done['global_step']} steps); nothing to do")
        return
    print(f"RL data: {json.dumps(stats)}; rewards {script.reward_funcs} x {training_args.reward_weights or 'equal weights'}; "
          f"start {model_path}")
    health = HealthCallback(out, HealthMonitor(min_answer_rate=script.health_min_answer_rate))
    trainer = build_trainer(script, training_args, model_args, model_path, make_dataset(questions, script.max_tool_calls),
                            retriever, rewards, [health], stop)
    check_disk_room(out, trainer.model, training_args)
    last = resumable_checkpoint(out, identity)
    if last:
        print(resume_message(last, training_args))
    start_step = int(Path(last).name.split("-")[-1]) if last else 0
    cpu = CpuShare()
    result = trainer.train(resume_from_checkpoint=last)
    seconds = cpu.seconds()
    cpu_share = cpu.report(on_cpu=training_args.use_cpu or not on_gpu())
    steps_now = max(trainer.state.global_step - start_step, 1)
    card = {"name": out.name, "start": model_args.model_name_or_path or DEFAULT_MODEL, "questions": script.questions,
            "used": stats["used"], "rewards": ", ".join(script.reward_funcs),
            "weights": training_args.reward_weights or [1.0] * len(rewards), "scope": script.length_penalty_scope,
            "evidence": "; an answer is right only with all its gold documents seen" if script.answer_needs_evidence else "",
            "stop": f"\n- rollouts under the calibrated stop of `{script.rollout_stop_fit}` (threshold {stop:.3f})"
                    if stop is not None else "",
            "steps": trainer.state.global_step, "num_generations": training_args.num_generations,
            "max_completion_length": training_args.max_completion_length, "max_turn_tokens": script.max_turn_tokens,
            "lr": training_args.learning_rate, "beta": training_args.beta, "seed": training_args.seed,
            "seconds": seconds, "seconds_per_step": seconds / steps_now, "out": out / "final",
            "warnings": "".join(f"\n  - {w}" for w in health.warnings)}
    save_final(trainer, model_path, out / "final", card)
    atomic_write_json(out / "train_summary.json", {
        "fingerprint": digest, "stats": stats, "start": model_path, "start_weights": weights, "global_step": trainer.state.global_step, "resumed_from": last,
        "train_runtime": result.metrics.get("train_runtime"), "wall_seconds": round(seconds, 1), "cpu_share": cpu_share,
        "device": str(trainer.model.device), "seconds_per_step": round(seconds / steps_now, 2), "health_warnings": health.warnings,
        "log_history": [row for row in trainer.state.log_history if "reward" in row],
        "args": asdict(script)})
    print(f"saved {out / 'final'} ({trainer.state.global_step} steps, {seconds:.0f}s, {seconds / steps_now:.1f} s/step); "
          f"health plot {out / 'health.png'}")


if __name__ == "__main__":
    cli_main(main)
