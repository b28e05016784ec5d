"""Evaluate every stage of a recipe on its benchmarks, reusing `agent.run`.

    python -m eval.run --config recipes/smollm2-135m/eval.yaml          (make eval)

Stages are the checkpoints that exist: base (the untrained model), sft, rl, rl_nolen
(runs/<run_name>/<stage>/final), and sft_stop / rl_stop: the SFT / RL checkpoint with the two-sided
calibrated stop (`agent.run --answer-threshold <t> --hold-below`) whose threshold `make stop-fit`
(STAGE=rl for rl_stop) fitted on dev questions for that checkpoint
(runs/<run_name>/<sft|rl>/stop_fit.json); baselines are the base model closed-book (no tools)
and with naive RAG (top-k results for the question, one answer). Each result lands in
runs/<run_name>/<stage>/eval/<benchmark>/ with a fingerprint of what produced it (checkpoint
weights, questions, datastore, prompt, decoding, the code of the tools and the episode loop). A
result with the same fingerprint is kept; a different one (a retrained checkpoint, another limit,
a changed snippet) is run again from scratch; a run that was killed resumes. Missing stages and benchmarks are skipped with a line saying which.
A benchmark may also be a slice of one (SLICES: issue 4's goal slices, `make goals`), its questions filtered as
`agent.run --where` filters them.
"""
from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from agent.tools import DEFAULT_K
from common.errors import UserError, cli_main
from common.hardware import resolved_dtype
from common.io import atomic_write_json, config_hash, file_sha256
from common.paths import datastore_dir, runs_dir
from common.recipe import parse_recipe

# what the model sees and how its turns are read: a change here (a snippet, a parser) changes results
AGENT_CODE = ("agent/tools.py", "agent/chat.py", "agent/episode.py", "agent/backends.py", "agent/turn_cache.py",
              "datastore/retriever.py")

# name -> (questions file under runs/, datastore name); add more in a recipe's extra_benchmarks
BENCHMARKS = {
    "world_test": ("data/world/questions/test.jsonl", "world"),
    "world_test_heldout": ("data/world/questions/test_heldout.jsonl", "world"),
    "world_test_ood": ("data/world/questions/test_ood.jsonl", "world"),
    "hotpotqa_dev500": ("data/hotpotqa_dev500/questions.jsonl", "hotpotqa_dev500"),
}
# name -> (benchmark, agent.run --where filters): issue 4's goal slices, which `make goals` evaluates in
# full (recipes/<model>/goals.yaml, limit 0) and eval.goals holds against the goals
SLICES = {
    "world_test_sft_le2hop": ("world_test", ("pool=sft", "hops=1,2")),  # SFT's own distribution: goal EM 0.90
    "world_test_heldout_2hop": ("world_test_heldout", ("hops=2",)),     # reworded 2-hop: goal EM 0.50
}
TRAINED_STAGES = ("sft", "rl", "rl_nolen")
CALIBRATED_STAGES = {"sft_stop": "sft", "rl_stop": "rl"}  # stage -> the checkpoint it decodes with its dev-fitted stop
STOP_FIT = "stop_fit.json"  # in the checkpoint's stage folder, written by make stop-fit
MODES = {"base": "agent", "closed-book": "closed-book", "naive-rag": "rag"}  # stage -> how the model is run


def questions_benchmark(name: str) -> str:
    """The benchmark whose questions file a benchmark or slice reads: a slice's parent, else itself."""
    return SLICES[name][0] if name in SLICES else name


