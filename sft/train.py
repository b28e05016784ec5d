"""SFT: teach the model the search-agent format on oracle (or teacher) trajectories.

    python -m sft.train --config recipes/smollm2-135m/sft.yaml            # the CPU default (make sft)
    python -m sft.train --config recipes/tiny/sft.yaml --max_steps 5      # seconds, for tests
    accelerate launch --config_file recipes/accelerate/zero2.yaml -m sft.train --config recipes/<model>/sft.yaml

TRL's SFTTrainer with the loss on assistant tokens only (sft/data.py); full fine-tuning or LoRA
(`use_peft: true`) from the recipe. With `loss_positions_only` the output layer is computed only
where a label carries loss: on CPU the 49K-vocabulary head is a large share of the compute and
most tokens are prompt or tool output. Checkpoints are saved during training and a rerun after
a kill resumes from the last one. The final model is a plain HF folder with the tool chat
template and a model card.
"""
from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass, field
from pathlib import Path

from common.disk import check_disk_room
from common.errors import UserError, cli_main
from common.hardware import CpuShare, on_gpu
from common.io import (atomic_dir, atomic_write_json, file_sha256, finished_run, resumable_checkpoint, resume_message,
                       run_fingerprints)
from common.recipe import parse_training_recipe

from sft.data import (evidence_pair_rows, first_turn_rows, parse_type_repeats, read_trajectories, repeat_by_type,
                      stale_warning, tokenize_all, twin_groups)

log = logging.getLogger(__name__)


@dataclass
class SFTScriptArguments:
    trajectories: str = field(default="runs/data/world/trajectories/sft", metadata={"help": "trajectories.jsonl or its folder"})
    loss_positions_only: bool = field(default=True, metadata={"help": "compute the LM head only where labels carry loss"})
    max_examples: int | None = field(default=None, metadata={"help": "use only the first N trajectories"})
    decision_loss_weight: float = field(default=1.0, metadata={
        "help": "loss weight of the first token of each assistant turn after a tool output (answer now or "
                "call again); 1 is plain SFT. Needs loss_positions_only"})
    compile_layers: bool = field(default=False, metadata={
        "help": "torch.compile each decoder layer's MLP and norms (dynamic shapes): each compiled once, "
                "reused by every layer"})
    share_prompt_prefix: bool = field(default=False, metadata={
        "help": "run the prompt a batch's rows share (system prompt, tool list) once per batch, not once per row "
                "(same loss and gradients). Needs loss_positions_only"})
    first_turns: bool = field(default=False, metadata={
        "help": "also train on each trajectory's first assistant turn alone (question, first thought and call): "
                "one more example of reading the question for ~80 tokens past the shared prompt, against ~500 "
                "for a whole trajectory (sft/data.py first_turn_rows)"})
    evidence_pairs: str = field(default="off", metadata={
        "help": "off; add: each missed-evidence row (make data P_MISS=P) gets its other side, the trajectory up to "
                "the same search's output showing the fact and the oracle's next turn, drawn in one step with it; "
                "only: train on those pairs alone (a drill from an SFT checkpoint). sft/data.py shown_rows"})
    freeze_layers: int = field(default=0, metadata={
        "help": "keep the input embeddings and the first N decoder layers fixed: no backward pass below layer N, "
                "so each step costs less (full fine-tuning of the rest; with tied embeddings the output layer "
                "stays fixed too). 0 trains every layer"})
    type_repeats: str = field(default="", metadata={
        "help": "type=copies pairs (e.g. bridge=3): each trajectory of that question type is in the set that many "
                "times, so a step's random draw holds the type more often. Empty: every trajectory once"})
    max_train_minutes: float = field(default=0.0, metadata={
        "help": "train at most this many minutes: max_steps becomes a cap, the LR schedule runs on the share of "
                "the time spent, and training stops before a step would end past it (common/budget.py). "
                "0: max_steps alone"})
    cpu_bf16: str = field(default="auto", metadata={
        "help": "auto: on a CPU train in fp32 even with bf16 set unless a matmul probe finds bf16 faster "
                "(common/hardware.py; emulated bf16 is ~24x slower); always: keep bf16"})


