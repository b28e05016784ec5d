"""The system prompts: the task, the tools, the budget and the answer convention.

The same text is used by every stage (oracle trajectories, SFT, RL rollouts, evaluation, demo),
so a trajectory means the same thing everywhere. Change it and you change the task: SFT data
made with an old prompt no longer matches, which is why its hash goes into manifests.
"""
import hashlib

SEARCH_PROMPT = """Answer the question by searching the documents: you do not know the people, \
places and things they describe. Search for one entity at a time by its name; what one search \
finds tells you what to search next. Open a document, or find words in it, when a snippet is not \
enough. Before each tool call, write one short sentence saying what you need. You may make at \
most {max_tool_calls} tool calls. Finish with only the answer inside answer tags, for example \
<answer>1874</answer>: a name, a year, a number, or yes or no."""

CLOSED_BOOK_PROMPT = """Answer the question. Reply with only the answer inside answer tags, for \
example <answer>1874</answer>: a name, a year, a number, or yes or no."""

# naive RAG (a baseline, as in Search-R1's tables): the question's own top-k results, then one answer
RAG_PROMPT = """Answer the question using the documents below. Reply with only the answer inside \
answer tags, for example <answer>1874</answer>: a name, a year, a number, or yes or no."""


def system_prompt(max_tool_calls: int, closed_book: bool = False) -> str:
    return CLOSED_BOOK_PROMPT if closed_book else SEARCH_PROMPT.format(max_tool_calls=max_tool_calls)


def first_messages(question: str, max_tool_calls: int, closed_book: bool = False) -> list[dict]:
    return [{"role": "system", "content": system_prompt(max_tool_calls, closed_book)},
            {"role": "user", "content": question}]


def rag_messages(question: str, search_results: str) -> list[dict]:
    """One user turn holding the retrieved documents (the `search` tool's own text) and the question."""
    return [{"role": "system", "content": RAG_PROMPT},
            {"role": "user", "content": f"Documents:\n{search_results}\n\nQuestion: {question}"}]


def prompt_hash() -> str:
    """The prompts and the tool chat template given to tool-less models: what a trajectory means."""
    from agent.chat import tool_chat_template

    return hashlib.sha256((SEARCH_PROMPT + CLOSED_BOOK_PROMPT + tool_chat_template()).encode()).hexdigest()[:12]
