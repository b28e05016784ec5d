"""Room on disk for a training run's checkpoints, checked before its first step.

A Trainer checkpoint holds the weights and AdamW's two moments: ~1.6 GB for the 135M model in full
fine-tuning. A disk that fills mid-run kills the stage inside a save, after the compute is spent
(stop 43: 40 kept checkpoints filled it). sft.train and rl.train call check_disk_room after
building their trainer: too little room for one checkpoint and the final model is an error at
start; too little for every checkpoint the run keeps is a warning.
"""
import logging
import math
import shutil
from pathlib import Path

from common.errors import UserError

log = logging.getLogger(__name__)
GB = 1e9


def checkpoint_bytes(model) -> tuple[int, int]:
    """(bytes of one Trainer checkpoint, bytes of the final model folder) for `model`.

    A peft model saves only its adapter; AdamW keeps two fp32 moments per trainable parameter.
    """
    params = list(model.parameters())  # tied weights appear once
    trainable = [p for p in params if p.requires_grad]
    weights = sum(p.numel() * p.element_size() for p in (trainable if hasattr(model, "peft_config") else params))
    return weights + 8 * sum(p.numel() for p in trainable), weights


def checkpoints_on_disk(args) -> int:
    """How many checkpoints a run with these TrainingArguments holds at its peak.

    The Trainer saves every save_steps and at the last step, and deletes the oldest beyond
    save_total_limit only after writing the new one: the peak is the limit plus one.
    """
    strategy = str(getattr(args.save_strategy, "value", args.save_strategy))
    if strategy == "no":
        return 0
    limit = args.save_total_limit or 0
    if strategy != "steps" or args.max_steps <= 0:
        return limit + 1 if limit else 1  # epoch-based: the count is not known before the data is
    every = args.save_steps if args.save_steps >= 1 else math.ceil(args.save_steps * args.max_steps)
    saves = math.ceil(args.max_steps / max(every, 1))
    return min(saves, limit + 1) if limit else saves


def check_disk_room(out: Path, model, args) -> None:
    """Stop now if `out`'s disk cannot hold one checkpoint and the final model; warn if it cannot
    hold every checkpoint the run keeps."""
    checkpoint, final = checkpoint_bytes(model)
    count = checkpoints_on_disk(args)
    folder = Path(out)
    while not folder.exists():
        folder = folder.parent
    free = shutil.disk_usage(folder).free
    fix = "free space (make clean-checkpoints removes finished runs' checkpoints) or lower --save_total_limit"
    if count and free < checkpoint + final:
        raise UserError(f"{free / GB:.1f} GB free under {folder}, but one checkpoint and the final model of this run "
                        f"take {(checkpoint + final) / GB:.1f} GB; {fix}")
    need = count * checkpoint + final
    if free < need:
        log.warning("warning: %.1f GB free under %s; this run keeps up to %d checkpoint(s) of %.1f GB and a %.1f GB final "
                    "model (%.1f GB): it may fill the disk; %s", free / GB, folder, count, checkpoint / GB,
                    final / GB, need / GB, fix)