@dataclass
class EvalArguments:
    run_name: str = field(default="smollm2-135m", metadata={"help": "results go to runs/<run_name>/"})
    base_model: str = field(default="smollm2-135m", metadata={"help": "the untrained model (name, folder or hub id)"})
    stages: list[str] = field(default_factory=lambda: ["base", "sft", "sft_stop", "rl", "rl_stop", "rl_nolen"])
    baselines: list[str] = field(default_factory=lambda: ["closed-book", "naive-rag"])
    benchmarks: list[str] = field(default_factory=lambda: list(BENCHMARKS))
    extra_benchmarks: list[str] = field(default_factory=list, metadata={
        "help": "name=questions.jsonl@datastore, e.g. bamboogle=runs/data/bamboogle/questions.jsonl@wiki18"})
    limit: int = field(default=100, metadata={"help": "the first N questions of each benchmark (0: all)"})
    k: int = DEFAULT_K
    max_new_tokens: int = 256
    max_turns: int = 9
    batch_size: int = 16
    stop_release_repeats: bool = field(default=True, metadata={
        "help": "calibrated stages (sft_stop, rl_stop): a held turn that only repeats an earlier call is replaced by "
                "the model's own turn (agent.run --release-repeats; stop 54: valid calls 0.88-0.92 -> 0.96-0.98 "
                "at the same EM, two SFT seeds)"})
    dtype: str = field(default="float32", metadata={
        "help": "weights for generation: float32 (an episode does not depend on its batch mates; stop 63), fast "
                "(bfloat16 where the hardware has bf16 units, else float32: faster, but a reordered run changes some "
                "answers), auto (as saved), bfloat16"})


@dataclass
class Job:
    run_name: str
    stage: str
    benchmark: str
    model: str
    questions: Path
    datastore: str
    mode: str  # agent | closed-book | rag
    answer_threshold: float | None = None  # the calibrated two-sided stop (sft_stop, rl_stop)
    where: tuple[str, ...] = ()  # a slice's question filters (SLICES)

    @property
    def out(self) -> Path:
        return runs_dir() / self.run_name / self.stage / "eval" / self.benchmark


def benchmark_table(args: EvalArguments) -> dict[str, tuple[Path, str, tuple[str, ...]]]:
    """name -> (questions file, datastore, question filters) of every benchmark and slice a recipe can name."""
    table = {name: (runs_dir() / path, store, ()) for name, (path, store) in BENCHMARKS.items()}
    table |= {name: (*table[questions_benchmark(name)][:2], where) for name, (_, where) in SLICES.items()}
    for spec in args.extra_benchmarks:
        name, _, rest = spec.partition("=")
        path, _, store = rest.partition("@")
        if not (name and path and store):
            raise UserError(f"extra_benchmarks entry {spec!r} must look like name=questions.jsonl@datastore")
        table[name] = (Path(path), store, ())
    unknown = [name for name in args.benchmarks if name not in table]
    if unknown:
        raise UserError(f"unknown benchmark(s) {', '.join(unknown)}; known: {', '.join(table)} "
                        "(add one with extra_benchmarks: [name=questions.jsonl@datastore])")
    return table


def stage_model(args: EvalArguments, stage: str) -> str | None:
    if stage in MODES:
        return args.base_model
    final = runs_dir() / args.run_name / CALIBRATED_STAGES.get(stage, stage) / "final"
    return str(final) if (final / "config.json").exists() else None


def stage_threshold(args: EvalArguments, stage: str, model: str) -> float | str | None:
    """The calibrated stage's fitted threshold, or why it cannot run; None for every other stage."""
    from eval.stop_decisions import fitted_stop

    if stage not in CALIBRATED_STAGES:
        return None
    fit = runs_dir() / args.run_name / CALIBRATED_STAGES[stage] / STOP_FIT
    return fitted_stop(fit, model, resolved_dtype(args.dtype))


def plan(args: EvalArguments) -> list[Job]:
    """Every (stage, benchmark) that can run now; prints one line per thing skipped."""
    table = benchmark_table(args)
    jobs = []
    for stage in [s for s in (*args.stages, *args.baselines) if s]:  # `--baselines ""` runs none
        if stage not in MODES and stage not in TRAINED_STAGES and stage not in CALIBRATED_STAGES:
            raise UserError(f"unknown stage {stage!r}; stages: base, {', '.join([*TRAINED_STAGES, *CALIBRATED_STAGES])}; "
                            f"baselines: closed-book, naive-rag")
        model = stage_model(args, stage)
        if model is None:
            trained = CALIBRATED_STAGES.get(stage, stage)
            print(f"skipped stage {stage}: no checkpoint at runs/{args.run_name}/{trained}/final (make {trained.replace('_', '-')})")
            continue
        threshold = stage_threshold(args, stage, model)
        if isinstance(threshold, str):
            print(f"skipped stage {stage}: {threshold}")
            continue
        for name in args.benchmarks:
            questions, store, where = table[name]
            if not questions.is_file():
                print(f"skipped {stage} / {name}: {questions} does not exist (make data DATASET=...)")
                continue
            jobs.append(Job(args.run_name, stage, name, model, questions, store, MODES.get(stage, "agent"), threshold,
                            where))
    return jobs


