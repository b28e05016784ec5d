"""Run the prompt that every trajectory in a batch shares once, not once per row.

Every SFT trajectory opens with the same system prompt and tool list (~245 tokens of ~740 with the
default recipe), none of it trained on. The decoder runs that common prefix for one row, repeats
its keys and values across the batch, and runs only the rest of each row against them. The loss
and gradients are those of the full batch (the prefix's gradients arrive summed over the rows,
which is what the full batch gives them); only the repeated work goes. With dropout (LoRA's
lora_dropout, say) the rows share the prefix's dropout mask, so there they agree in expectation only.
"""
from __future__ import annotations

def common_prefix_length(input_ids, attention_mask=None) -> int:
    """Number of leading positions where every row has the same token and none is padding."""
    same = (input_ids == input_ids[:1]).all(dim=0)
    if attention_mask is not None:
        same &= attention_mask.bool().all(dim=0)
    return int(same.long().cumprod(dim=0).sum())


def decoder_hidden(decoder, input_ids, attention_mask=None, share_prefix: bool = True):
    """Last hidden states of the whole batch, [batch, length, hidden]. With share_prefix and a
    common prefix of at least one token (and something after it), that prefix is run once."""
    rows, length = input_ids.shape
    prefix = min(common_prefix_length(input_ids, attention_mask), length - 1) if share_prefix and rows > 1 else 0
    if prefix < 1:
        return decoder(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).last_hidden_state
    import torch

    from agent.turn_cache import generate_kwarg

    head = decoder(input_ids=input_ids[:1, :prefix], use_cache=True)
    cache = getattr(head, "cache", None)
    cache = cache if cache is not None else getattr(head, "past_key_values", None)
    if cache is None:
        raise RuntimeError("the decoder returned no KV cache for the shared prompt (gradient checkpointing turns it "
                           "off in training); run with share_prefix=False or without gradient checkpointing")
    cache.batch_repeat_interleave(rows)
    positions = torch.arange(prefix, length, device=input_ids.device).unsqueeze(0).expand(rows, -1)
    tail = decoder(input_ids=input_ids[:, prefix:], attention_mask=attention_mask, position_ids=positions,
                   use_cache=True, **{generate_kwarg(): cache}).last_hidden_state
    return torch.cat([head.last_hidden_state.expand(rows, -1, -1), tail], dim=1)

