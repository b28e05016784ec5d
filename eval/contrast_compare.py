"""The evidence probe pooled over its sets with 95% intervals, and one checkpoint paired with another.

    python -m eval.contrast_compare runs/diagnostics/dev/contrast_new.json \
        --against runs/diagnostics/dev/contrast_sft.json

Reads the JSON reports that `python -m eval.evidence_contrast ... --out` writes. Each report holds
one summary per set of dev pairs; the figure compared across checkpoints is the share of all its
pairs whose first token follows the evidence, with a bootstrap interval over pairs, and the same
share paired with another checkpoint's report on the pairs both read (a pair both checkpoints
decide alike adds no noise to the difference). Also the stop's dependence on the evidence:
P(answer) after the shown output minus after the hidden one, over the pairs where the oracle answers.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from common.errors import UserError, cli_main
from eval.stats import mean_and_ci, mean_difference, paired_bootstrap


def read_report(path: str) -> dict[tuple[str, str], dict]:
    """{(set file name, pair id): probe row} of one report."""
    try:
        sets = json.loads(Path(path).read_text())["sets"]
    except (OSError, ValueError, KeyError) as error:
        raise UserError(f"{path}: not an eval.evidence_contrast report ({error}); write one with "
                        "`python -m eval.evidence_contrast ... --out FILE`") from None
    return {(Path(name).name, row["id"]): row for name, found in sets.items() for row in found["rows"]}


def follows(row: dict) -> float | None:
    """1 where the first token prefers searching again more after the hidden output, 0.5 on a tie."""
    shift = row.get("first_shift")
    return None if shift is None else (shift > 0) + 0.5 * (shift == 0)


def answer_gap(row: dict) -> float | None:
    return row["p_answer_shown"] - row["p_answer_hidden"] if "p_answer_shown" in row else None


# what the comparison reads off each probe row (None where the row does not carry it)
QUANTITIES = (("first_token_follows_evidence", follows), ("p_answer_shown_minus_hidden", answer_gap))


def pooled(rows: dict) -> dict:
    """Both quantities over every pair of a report: [mean, [low, high]] and the number of pairs."""
    out = {}
    for name, read in QUANTITIES:
        values = [v for v in map(read, rows.values()) if v is not None]
        out[name] = {"n": len(values), "mean_ci": list(mean_and_ci(values))}
    return out


def paired(rows: dict, base: dict) -> dict:
    """Each quantity on the pairs both reports read: base -> new, difference [low, high]."""
    out = {}
    for name, read in QUANTITIES:
        both = [(read(rows[key]), read(base[key])) for key in sorted(rows.keys() & base.keys())]
        both = [(new, old) for new, old in both if new is not None and old is not None]
        if not both:
            continue
        new, old = zip(*both)
        difference, interval = paired_bootstrap(new, old, mean_difference)
        out[name] = {"n": len(both), "base": round(sum(old) / len(old), 3), "new": round(sum(new) / len(new), 3),
                     "difference": round(difference, 3), "ci": [round(x, 3) for x in interval]}
    return out


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("reports", nargs="+", help="eval.evidence_contrast reports (--out files)")
    parser.add_argument("--against", help="a base checkpoint's report to pair each report with")
    args = parser.parse_args(argv)
    base = read_report(args.against) if args.against else None
    for path in args.reports:
        rows = read_report(path)
        result = {"report": path, "pooled": pooled(rows)}
        if base is not None:
            result["against"] = {"report": args.against, **paired(rows, base)}
            if "first_token_follows_evidence" not in result["against"]:
                raise UserError(f"{path} and {args.against} share no probe pairs: run both on the same --trajectories")
        print(json.dumps(result))


if __name__ == "__main__":
    cli_main(main)
