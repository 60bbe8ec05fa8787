"""Before and after, side by side: the rows of two ``BENCH_RESULTS`` files of ``bench/run.py``.

    BENCH_RESULTS=after.json make bench
    .venv/bin/python bench/compare.py bench/results/before-e9fde4c.json after.json

Prints one Markdown table (for docs/performance.md): per row of the "after" run, its target, the
ratio (with the medians it compares: subject / baseline) or the value, before and after, and whether
the target is met after. Rows are matched by
scenario and name; a row only one file has is shown with "-" on the other side.
"""

import json
import sys


def figure(row: dict) -> float | None:
    return row["ratio"] if row["baseline"] is not None else row["median"]


def shown(row: dict | None) -> str:
    if row is None:
        return "-"
    value = figure(row)
    if value is None:  # every round above twice the cores (bench/harness.py, COMPARABLE_LOAD)
        return "not comparable"
    text = f"{value:.3g}"
    if row["baseline"] is not None:
        text += f" ({row['median']:.3g} / {row['baseline']['median']:.3g})"
    else:
        text += f" {row['unit']}"
    return text


def main(before_path: str, after_path: str) -> None:
    before, after = (json.loads(open(path).read()) for path in (before_path, after_path))
    old = {(row["scenario"], row["name"]): row for row in before["rows"]}
    print(
        f"before: {before['machine'].get('revision')} ({before['machine'].get('date')}); "
        f"after: {after['machine'].get('revision')} ({after['machine'].get('date')})\n"
    )
    print("| # | measure | target | before | after | met after? |")
    print("|---|---|---|---|---|---|")
    seen = set()
    for row in after["rows"]:
        key = (row["scenario"], row["name"])
        seen.add(key)
        print(
            f"| {row['scenario']} | {row['name']} | {row['target']} | {shown(old.get(key))} | {shown(row)} "
            f"| {row['met']} |"
        )
    for key, row in old.items():
        if key not in seen:
            print(f"| {row['scenario']} | {row['name']} | {row['target']} | {shown(row)} | - | - |")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
