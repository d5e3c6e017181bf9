"""Rules of the source tree that would otherwise break silently."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# ARCHITECTURE.md, "What we build and what we stand on": importing or calling
# these is forbidden in product code (naming them in a string or docstring is not).
FORBIDDEN = re.compile(
    r"(from|import)\s+torch\.(_dynamo|_inductor|export|jit)\b"
    r"|(from|import)\s+torch\._functorch\.(aot_autograd|partitioners|compile)\b"
    r"|\btorch\.(_dynamo|_inductor|export|jit)\.\w+\s*\("
    r"|\btorch\.compile\s*\("
)


def test_test_module_names_are_unique():
    """pytest imports test files by basename (no __init__.py), so two equal names collide."""
    names = Counter(
        p.name for p in (ROOT / "tests").rglob("test_*.py") if "fixtures" not in p.parts
    )
    assert [name for name, count in names.items() if count > 1] == []


def test_product_code_does_not_use_torchs_compiler_stack():
    offenders = []
    for folder in ("core", "plugins"):
        for path in (ROOT / folder).rglob("*.py"):
            for number, line in enumerate(path.read_text().splitlines(), 1):
                if FORBIDDEN.search(line) and not line.lstrip().startswith("#"):
                    offenders.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert offenders == []