def build_trainer(script, training_args, model_args, train_set, groups: list[int] | None = None):
    """groups: a number per row shared by a trajectory and its twins (sft.data.twin_groups), drawn in one step."""
    import torch
    from trl import SFTTrainer

    from agent.chat import prepare_tokenizer, training_template
    from agent.models import load_model
    from sft.data import decision_marker

    model, tokenizer = load_model(model_args.model_name_or_path, dtype=model_args.dtype or "float32")
    if script.freeze_layers:
        freeze_bottom(model, script.freeze_layers)
    if script.compile_layers:
        compile_decoder_layers(model)
    tokenizer = prepare_tokenizer(tokenizer)
    tokenizer.padding_side = "right"  # training pads on the right; generation (agent) on the left
    peft_config = None
    if model_args.use_peft:
        from trl import get_peft_config
        peft_config = get_peft_config(model_args)
    trainer_class = SFTTrainer
    if script.share_prompt_prefix and training_args.gradient_checkpointing:
        raise UserError("share_prompt_prefix needs gradient_checkpointing: false (checkpointed layers keep no KV cache "
                        "to share the prompt through); set one of the two to false in the recipe")
    if script.loss_positions_only:
        marker = decision_marker(tokenizer, training_template(tokenizer))
        if marker is None and script.decision_loss_weight != 1.0:
            raise UserError("decision_loss_weight: the first token of a turn after a tool output cannot be located in "
                            "this chat template (its turns are not one labelled span each, or start differently); "
                            "set decision_loss_weight: 1")
        trainer_class = loss_positions_trainer(script.decision_loss_weight, marker, script.share_prompt_prefix)
    elif script.decision_loss_weight != 1.0 or script.share_prompt_prefix:
        raise UserError("decision_loss_weight and share_prompt_prefix need loss_positions_only: true "
                        "(the loss that uses them lives there)")
    if training_args.include_num_input_tokens_seen == "all":
        # padding is not work the run did: tokens/s counts real tokens (YAML can only say true, i.e. "all")
        training_args.include_num_input_tokens_seen = "non_padding"
    torch.manual_seed(training_args.seed)
    if groups is not None and training_args.train_sampling_strategy != "batch_rebalance":
        raise UserError("the trajectories hold contrastive twins, which SFT draws in the same step as their original; "
                        "that needs train_sampling_strategy: batch_rebalance")
    if groups is not None and (training_args.packing or getattr(training_args, "shuffle_dataset", False)):
        raise UserError("the trajectories hold contrastive twins, drawn by row number with their original; packing and "
                        "shuffle_dataset reorder the rows first: set both to false")
    trainer = seeded_batches(trainer_class)(model=model, args=training_args, train_dataset=train_set,
                                            processing_class=tokenizer, peft_config=peft_config)
    trainer.twin_groups = groups
    return trainer


def decoder_layers(model, key: str, off: str):
    """The model's decoder layers, or one line naming the recipe key that needs them and its off value."""
    layers = getattr(model.get_decoder(), "layers", None)
    if layers is None:
        raise UserError(f"{key}: {type(model).__name__} has no decoder .layers; set {key}: {off}")
    return layers


def freeze_bottom(model, count: int) -> None:
    """Fix the input embeddings and the first `count` decoder layers. Nothing below layer `count`
    then needs a gradient, so autograd builds no backward pass through them: the step's backward
    shrinks by the frozen share of the layers, and the optimizer holds no moments for them."""
    layers = decoder_layers(model, "freeze_layers", "0")
    if not 0 <= count < len(layers):
        raise UserError(f"freeze_layers must be between 0 and {len(layers) - 1} (the model has {len(layers)} "
                        f"decoder layers), got {count}")
    for module in [model.get_input_embeddings(), *layers[:count]]:
        module.requires_grad_(False)


def seeded_batches(trainer_class):
    """The trainer class with `train_sampling_strategy: batch_rebalance` shuffled by the recipe's
    seed. transformers' BatchRebalanceSampler draws each optimizer step's rows at random and sorts
    them into micro-batches of like length (random steps, little padding), but Trainer builds it
    with its fixed default seed (42), so two recipe seeds would train on the same batches. Where the
    rows hold contrastive twins (`twin_groups`), each step draws a trajectory with its twins."""
    from transformers.trainer_pt_utils import BatchRebalanceSampler

    class _Seeded(trainer_class):
        twin_groups = None

        def _get_train_sampler(self, *args, **kwargs):
            sampler = super()._get_train_sampler(*args, **kwargs)
            if isinstance(sampler, BatchRebalanceSampler):
                sampler.seed = self.args.data_seed if self.args.data_seed is not None else self.args.seed
                if self.twin_groups is not None:
                    sampler = twins_together(sampler, self.twin_groups)
            return sampler

    _Seeded.__name__ = trainer_class.__name__
    return _Seeded


