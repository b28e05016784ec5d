"""The agent: tools, prompt and chat template, episode loop, answer parsing, model loading."""
