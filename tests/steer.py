"""Test helper: make a model write a given tag wherever it can, to exercise the calibrated stop."""
from contextlib import contextmanager


@contextmanager
def writes_tag(model, tag: list[int]):
    """While active, `model`'s logits favour the tag's next token after each tag token and its first
    token everywhere else, so greedy decoding opens every turn with the tag (P < 1, though)."""
    import torch

    def hook(module, args, kwargs, output):
        ids = kwargs.get("input_ids", args[0] if args else None)[:, -output.logits.shape[1]:]
        target = torch.full_like(ids, tag[0])
        for before, after in zip(tag, tag[1:]):
            target[ids == before] = after
        output.logits = output.logits.scatter_add(-1, target[..., None], torch.full_like(output.logits[..., :1], 10.0))
        return output

    handle = model.register_forward_hook(hook, with_kwargs=True)
    try:
        yield model
    finally:
        handle.remove()