def twins_together(sampler, groups: list[int]):
    """A copy of a BatchRebalanceSampler whose draw order keeps each group of rows (a trajectory
    and its contrastive twins) within one optimizer step; the step's rows are then sorted into
    micro-batches as before. Without that, a 1/5-epoch run would rarely see both sides of a pair."""
    import math

    import torch

    from sft.data import twin_order

    if len(groups) != len(sampler.lengths):  # the groups index make_dataset's rows: TRL must not have moved them
        raise UserError(f"{len(sampler.lengths)} training rows for {len(groups)} twin groups: the trainer dropped or "
                        "added rows after make_dataset, so twins cannot be drawn with their originals")

    class TwinsTogether(type(sampler)):
        def __iter__(self):
            generator = torch.Generator()
            generator.manual_seed(self.seed + self.epoch)
            order, size = twin_order(self.groups, self.effective_batch_size, generator), self.effective_batch_size
            for step in range(self.num_global_batches):
                rows = order[step * size:(step + 1) * size]
                missing = self.dp_size * self.grad_accum - len(rows)
                if missing > 0:  # the tail: every micro-batch needs a row (transformers pads it so too)
                    rows += (order * math.ceil(missing / len(order)))[:missing]
                yield from self._yield_global_batch(rows)

    copy = TwinsTogether(sampler.lengths, sampler.effective_batch_size, sampler.dp_size, sampler.grad_accum,
                         shuffle=sampler.shuffle, seed=sampler.seed, rank=sampler.rank, drop_last=sampler.drop_last)
    copy.groups = groups
    return copy


ATTENTION_NAMES = {"self_attn", "attn", "attention", "self_attention"}  # what transformers calls a layer's attention


def compile_decoder_layers(model) -> None:
    """Regional compilation: the layers share one code path, so compiling each layer's parts (not
    the whole model) compiles once (~40 s here) and every layer reuses it; dynamic shapes because
    batches differ in length. The attention stays eager: with a KV cache (share_prompt_prefix) its
    per-layer cache index makes a compiled attention recompile for every layer. Measured here
    (stop 23), the compiled MLP and norms ran faster than whole compiled layers. Module.compile
    keeps the parameter names, so checkpoints are unchanged."""
    for layer in decoder_layers(model, "compile_layers", "false"):
        for name, part in layer.named_children():
            if name not in ATTENTION_NAMES:
                part.compile(dynamic=True)


def loss_positions_trainer(decision_weight: float = 1.0, marker=None, share_prefix: bool = False):
    """SFTTrainer subclass, built on call so that importing this module does not import TRL.
    With the decision tokens located (`marker`, sft.data.decision_marker), the log carries their own
    loss (`decision_loss`: answer now or call again, a couple of tokens per trajectory that the
    average over ~160 trained tokens hides), and decision_weight scales their share of the loss."""
    import torch
    import torch.nn.functional as F
    from trl import SFTTrainer

    from sft.data import decision_positions
    from sft.prefix import decoder_hidden

    class _Trainer(SFTTrainer):
        """SFTTrainer whose loss runs the LM head only at positions with a label (same loss value)."""

        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self._decision_loss = [torch.zeros(()), torch.zeros((), dtype=torch.long)]  # since the last log

        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            labels = inputs["labels"][:, 1:]
            decoder = model.get_decoder() if hasattr(model, "get_decoder") else model.base_model.get_decoder()
            # accelerate puts autocast around model.forward only; we call the decoder directly
            with self.accelerator.autocast():
                hidden = decoder_hidden(decoder, inputs["input_ids"], inputs.get("attention_mask"),
                                        share_prefix)[:, :-1]
                keep = labels != -100
                logits = model.get_output_embeddings()(hidden[keep])
            per_token = F.cross_entropy(logits.float(), labels[keep], reduction="none")
            if marker is not None:
                decisions = decision_positions(labels, inputs["input_ids"][:, 1:], marker)[keep]
                if model.training:  # summed as tensors: read (one sync) only when logged
                    self._decision_loss = [self._decision_loss[0] + per_token.detach()[decisions].sum().cpu(),
                                           self._decision_loss[1] + decisions.sum().cpu()]
                if decision_weight != 1.0:
                    per_token = per_token * torch.where(decisions, decision_weight, 1.0)
            denominator = num_items_in_batch if num_items_in_batch is not None else keep.sum().clamp(min=1)
            loss = per_token.sum() / denominator
            if self.args.average_tokens_across_devices and num_items_in_batch is not None:
                loss = loss * self.accelerator.num_processes
            return (loss, None) if return_outputs else loss

        def log(self, logs, *args, **kwargs):
            total, count = self._decision_loss
            if "loss" in logs and count.item():
                logs["decision_loss"] = round(total.item() / count.item(), 4)
                self._decision_loss = [torch.zeros(()), torch.zeros((), dtype=torch.long)]
            super().log(logs, *args, **kwargs)

    return _Trainer


