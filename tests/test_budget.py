"""The time budget (common/budget.py): the LR schedule runs on the time spent, training stops in
time, and a resumed run keeps the time its checkpoint had spent."""
import json

import pytest
import torch
from transformers import TrainerControl, TrainerState, get_scheduler

from common.budget import TimeBudget
from tests.test_agent import store  # noqa: F401  (fixture)
from tests.test_sft import sft_args, write_trajectories


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def cosine(max_steps=100):
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    return optimizer, get_scheduler("cosine", optimizer, num_warmup_steps=5, num_training_steps=max_steps)


def run_steps(budget, clock, seconds_per_step, max_steps=100):
    """Drive the callback the way Trainer does; the learning rate each step trained with, and the steps run."""
    optimizer, scheduler = cosine(max_steps)
    state, control = TrainerState(max_steps=max_steps), TrainerControl()
    budget.on_train_begin(None, state, control, lr_scheduler=scheduler)
    rates = []
    while state.global_step < max_steps and not control.should_training_stop:
        rates.append(optimizer.param_groups[0]["lr"])
        clock.now += seconds_per_step
        optimizer.step()
        budget.on_optimizer_step(None, state, control)
        scheduler.step()
        state.global_step += 1
        budget.on_step_end(None, state, control)
    return rates, state.global_step


def test_the_schedule_runs_on_the_time_spent_and_stops_before_the_budget():
    clock = FakeClock()
    budget = TimeBudget(minutes=1, clock=clock)
    rates, steps = run_steps(budget, clock, seconds_per_step=6.0)
    assert steps == 10 and budget.stopped_early  # the 11th step would end at 66 s
    _, plain = cosine()
    planned = []
    for _ in range(100):
        planned.append(plain.get_last_lr()[0])
        plain.optimizer.step()
        plain.step()
    # after k steps of 6 s, 6k/60 of the budget is spent: the rate planned for step 10k of 100
    assert rates[5] == pytest.approx(planned[50]) and rates[9] == pytest.approx(planned[90])
    assert rates[1] > 0 and max(rates) > 0.95 and rates[-1] < 0.03  # warmed up, then decayed to ~0


def test_a_fast_run_follows_its_steps_and_reaches_max_steps():
    clock = FakeClock()
    budget = TimeBudget(minutes=60, clock=clock)
    rates, steps = run_steps(budget, clock, seconds_per_step=1.0)
    assert steps == 100 and not budget.stopped_early
    _, plain = cosine()
    assert rates[50] == pytest.approx(plain.lr_lambdas[0](50))


def test_the_first_step_does_not_predict_the_others():
    """A first step that compiles (40 s) must not stop a run whose next steps take 5 s."""
    clock = FakeClock()
    budget = TimeBudget(minutes=1, clock=clock)
    optimizer, scheduler = cosine()
    state, control = TrainerState(max_steps=100), TrainerControl()
    budget.on_train_begin(None, state, control, lr_scheduler=scheduler)
    for step in range(1, 100):
        clock.now += 40.0 if step == 1 else 5.0
        budget.on_optimizer_step(None, state, control)
        state.global_step = step
        budget.on_step_end(None, state, control)
        if control.should_training_stop:
            break
    assert step == 5 and clock.now == 60.0  # 40 s + 4 x 5 s: the budget used to the end, not stopped after step 1


def test_the_state_carries_the_time_spent():
    clock = FakeClock()
    budget = TimeBudget(minutes=2, spent=30.0, clock=clock)
    state, control = TrainerState(max_steps=10), TrainerControl()
    budget.on_train_begin(None, state, control, lr_scheduler=cosine(10)[1])
    clock.now += 12.0
    budget.on_optimizer_step(None, state, control)
    restored = TimeBudget.from_state(budget.state())  # what Trainer does on resume
    assert restored.budget == 120.0 and restored.spent == 42.0 and not restored.stopped_early
    restored.on_train_begin(None, state, control, lr_scheduler=cosine(10)[1])
    assert restored.elapsed() == 42.0


def _one_rank(rank, port, out):
    """A rank whose own clock runs at another speed than rank 0's."""
    from datetime import timedelta

    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2,
                            timeout=timedelta(seconds=60))  # a broken broadcast fails the test instead of hanging it
    try:
        clock = FakeClock()
        rates, steps = run_steps(TimeBudget(minutes=1, clock=clock), clock, seconds_per_step=6.0 if rank == 0 else 1.0)
        (out / f"rank{rank}.json").write_text(json.dumps({"rates": rates, "steps": steps}))
    finally:
        dist.destroy_process_group()


def test_every_rank_takes_rank_0s_time(tmp_path):
    """Two processes (gloo on loopback) with clocks at 6 s and 1 s per step: both follow rank 0's,
    so they step the same learning rates and stop together."""
    import socket

    import torch.multiprocessing as mp

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    mp.spawn(_one_rank, args=(port, tmp_path), nprocs=2, join=True)
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    clock = FakeClock()
    alone = run_steps(TimeBudget(minutes=1, clock=clock), clock, seconds_per_step=6.0)
    assert ranks[0] == ranks[1] == {"rates": alone[0], "steps": alone[1]} and alone[1] == 10


def test_tiny_sft_stops_on_its_budget_and_a_resumed_run_keeps_the_time_spent(tmp_path, store, tiny):  # noqa: F811
    from sft.train import main

    data = write_trajectories(tmp_path / "t.jsonl", store)
    main(sft_args(tmp_path, data, "--max_steps", "3", "--max_train_minutes", "10"))
    summary = json.loads((tmp_path / "sft/train_summary.json").read_text())
    assert summary["global_step"] == 3 and summary["stopped_by"] == "max_steps"
    assert "max_steps reached within the 10-minute time budget" in (tmp_path / "sft/final/README.md").read_text()
    # the checkpoint says the 10 minutes are spent: resumed, the run takes one step (a process's first) and stops
    state_file = tmp_path / "sft/checkpoint-3/trainer_state.json"
    state = json.loads(state_file.read_text())
    assert state["stateful_callbacks"]["TimeBudget"]["attributes"]["spent"] > 0
    state["stateful_callbacks"]["TimeBudget"]["attributes"]["spent"] = 600.0
    state_file.write_text(json.dumps(state))
    main(sft_args(tmp_path, data, "--max_steps", "1000", "--max_train_minutes", "10"))
    summary = json.loads((tmp_path / "sft/train_summary.json").read_text())
    assert summary["resumed_from"].endswith("checkpoint-3")
    assert summary["global_step"] == 4 and summary["stopped_by"] == "time budget"
    assert summary["budget_minutes_spent"] >= 10
    assert summary["loss_history"][-1]["step"] == 4  # the stopped step is logged and checkpointed, as at max_steps
    assert (tmp_path / "sft/checkpoint-4").is_dir()
    card = (tmp_path / "sft/final/README.md").read_text()
    assert "4 steps (stopped by the 10-minute time budget)" in card


def test_a_negative_budget_is_refused(tmp_path, store):  # noqa: F811
    from common.errors import UserError
    from sft.train import main

    data = write_trajectories(tmp_path / "t.jsonl", store)
    with pytest.raises(UserError, match="max_train_minutes must be >= 0"):
        main(sft_args(tmp_path, data, "--max_train_minutes", "-1"))
