"""The agent's tools: search, open, find, over one retrieval interface (in-process or HTTP).

`SearchTools` is also a TRL environment: GRPOTrainer's `environment_factory` makes one per
rollout, exposes its public methods (their type hints and docstrings become the tool schema in
the chat template) and calls `reset` between rollouts. It records what the episode did (calls,
documents seen) for metrics and rewards. A bad call never raises: it returns an error string
for the model to read and is counted. So does a call repeated with the same arguments: its result
could only be the one already in the context, and greedy small models loop on it (stop 15: 15 of 40
SFT test episodes spent their budget repeating one `find`).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from datastore.retriever import RetrievalError


@dataclass
class ToolLog:
    calls: list[dict] = field(default_factory=list)  # {"name", "arguments", "ok"} (+ "repeat": True)
    retrieved: list[str] = field(default_factory=list)  # doc ids shown in search results, in order
    opened: list[str] = field(default_factory=list)

    @property
    def n_calls(self) -> int:
        return len(self.calls)

    @property
    def n_valid(self) -> int:
        return sum(call["ok"] for call in self.calls)

    @property
    def n_repeated(self) -> int:
        return sum(bool(call.get("repeat")) for call in self.calls)

    def made(self, name: str, arguments: dict) -> bool:
        return any(call["name"] == name and call["arguments"] == arguments for call in self.calls)


# Hits per search, as the agent sees them (Search-R1's default too): every hit costs the policy
# ~30 tokens of context in every later turn, and the oracle trajectories reformulate when the
# page they need is not in the top 3.
DEFAULT_K = 3


class SearchTools:
    """Tools over a retriever with `search_batch/open/find` (datastore.Datastore or RetrievalClient)."""

    def __init__(self, retriever, k: int = DEFAULT_K, method: str | None = None):
        self._retriever, self._k, self._method = retriever, k, method
        self.log = ToolLog()

    def reset(self, **kwargs) -> None:
        """Start a new episode (TRL passes the dataset row's fields; nothing is added to the prompt)."""
        self.log = ToolLog()

    def search(self, query: str) -> str:
        """Search the documents. Returns one line per hit: [doc_id] title: snippet.

        Args:
            query: Words to search for, such as a name.
        """
        hits = self._retriever.search(query, self._k, self._method)
        self.log.retrieved.extend(hit.doc_id for hit in hits)
        if not hits:
            return "No documents matched. Try other words, such as a full name."
        return "\n".join(f"[{hit.doc_id}] {hit.title}: {hit.snippet}" for hit in hits)

    def open(self, doc_id: str, page: int = 1) -> str:
        """Read a document, one page at a time.

        Args:
            doc_id: A document id from the search results.
            page: The page number, from 1.
        """
        text = self._retriever.open(doc_id, page)
        self.log.opened.append(doc_id)
        return text

    def find(self, doc_id: str, text: str) -> str:
        """Find the two sentences of a document that best match some words: those containing them, else the closest in meaning.

        Args:
            doc_id: A document id from the search results.
            text: The words to look for, such as what you need to know.
        """
        lines = self._retriever.find(doc_id, text)
        self.log.opened.append(doc_id)
        return "\n".join(lines) if lines else f"No sentence of [{doc_id}] matches {text!r}."

    def _call(self, name: str, arguments: dict) -> str:
        """Run one parsed call; any failure becomes a message for the model, never an exception."""
        if self.log.made(name, arguments):
            self.log.calls.append({"name": name, "arguments": arguments, "ok": False, "repeat": True})
            return (f"Error: you already called {name} with these arguments; its result is above. "
                    "Answer from it, or call a tool with other arguments.")
        try:
            result = getattr(self, name)(**arguments)
            ok = True
        except RetrievalError as exc:
            result, ok = f"Error: {exc}", False
        except Exception as exc:  # a tool must not end the episode (or an RL step)
            result, ok = f"Error: {name} failed ({type(exc).__name__}: {exc})", False
        self.log.calls.append({"name": name, "arguments": arguments, "ok": ok})
        return result

    def _refuse(self, reason: str) -> str:
        """Count a call that could not be parsed; return what the model will read."""
        self.log.calls.append({"name": None, "arguments": None, "ok": False})
        return f"Error: {reason}"


TOOL_NAMES = ("search", "open", "find")


def tool_functions(tools: SearchTools) -> list:
    """The bound methods handed to the chat template (and to TRL): their schema is the tool spec."""
    return [getattr(tools, name) for name in TOOL_NAMES]


def tool_specs() -> dict[str, dict]:
    """{name: {"required": [...], "types": {arg: json type}}} from the methods' own schema."""
    from transformers.utils import get_json_schema

    specs = {}
    for name in TOOL_NAMES:
        params = get_json_schema(getattr(SearchTools, name))["function"]["parameters"]
        types = {arg: prop["type"] for arg, prop in params["properties"].items()}
        specs[name] = {"required": params.get("required", []), "types": types}
    return specs
