"""Evaluation: answer metrics (HotpotQA-official EM/F1), benchmark runs, tables and plots."""
