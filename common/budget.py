"""A wall-time budget for a Trainer run: train as many steps as fit, with the whole LR schedule.

A fixed step count fits a time limit on one CPU only: the default SFT's 76 steps took 23 min on
one 2-core machine and 33-35 on others, while 160 steps fit 30 minutes on the AMX CPU of stops
43-45 and answered more (issue 4's slices 0.31 and 0.20 against 0.25 and 0.10). With a budget,
`max_steps` becomes a cap and the schedule runs on the share of the budget spent: the learning
rate the recipe's scheduler would give at step `max(step, spent / budget * max_steps)`, so
warmup and cosine decay play out over the time, whatever the speed (transformers' LambdaLR schedules:
linear, cosine, constant and the like; not reduce_lr_on_plateau). Training stops before the
next step would end past the budget (predicted from the mean of the last steps). The time spent
is saved in each checkpoint (transformers' ExportableState), so a run resumed after a kill has
the budget it had left at its last checkpoint. Under several processes every rank follows rank 0's
clock, so all take one learning rate and stop at one step. The price: how many steps a run takes depends on
the machine and its load, so two runs of one recipe can differ; the model card and the summary
say how many steps ran and why they stopped. Set the budget to 0 for a fixed step count.
"""
from __future__ import annotations

import time

from transformers.trainer_callback import ExportableState, TrainerCallback

from common.errors import UserError

RECENT_STEPS = 10  # steps whose mean predicts the next one: enough to smooth a batch's length, recent enough for load


def rank0_values(values: list[float], device) -> list[float]:
    """Rank 0's numbers on every rank: with one clock per process, ranks would take different learning
    rates and stop at different steps (a hang in the next all-reduce). One process: unchanged."""
    import torch
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return values
    tensor = torch.tensor(values, dtype=torch.float64, device=device)
    dist.broadcast(tensor, src=0)
    return tensor.tolist()


class TimeBudget(TrainerCallback, ExportableState):
    def __init__(self, minutes: float, spent: float = 0.0, clock=time.monotonic):
        self.budget = 60.0 * minutes
        self.spent = spent  # seconds of training before this process (from the checkpoint)
        self.stopped_early = False
        self._clock = clock
        self._start = self._last = None
        self._recent: list[float] = []
        self._elapsed, self._next_step = spent, 0.0  # rank 0's, the same on every rank

    def elapsed(self) -> float:
        """Seconds of training so far, as of the last optimizer step."""
        return self._elapsed

    def progress(self, step: float, max_steps: int) -> float:
        """The step whose learning rate applies: the further of steps done and time spent."""
        return max(step, min(self._elapsed / self.budget, 1.0) * max_steps)

    def on_train_begin(self, args, state, control, lr_scheduler=None, **kwargs):
        self._start = self._last = self._clock()
        self._elapsed = self.spent  # a restored callback gets `spent` set after its __init__
        if lr_scheduler is None or not hasattr(lr_scheduler, "lr_lambdas"):
            raise UserError("max_train_minutes needs a LambdaLR schedule (lr_scheduler_type linear, cosine, constant, ...); this run has "
                            f"{type(lr_scheduler).__name__}: set max_train_minutes: 0 and a max_steps")
        planned, max_steps = list(lr_scheduler.lr_lambdas), state.max_steps
        lr_scheduler.lr_lambdas = [lambda step, f=f: f(self.progress(step, max_steps)) for f in planned]

    def on_optimizer_step(self, args, state, control, **kwargs):
        """After the weights' update and before the scheduler's step, so the next rate sees this step's time."""
        now = self._clock()
        self._recent = (self._recent + [now - self._last])[-RECENT_STEPS:]
        self._last = now
        # the first step of a process carries one-time costs (torch.compile): predict from the others
        steps = self._recent[1:]
        next_step = sum(steps) / len(steps) if steps else 0.0
        self._elapsed, self._next_step = rank0_values([self.spent + now - self._start, next_step],
                                                      getattr(args, "device", None))

    def on_step_end(self, args, state, control, **kwargs):
        if self._elapsed + self._next_step > self.budget and state.global_step < state.max_steps:
            control.should_training_stop = True
            # as at max_steps: the last steps' loss is logged and they are checkpointed (resumable)
            control.should_log = True
            strategy = getattr(args, "save_strategy", "no")
            control.should_save = getattr(strategy, "value", strategy) == "steps"
            self.stopped_early = True
            print(f"time budget: stopping after step {state.global_step} of at most {state.max_steps} "
                  f"({self._elapsed / 60:.1f} of {self.budget / 60:g} minutes spent)")

    def state(self) -> dict:
        return {"args": {"minutes": self.budget / 60.0}, "attributes": {"spent": self._elapsed}}
