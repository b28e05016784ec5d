"""Chat templates with tools, and parsing the model's tool calls back out of its text.

SmolLM2 (and the `tiny` test model built on its tokenizer) ships a ChatML template without tool
support. We give it TRL's Qwen2.5 template, which is ChatML plus hermes-style tool calls:

    <tool_call>
    {"name": "search", "arguments": {"query": "..."}}
    </tool_call>

with one change: the tool list in the system turn is one line per tool, `- open(doc_id: string,
page?: integer): Read a document, one page at a time.`, instead of Qwen's preamble and full JSON
schemas. That block was 420 of the ~1,190 tokens of an average SFT trajectory, repeated in every
example and every RL rollout; a 135M model learns the tools from the trajectories, not from a
schema. Everything else (turns, tool calls, tool responses) is TRL's text, so TRL's training
variant (with `{% generation %}` markers for assistant-only loss) and its Qwen response parser
for GRPO's tool loop apply unchanged; `training_template` and `response_parser_template` map
the compact template to them. Models whose template already supports tools (Qwen3, Qwen3.5)
keep their native template.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from functools import cache

TOOL_CALL = re.compile(r"<tool_call>(.*?)(?:</tool_call>|$)", re.DOTALL)


_QWEN_TOOLS_BLOCK = re.compile(r'\{\{- "\\n\\n# Tools.*?</tool_call><\|im_end\|>\\n" \}\}', re.DOTALL)
_COMPACT_TOOLS_BLOCK = r"""{{- "\n\nTools, called as <tool_call>\n{\"name\": ..., \"arguments\": {...}}\n</tool_call>:" }}
    {%- for tool in tools %}
        {%- set fn = tool.function if tool.function is defined else tool %}
        {%- set required = fn.parameters.required or [] %}
        {{- "\n- " + fn.name + "(" }}
        {%- for arg, spec in fn.parameters.properties.items() %}
            {{- (", " if not loop.first else "") + arg + ("" if arg in required else "?") + ": " + spec.type }}
        {%- endfor %}
        {{- "): " + fn.description }}
    {%- endfor %}
    {{- "<|im_end|>\n" }}"""


def _compact(qwen_template: str) -> str:
    compact, n = _QWEN_TOOLS_BLOCK.subn(lambda _: _COMPACT_TOOLS_BLOCK, qwen_template)
    if n != 1:  # a TRL release changed its Qwen2.5 template: fail here, not with a silently verbose prompt
        raise RuntimeError("TRL's Qwen2.5 chat template no longer has the expected tools block; update agent/chat.py")
    return compact


@cache  # derived once from TRL's constant; compared against on every tokenizer lookup
def tool_chat_template(training: bool = False) -> str:
    """The compact ChatML tool template; `training=True`: its variant with generation markers."""
    from trl.chat_template_utils import qwen2_5_chat_template, qwen2_5_training_chat_template

    return _compact(qwen2_5_training_chat_template if training else qwen2_5_chat_template)


def training_template(tokenizer) -> str:
    """The tokenizer's template with `{% generation %}` markers (for assistant-only loss masks);
    its own template when TRL ships no variant (it may carry the markers already)."""
    from trl.chat_template_utils import get_training_chat_template

    if tokenizer.chat_template == tool_chat_template():
        return tool_chat_template(training=True)
    return get_training_chat_template(tokenizer) or tokenizer.chat_template


def response_parser_template(template: str) -> str:
    """The TRL-known template whose tool-call parser fits `template` (itself when TRL knows it)."""
    import trl.chat_template_utils as ctu

    if template in (tool_chat_template(), tool_chat_template(training=True)):
        return ctu.qwen2_5_chat_template
    natives = {getattr(ctu, name): getattr(ctu, name.replace("_training_chat_template", "_chat_template"), None)
               for name in dir(ctu) if name.endswith("_training_chat_template")}
    return natives.get(template) or template


def prepare_tokenizer(tokenizer):
    """Give a tool-less ChatML tokenizer the tool template; left-pad for batched generation.

    A native template that is not prefix-preserving (Qwen3 drops earlier turns' <think> blocks)
    is swapped for TRL's training variant, which renders every turn the same way at every step,
    so the agent's multi-turn prompts, SFT data and RL rollouts are token-for-token consistent.
    """
    from trl.chat_template_utils import get_training_chat_template, is_chat_template_prefix_preserving, supports_tool_calling

    if not tokenizer.chat_template or not supports_tool_calling(tokenizer):
        tokenizer.chat_template = tool_chat_template()
    elif not is_chat_template_prefix_preserving(tokenizer):
        tokenizer.chat_template = get_training_chat_template(tokenizer) or tokenizer.chat_template
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    return tokenizer


@dataclass
class ParsedTurn:
    """One assistant turn: its free text, the well-formed tool calls, and why others were refused."""
    content: str
    tool_calls: list[dict] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    @property
    def has_tool_syntax(self) -> bool:
        return bool(self.tool_calls or self.errors)


def parse_assistant(text: str, tool_specs: dict[str, dict]) -> ParsedTurn:
    """Split generated text into content and hermes tool calls, validating each call.

    `tool_specs` maps tool name -> {"required": [...], "types": {arg: "string"|"integer"}} (see
    agent.tools.tool_specs). A malformed call (bad JSON, unknown tool, wrong or missing arguments)
    is not executed; its reason goes back to the model as the tool's reply.
    """
    first = text.find("<tool_call>")
    content = (text if first < 0 else text[:first]).strip()
    turn = ParsedTurn(content=content)
    for block in TOOL_CALL.findall(text[first:] if first >= 0 else ""):
        call, error = _parse_call(block.strip(), tool_specs)
        if error:
            turn.errors.append(error)
        else:
            turn.tool_calls.append(call)
    return turn


def _parse_call(block: str, tool_specs: dict[str, dict]) -> tuple[dict | None, str | None]:
    try:
        payload = json.loads(block)
    except json.JSONDecodeError as exc:
        return None, f"the tool call is not valid JSON ({exc.msg}); write {{\"name\": ..., \"arguments\": {{...}}}}"
    if not isinstance(payload, dict) or not isinstance(payload.get("name"), str):
        return None, 'the tool call needs a "name" and an "arguments" object'
    name, arguments = payload["name"], payload.get("arguments", {})
    if isinstance(arguments, str):  # some models double-encode the arguments
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError:
            return None, f"the arguments of {name} are not a JSON object"
    if name not in tool_specs:
        return None, f"unknown tool {name!r}; the tools are {', '.join(sorted(tool_specs))}"
    if not isinstance(arguments, dict):
        return None, f"the arguments of {name} must be a JSON object"
    error = _check_arguments(name, arguments, tool_specs[name])
    if error:
        return None, error
    return {"type": "function", "function": {"name": name, "arguments": arguments}}, None


def _check_arguments(name: str, arguments: dict, spec: dict) -> str | None:
    missing = [arg for arg in spec["required"] if arg not in arguments]
    if missing:
        return f"{name} needs the argument(s) {', '.join(missing)}"
    unknown = [arg for arg in arguments if arg not in spec["types"]]
    if unknown:
        return f"{name} takes no argument(s) {', '.join(unknown)}; it takes {', '.join(spec['types'])}"
    for arg, value in arguments.items():
        want = spec["types"][arg]
        ok = isinstance(value, str) if want == "string" else isinstance(value, int) and not isinstance(value, bool)
        if not ok:
            return f"argument {arg} of {name} must be a {want}"
    return None


def render_tool_call(call: dict) -> str:
    """The hermes text of one call, as the template renders it (for tests and teacher traces)."""
    function = call["function"]
    return "<tool_call>\n" + json.dumps({"name": function["name"], "arguments": function["arguments"]}) + "\n</tool_call>"