def make_dataset(script, training_args, tokenizer_source: str):
    from datasets import Dataset
    from transformers import AutoTokenizer

    from agent.chat import prepare_tokenizer
    from agent.models import resolve_model
    from agent.tools import SearchTools, tool_functions

    rows = read_trajectories(script.trajectories)[: script.max_examples]
    whole = len(rows)
    rows = repeat_by_type(rows, script.type_repeats)
    copies = len(rows) - whole
    firsts = first_turn_rows(rows) if script.first_turns else []
    rows = evidence_pair_rows(rows + firsts, script.evidence_pairs)
    warning = stale_warning(script.trajectories)
    if warning:
        log.warning(warning)
    tokenizer = prepare_tokenizer(AutoTokenizer.from_pretrained(resolve_model(tokenizer_source)))
    tokens = tokenize_all(tokenizer, rows, tool_functions(SearchTools(None)), training_args.max_length)
    dataset = Dataset.from_dict({"input_ids": tokens.input_ids, "labels": tokens.labels})
    groups = twin_groups([rows[i] for i in tokens.kept])
    misses = sum(bool(rows[i].get("miss_of")) for i in tokens.kept)  # data/trajectory_misses.py
    twins = sum(bool(rows[i].get("twin_of")) for i in tokens.kept)
    stats = {"trajectories": whole, **({"repeated_copies": copies} if copies else {}),
             **({"first_turns": len(firsts)} if script.first_turns else {}),
             "used": len(tokens.input_ids), "dropped_too_long": tokens.dropped_too_long,
             "tokens": tokens.total_tokens, "loss_tokens": tokens.loss_tokens,
             **({"twins": twins} if twins else {}),
             **({"missed_evidence": misses} if misses else {}),
             **({"shown_sides": sum(bool(rows[i].get("pair_of")) for i in tokens.kept)} if script.evidence_pairs != "off" else {})}
    return dataset, stats, groups


