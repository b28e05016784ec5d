"""The RL environment: the agent's search tools for one rollout, as TRL's GRPOTrainer drives them.

    GRPOTrainer(..., environment_factory=lambda: SearchEnvironment(retriever, k=3, max_tool_calls=8))

TRL makes one instance per rollout (pooled and reused), calls `reset(**row)` with the dataset row
before the rollout, and exposes the public methods `search`, `open`, `find` as tools: their type
hints and docstrings are the schema in the prompt, the same as `agent.tools.SearchTools` (a test
checks the rendered prompts are identical), so SFT, RL and evaluation show the model one task.

It wraps a `SearchTools` rather than re-implementing it: every call goes through
`SearchTools._call`, which logs it and turns any failure into an error string for the model, and
calls past the prompt's budget are refused the way `agent.episode` refuses them. Other bad calls
never reach this object: a call to an unknown tool or with wrong arguments gets TRL's error reply
({'error': ...}, counted in `tools/failure_frequency`), and one TRL cannot parse stays in the
assistant text and ends the rollout; rl.rewards.episode_view counts both from the messages.
"""
from __future__ import annotations

from agent.tools import DEFAULT_K, SearchTools, ToolLog


class SearchEnvironment:
    """One rollout's tools, the question row it answers, and what it did (calls, documents seen)."""

    def __init__(self, retriever, k: int = DEFAULT_K, method: str | None = None, max_tool_calls: int = 8):
        self._tools = SearchTools(retriever, k=k, method=method)
        self._max_tool_calls = max_tool_calls
        self.row: dict = {}
        self.budget_refusals = 0

    def reset(self, **row) -> None:
        """Start a rollout for one dataset row (answers, gold ids...); adds nothing to the prompt."""
        self.row = row
        self.budget_refusals = 0
        self._tools.log = ToolLog()
        return None

    # ---- the tools (same signatures and docstrings as agent.tools.SearchTools) ---------------
    def search(self, query: str) -> str:
        return self._run("search", {"query": query})

    def open(self, doc_id: str, page: int = 1) -> str:
        return self._run("open", {"doc_id": doc_id, "page": page})

    def find(self, doc_id: str, text: str) -> str:
        return self._run("find", {"doc_id": doc_id, "text": text})

    search.__doc__ = SearchTools.search.__doc__
    open.__doc__ = SearchTools.open.__doc__
    find.__doc__ = SearchTools.find.__doc__

    # ---- state read by rewards and health metrics (properties: TRL exposes only methods) ------
    @property
    def log(self) -> ToolLog:
        return self._tools.log

    @property
    def answers(self) -> list[str]:
        return list(self.row.get("answers") or [])

    @property
    def gold_doc_ids(self) -> list[str]:
        return list(self.row.get("gold_doc_ids") or [])

    @property
    def documents_seen(self) -> list[str]:
        """Doc ids shown in search results or opened, first occurrence order."""
        return list(dict.fromkeys(self.log.retrieved + self.log.opened))

    def _run(self, name: str, arguments: dict) -> str:
        if self.log.n_calls >= self._max_tool_calls:
            self.budget_refusals += 1
            return self._tools._refuse(f"the budget of {self._max_tool_calls} tool calls is used up; answer now")
        return self._tools._call(name, arguments)
