"""Data: the synthetic world, question and trajectory synthesis, real-set readers."""
