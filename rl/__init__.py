"""RL stage: GRPO with the search tools as TRL's environment, a reward registry and health logging."""