def plot_loss(log_history: list[dict], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    points = [(row["step"], row["loss"]) for row in log_history if "loss" in row]
    if not points:
        return
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot(*zip(*points), marker=".", label="assistant tokens (as trained)")
    decisions = [(row["step"], row["decision_loss"]) for row in log_history if "decision_loss" in row]
    if decisions:
        ax.plot(*zip(*decisions), marker=".", label="decision tokens (unweighted)")
    lines = ax.get_lines()
    rates = [(row["step"], row["learning_rate"]) for row in log_history if "learning_rate" in row and "loss" in row]
    if rates:  # with a time budget the schedule follows the clock, so show where it went
        lr_axis = ax.twinx()
        lines += lr_axis.plot(*zip(*rates), color="gray", linestyle="--", label="learning rate (right)")
        lr_axis.set_ylabel("learning rate", color="gray")
        lr_axis.ticklabel_format(axis="y", style="sci", scilimits=(0, 0))
    if len(lines) > 1:  # on the top axis, so no line is drawn over it
        (lr_axis if rates else ax).legend(lines, [line.get_label() for line in lines], loc="upper right",
                                          fontsize="small", framealpha=1)
    ax.set_xlabel("step")
    ax.set_ylabel("training loss")
    ax.set_title("SFT loss")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


MODEL_CARD = """# {name}

Search agent fine-tuned with this recipe's SFT stage (TRL SFTTrainer, loss on assistant tokens only).

- base model: `{base}`
- trained on: `{trajectories}` ({rows}, {tokens} tokens of which {loss_tokens} carry loss;
  {dropped} dropped as longer than max_length); seen in training: {seen} rows ({seen_share:.0%} of them)
- method: {method}, {steps} steps{stopped}, learning rate {lr}, effective batch {batch}, max_length {max_length}, seed {seed}
- wall time: {seconds:.0f} s ({tokens_per_s:.0f} tokens/s)
- chat template: ChatML with hermes `<tool_call>` tools (TRL's Qwen2.5 template); tools: search, open, find
- evaluate with: `python -m agent.run --model {out} --questions ... --out ...`
"""


def rows_text(stats: dict) -> str:
    """What the training rows are, for the model card: missed-evidence rows are not trajectories."""
    misses, shown, copies = (stats.get(key, 0) for key in ("missed_evidence", "shown_sides", "repeated_copies"))
    extra = f" ({copies} of them copies: type_repeats)" if copies else ""  # next to the trajectories it counts
    if misses:
        extra += f", {misses} missed-evidence rows (a search's fact hidden, the search again trained)"
    if shown:
        extra += f", {shown} shown sides of them (the fact shown, the oracle's next turn trained)"
    whole = stats["used"] - misses - shown - stats.get("first_turns", 0)
    if "first_turns" not in stats:
        return f"{whole} trajectories{extra}"
    return f"{stats['used']} rows: {whole} trajectories{extra} and {stats['first_turns']} of their first turns alone (first_turns)"


def method_text(use_peft: bool, frozen_layers: int) -> str:
    if use_peft:
        return "LoRA"
    if frozen_layers:
        return f"full fine-tuning above the input embeddings and the first {frozen_layers} decoder layers (kept fixed)"
    return "full fine-tuning"


def add_time_budget(trainer, minutes: float) -> None:
    from common.budget import TimeBudget

    # the budget's spent time rides in each checkpoint's trainer_state.json; restored only with this flag
    trainer.args.restore_callback_states_from_checkpoint = True
    trainer.add_callback(TimeBudget(minutes))


def stop_reason(trainer, minutes: float) -> dict:
    """Why training ended, for the summary and the model card: the budget (restored on resume as a new
    callback object, so looked up again) or the step count."""
    from common.budget import TimeBudget

    if not minutes:
        return {"by": "max_steps", "spent": None, "text": ""}
    budget = next(cb for cb in trainer.callback_handler.callbacks if isinstance(cb, TimeBudget))
    spent = round(budget.elapsed() / 60, 2)
    if budget.stopped_early:
        return {"by": "time budget", "spent": spent, "text": f" (stopped by the {minutes:g}-minute time budget)"}
    return {"by": "max_steps", "spent": spent, "text": f" (max_steps reached within the {minutes:g}-minute time budget)"}


def save_final(trainer, tokenizer_source: str, out: Path, card: dict) -> None:
    from transformers import AutoTokenizer

    from agent.chat import prepare_tokenizer
    from agent.models import resolve_model

    model = trainer.model
    if hasattr(model, "merge_and_unload"):  # LoRA: ship a plain model, loadable by transformers and vLLM
        model = model.merge_and_unload()
    tokenizer = prepare_tokenizer(AutoTokenizer.from_pretrained(resolve_model(tokenizer_source)))
    tokenizer.padding_side = "left"
    with atomic_dir(out) as tmp:  # a kill while saving leaves no half-written final/
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        (tmp / "README.md").write_text(MODEL_CARD.format(**card))


# settings that cannot change the weights: a finished run is not redone when only these differ
NOT_IN_FINGERPRINT = ("logging_", "save_", "report_to", "include_num_input_tokens_seen", "output_dir", "disable_tqdm")


def script_settings(script) -> dict:
    """The script arguments a run's identity depends on: cpu_bf16 is only how bf16 was decided, and
    the bf16 actually used is in the training arguments, so it is left out; decision_loss_weight
    share_prompt_prefix, first_turns, freeze_layers, max_train_minutes, type_repeats and evidence_pairs only where they are set, so runs made before the keys existed
    keep their fingerprint."""
    settings = {key: value for key, value in asdict(script).items() if key != "cpu_bf16"}
    if settings["decision_loss_weight"] == 1.0:
        del settings["decision_loss_weight"]
    for key in ("share_prompt_prefix", "first_turns", "freeze_layers", "max_train_minutes", "type_repeats"):
        if not settings[key]:
            del settings[key]
    if settings["evidence_pairs"] == "off":
        del settings["evidence_pairs"]
    return settings


def fingerprints(script, training_args, model_args) -> tuple[str, str]:
    """(fingerprint, identity): a finished run with the same fingerprint is not run again; a
    checkpoint with the same identity (the fingerprint without LENGTH_KEYS) may be resumed."""
    data = Path(script.trajectories)
    data = data / "trajectories.jsonl" if data.is_dir() else data
    settings = {"script": script_settings(script), "model": asdict(model_args), "data": file_sha256(data) if data.is_file() else None,
                "train": {k: v for k, v in training_args.to_dict().items() if not k.startswith(NOT_IN_FINGERPRINT)}}
    return run_fingerprints(settings, "train")


def main(argv=None) -> None:
    from trl import ModelConfig, SFTConfig

    script, training_args, model_args = parse_training_recipe((SFTScriptArguments, SFTConfig, ModelConfig), argv)
    out = Path(training_args.output_dir)
    digest, identity = fingerprints(script, training_args, model_args)
    done = finished_run(out, digest)
    if done:
        print(f"{out / 'final'} is already trained with this recipe ({done['global_step']} steps); nothing to do")
        return
    if script.evidence_pairs not in ("off", "add", "only"):
        raise UserError(f"evidence_pairs must be off, add or only, got {script.evidence_pairs!r}")
    if script.evidence_pairs == "only" and script.first_turns:
        raise UserError("evidence_pairs: only trains on the pairs alone, so first_turns would be dropped; set one of the two off")
    if script.freeze_layers and model_args.use_peft:
        raise UserError("freeze_layers is for full fine-tuning (LoRA already keeps the base weights fixed); "
                        "set freeze_layers: 0 or use_peft: false")
    parse_type_repeats(script.type_repeats)
    if script.type_repeats and script.evidence_pairs != "off":
        raise UserError("type_repeats copies trajectories, and evidence_pairs draws each missed-evidence row with its pair "
                        "by row; set one of the two off")
    if script.max_train_minutes < 0:
        raise UserError(f"max_train_minutes must be >= 0 (0 trains max_steps steps), got {script.max_train_minutes}")
    if script.decision_loss_weight <= 0:
        raise UserError(f"decision_loss_weight must be > 0 (1 is plain SFT), got {script.decision_loss_weight}")
    dataset, stats, groups = make_dataset(script, training_args, model_args.model_name_or_path)
    print(f"SFT data: {json.dumps(stats)}")
    trainer = build_trainer(script, training_args, model_args, dataset, groups)
    check_disk_room(out, trainer.model, training_args)
    last = resumable_checkpoint(out, identity)
    if last:
        print(resume_message(last, training_args))
    if script.max_train_minutes:
        add_time_budget(trainer, script.max_train_minutes)
    cpu = CpuShare()
    result = trainer.train(resume_from_checkpoint=last)
    budget = stop_reason(trainer, script.max_train_minutes)
    seconds = cpu.seconds()
    cpu_share = cpu.report(on_cpu=training_args.use_cpu or not on_gpu())
    final = out / "final"
    batch = training_args.per_device_train_batch_size * training_args.gradient_accumulation_steps * training_args.world_size
    seen = trainer.state.global_step * batch
    card = {**stats, "name": out.name, "base": model_args.model_name_or_path, "trajectories": script.trajectories,
            "dropped": stats["dropped_too_long"], "rows": rows_text(stats),
            "method": method_text(model_args.use_peft, script.freeze_layers), "stopped": budget["text"],
            "steps": trainer.state.global_step, "lr": training_args.learning_rate,
            "batch": batch,
            "max_length": training_args.max_length, "seed": training_args.seed, "seconds": seconds,
            "tokens_per_s": trainer.state.num_input_tokens_seen / seconds if trainer.state.num_input_tokens_seen else 0.0,
            "seen": seen, "seen_share": seen / max(stats["used"], 1), "out": final}
    save_final(trainer, model_args.model_name_or_path, final, card)
    plot_loss(trainer.state.log_history, out / "loss.png")
    atomic_write_json(out / "train_summary.json", {
        "fingerprint": digest, "stats": stats, "trajectories_seen": seen, "train_runtime": result.metrics.get("train_runtime"), "wall_seconds": round(seconds, 1), "cpu_share": cpu_share,
        "global_step": trainer.state.global_step, "stopped_by": budget["by"], "budget_minutes_spent": budget["spent"],
        "resumed_from": last, "device": str(trainer.model.device),
        "loss_history": [row for row in trainer.state.log_history if "loss" in row],
        "args": {k: v for k, v in asdict(script).items()}})
    print(f"saved {final} ({trainer.state.global_step} steps, {seconds:.0f}s); loss curve {out / 'loss.png'}")


if __name__ == "__main__":
    cli_main(main)
