"""Print the tables of a results JSON again: ``python -m benchmarks.show out.json``.

For a run that was cut short (its JSON is rewritten after every row), and
for pasting a GPU run's tables into benchmarks/README.md.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from benchmarks.results import Row
from benchmarks.tables import render


def main(argv: list[str] | None = None) -> int:
    args = argv if argv is not None else sys.argv[1:]
    if len(args) != 1:
        raise SystemExit("usage: python -m benchmarks.show RESULTS.json")
    document = json.loads(Path(args[0]).read_text())
    rows = [Row(**r) for r in document["rows"]]
    print(render(document["meta"], rows, document))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