def datastore_digest(name: str) -> str:
    manifest = Path(name) / "manifest.json"
    manifest = manifest if manifest.exists() else datastore_dir(name) / "manifest.json"
    return file_sha256(manifest) if manifest.exists() else name


def fingerprint(job: Job, args: EvalArguments, digests: dict) -> dict:
    from agent.models import checkpoint_digest
    from agent.prompt import RAG_PROMPT, prompt_hash

    if job.model not in digests:
        digests[job.model] = checkpoint_digest(job.model)
    if "agent code" not in digests:  # once per evaluation, not once per job
        digests["agent code"] = agent_code_hash()
    return {"model": digests[job.model], "questions": file_sha256(job.questions),
            "datastore": None if job.mode == "closed-book" else datastore_digest(job.datastore),
            "mode": job.mode, "prompt": config_hash({"agent": prompt_hash(), "rag": RAG_PROMPT}),
            "limit": args.limit, "k": args.k, "max_new_tokens": args.max_new_tokens, "max_turns": args.max_turns,
            "temperature": 0.0, "dtype": resolved_dtype(args.dtype), "agent_code": digests["agent code"],
            **({"answer_threshold": job.answer_threshold, "hold_below": True} if job.answer_threshold is not None else {}),
            **({"release_repeats": True} if releases_repeats(job, args) else {}),
            **({"where": list(job.where)} if job.where else {})}


def releases_repeats(job: Job, args: EvalArguments) -> bool:
    """Whether this job's calibrated stop releases held repeats (`stop_release_repeats`; calibrated stages only)."""
    return job.answer_threshold is not None and args.stop_release_repeats


def agent_code_hash() -> str:
    root = Path(__file__).resolve().parent.parent
    return config_hash({name: file_sha256(root / name) for name in AGENT_CODE})


def stored_fingerprint(out: Path) -> dict | None:
    path = out / "fingerprint.json"
    return json.loads(path.read_text()) if path.exists() else None


def run_job(job: Job, args: EvalArguments, digests: dict) -> str:
    """Run one (stage, benchmark) unless a finished result with the same fingerprint is there."""
    from agent.run import parse_args, run

    out, wanted = job.out, fingerprint(job, args, digests)
    stored = stored_fingerprint(out)
    if stored == wanted and (out / "metrics.json").exists():
        return "up to date"
    if stored != wanted and out.exists():  # another checkpoint, limit or prompt: start over
        shutil.rmtree(out)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_json(out / "fingerprint.json", wanted)
    argv = ["--model", job.model, "--questions", str(job.questions), "--datastore", job.datastore, "--out", str(out),
            "--k", str(args.k), "--max-new-tokens", str(args.max_new_tokens), "--max-turns", str(args.max_turns),
            "--batch-size", str(args.batch_size), "--dtype", args.dtype]
    argv += ["--limit", str(args.limit)] if args.limit else []
    argv += {"closed-book": ["--closed-book"], "rag": ["--rag"]}.get(job.mode, [])
    argv += ["--answer-threshold", str(job.answer_threshold), "--hold-below"] if job.answer_threshold is not None else []
    argv += ["--release-repeats"] if releases_repeats(job, args) else []
    argv += [arg for condition in job.where for arg in ("--where", condition)]
    run(parse_args(argv))
    return "ran"


def main(argv=None) -> None:
    (args,) = parse_recipe([EvalArguments], argv)
    jobs = plan(args)
    if not jobs:
        if not any([*args.stages, *args.baselines]):
            raise UserError("no stages or baselines selected: name some, e.g. --stages sft rl --baselines closed-book")
        raise UserError(f"nothing to evaluate for runs/{args.run_name}: train a stage (make sft) or build the "
                        "questions (make data)")
    digests: dict = {}
    for number, job in enumerate(jobs, 1):
        print(f"[{number}/{len(jobs)}] {job.stage} / {job.benchmark} ({job.mode}, {job.model})")
        print(f"  {run_job(job, args, digests)}")


if __name__ == "__main__":
    cli_main(main)
