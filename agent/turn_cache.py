"""Keep each episode's KV cache between turns, so a turn prefills only its new tokens.

Without it every assistant turn re-reads the whole conversation (system prompt, question, every
earlier turn and tool output) before generating; a 4-search episode re-reads ~1,500 tokens per
turn. With it a turn reads only what is new since the last one: the tool outputs, and the few
tokens where the chat template's rendering of the last turn differs from what was generated.

Correctness rests on one check: a cached entry is reused only for the longest common prefix of
its token ids and the new prompt's ids (a causal model's keys and values for a prefix do not
depend on what follows). The rest of the prompt is computed as usual. Rows are left-padded
twice, before the cached prefix and before the new tokens, and the attention mask marks both
pads; the model's position ids come from the mask, so each token keeps its position.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Entry:
    ids: list[int]  # the tokens whose keys and values are cached
    layers: list[tuple]  # per layer (keys, values), each [1, kv_heads, len(ids), head_dim]


@dataclass
class Batch:
    input_ids: object  # [B, width] tensor: pad, cached prefix, pad, new tokens
    attention_mask: object
    cache: object | None  # a DynamicCache holding the prefixes, or None when nothing is reused
    reused: list[int]  # tokens of each row taken from its cache


def common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


class TurnCache:
    """Entries beyond `max_bytes` (the longest first) are dropped and prefilled again next turn: the
    cache of SmolLM2-135M in fp32 takes 46 KB per token, so 64 episodes of 2,000 tokens hold ~6 GB."""

    def __init__(self, model_config, max_bytes: int = 4 << 30):
        self.config, self.max_bytes = model_config, max_bytes
        self.entries: dict[object, Entry] = {}
        self.prompt_tokens = self.reused_tokens = 0  # totals over all turns: the prefill saved

    def retain(self, keys) -> None:
        """Forget conversations that are no longer asked about (finished episodes)."""
        keep = set(keys)
        self.entries = {key: entry for key, entry in self.entries.items() if key in keep}

    def new_tokens(self, key, row: list[int]) -> int:
        """Tokens of `row` that a turn would have to prefill (rows are batched by this)."""
        return len(row) - self._reusable(key, row)

    def batch(self, rows: list[list[int]], keys: list, pad: int) -> Batch:
        """The rows laid out over their cached prefixes; reads the cache, never changes it (the
        calibrated stop's probe batches this way too, without being a turn)."""
        import torch

        reused = [self._reusable(key, row) for key, row in zip(keys, rows)]
        prefix = max(reused)
        new = max(len(row) - n for row, n in zip(rows, reused))
        ids, mask = [], []
        for row, n in zip(rows, reused):
            gap = new - (len(row) - n)
            ids.append([pad] * (prefix - n) + row[:n] + [pad] * gap + row[n:])
            mask.append([0] * (prefix - n) + [1] * n + [0] * gap + [1] * (len(row) - n))
        cache = self._stacked(keys, reused, prefix) if prefix else None
        return Batch(torch.tensor(ids), torch.tensor(mask), cache, reused)

    def store(self, keys: list, rows: list[list[int]], batch: Batch, generated: list[list[int]], steps: int,
              cache) -> None:
        """Keep each row's keys and values: its prompt and the generated tokens the model has read
        (all but the last of the `steps` sampled), and count the turn's prefill in the totals. A cache
        of unexpected shape is dropped, never misused."""
        import torch

        self.prompt_tokens += sum(map(len, rows))
        self.reused_tokens += sum(batch.reused)
        width = batch.input_ids.shape[1]
        layers = _layers(cache)
        if not layers or steps == 0 or any(k.shape[2] != width + steps - 1 for k, _ in layers):  # e.g. sliding windows
            for key in keys:
                self.entries.pop(key, None)
            return
        for i, (key, row, tokens) in enumerate(zip(keys, rows, generated)):
            kept = min(len(tokens), steps - 1)
            positions = torch.cat([batch.attention_mask[i].nonzero().flatten(), torch.arange(width, width + kept)])
            self.entries[key] = Entry(row + tokens[:kept], [(k[i:i + 1].index_select(2, positions),
                                                            v[i:i + 1].index_select(2, positions)) for k, v in layers])
        self._evict()

    def _evict(self) -> None:
        sizes = {key: sum(k.nbytes + v.nbytes for k, v in entry.layers) for key, entry in self.entries.items()}
        total = sum(sizes.values())
        for key in sorted(sizes, key=sizes.get, reverse=True):
            if total <= self.max_bytes:
                break
            total -= sizes[key]
            del self.entries[key]

    def _reusable(self, key, row: list[int]) -> int:
        entry = self.entries.get(key)
        if entry is None:
            return 0
        return min(common_prefix(entry.ids, row), len(row) - 1)  # generate needs >= 1 new token

    def _stacked(self, keys: list, reused: list[int], prefix: int):
        import torch
        from torch.nn.functional import pad as pad_tensor
        from transformers import DynamicCache

        cache = DynamicCache(config=self.config)
        some = next(self.entries[key] for key, n in zip(keys, reused) if n)
        for layer, (k0, v0) in enumerate(some.layers):
            ks, vs = [], []
            for key, n in zip(keys, reused):
                if n:
                    k, v = self.entries[key].layers[layer]
                    k, v = k[:, :, :n], v[:, :, :n]
                else:
                    k, v = k0[:, :, :0], v0[:, :, :0]
                ks.append(pad_tensor(k, (0, 0, prefix - n, 0)))
                vs.append(pad_tensor(v, (0, 0, prefix - n, 0)))
            cache.update(torch.cat(ks), torch.cat(vs), layer)
        return cache


def generate_kwarg() -> str:
    """The name under which `generate` (and a model's forward) takes a cache: `cache` since
    transformers 5.x, before it `past_key_values` (still accepted, with a deprecation warning)."""
    from transformers.generation.utils import GenerateDecoderOnlyOutput

    return "cache" if "cache" in GenerateDecoderOnlyOutput.__dataclass_fields__ else "past_key_values"


def _layers(cache) -> list[tuple]:
    """(keys, values) per layer, for transformers' layered caches (4.56+); [] for anything else."""
    layers = getattr(cache, "layers", None)
    if not layers or any(getattr(layer, "keys", None) is None for layer in layers):
        return []
    return [(layer.keys, layer.values) for layer in layers]
