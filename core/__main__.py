"""``python -m torchkiln backends``: what is registered and whether it runs here;
``python -m torchkiln build-native``: build the C++ guard checks now."""

from __future__ import annotations

import argparse
import sys

from torchkiln.registry import backend_status, list_backends, lookup_backend, plugin_failures


def backends_table() -> str:
    """One row per registered backend: name, tags, usable here (or why not), description."""
    rows = [("name", "tags", "usable here", "description")]
    for name in list_backends(exclude_tags=()):
        backend = lookup_backend(name)
        status = backend_status(backend)
        rows.append(
            (
                name,
                ",".join(backend.tags) or "-",
                "yes" if status.usable else f"no: {status.reason}",
                backend.description,
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    lines = [
        "  ".join(cell.ljust(w) for cell, w in zip(row[:3], widths)) + "  " + row[3] for row in rows
    ]
    lines.insert(1, "  ".join("-" * w for w in widths) + "  " + "-" * 11)
    failures = plugin_failures()
    if failures:
        lines.append("")
        lines.append("plugins that failed to load:")
        lines.extend(f"  {plugin}: {error}" for plugin, error in failures.items())
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m torchkiln")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("backends", help="list the backends, their tags and whether they run here")
    commands.add_parser(
        "build-native", help="build the C++ guard checks for this torch (torchkiln.capture.native)"
    )
    args = parser.parse_args(argv)
    if args.command == "backends":
        print(backends_table())
    elif args.command == "build-native":
        from torchkiln.capture import native

        print(f"built {native.build().__name__}: {native.location()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
