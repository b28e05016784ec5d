"""Recipes: YAML files read by TRL's TrlParser (YAML values, command-line overrides).

TrlParser already refuses unknown keys; it does not check the types of YAML values (argparse
only converts command-line strings), so a recipe with `learning_rate: "fast"` would fail deep
inside training. `parse_recipe` checks each YAML value against its dataclass field first and
turns both problems into one line naming the key.
"""
from __future__ import annotations

import dataclasses
import sys
import types
import typing
from pathlib import Path

import yaml

from common.errors import UserError

_SIMPLE = {int: (int,), float: (int, float), str: (str,), bool: (bool,)}


def _allowed(annotation) -> tuple | None:
    """The Python types a YAML value may have for a field, or None when we cannot tell."""
    if isinstance(annotation, str):
        return None
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        parts = [_allowed(arg) for arg in typing.get_args(annotation)]
        if any(part is None for part in parts):
            return None
        return tuple(t for part in parts for t in part)
    if annotation is type(None):
        return (type(None),)
    if origin in (list, tuple):
        return (list,)
    if origin is dict or annotation is dict:
        return (dict, str)
    return _SIMPLE.get(annotation)


def check_types(config: dict, dataclass_types, path: str) -> None:
    hints = {}
    for cls in dataclass_types:
        resolved = typing.get_type_hints(cls)
        hints.update({f.name: resolved.get(f.name) for f in dataclasses.fields(cls)})
    unknown = [key for key in config if key not in hints and key != "env"]
    if unknown:
        raise UserError(f"{path}: unknown key(s) {', '.join(unknown)}; see the recipe's header for the valid keys")
    for key, value in config.items():
        allowed = _allowed(hints.get(key)) if key in hints else None
        if allowed is None:
            continue
        wrong = bool not in allowed if isinstance(value, bool) else not isinstance(value, allowed)
        if wrong:  # (bool is an int to isinstance, hence the separate check)
            names = "/".join(sorted({t.__name__ for t in allowed}))
            raise UserError(f"{path}: key {key} must be {names}, got {type(value).__name__} {value!r}")


def parse_recipe(dataclass_types, argv=None):
    """TrlParser over `dataclass_types`, with the YAML's keys and types checked first."""
    from trl import TrlParser

    args = list(argv) if argv is not None else sys.argv[1:]
    if "--config" in args:
        path = args[args.index("--config") + 1]
        if not Path(path).is_file():
            raise UserError(f"recipe {path} does not exist; recipes live in recipes/<model>/")
        config = yaml.safe_load(Path(path).read_text()) or {}
        if not isinstance(config, dict):
            raise UserError(f"{path}: a recipe is a YAML mapping of key: value")
        check_types(config, dataclass_types, path)
    try:
        return TrlParser(dataclass_types).parse_args_and_config(args)
    except ValueError as exc:
        raise UserError(f"bad recipe or argument: {exc}") from None


def parse_training_recipe(dataclass_types, argv=None):
    """parse_recipe for a training stage whose script arguments (the first dataclass) have `cpu_bf16`:
    bf16 only where the hardware has it (common/hardware.py). Parsed again with `--bf16 false`
    rather than patched, because TrainingArguments derives its mixed-precision mode when built."""
    from common.hardware import fp32_instead_of_bf16

    parsed = parse_recipe(dataclass_types, argv)
    if fp32_instead_of_bf16(parsed[1], parsed[0].cpu_bf16):
        args = list(argv) if argv is not None else sys.argv[1:]
        parsed = parse_recipe(dataclass_types, [*args, "--bf16", "false"])
    return parsed
