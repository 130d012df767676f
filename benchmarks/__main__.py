"""Command line of the benchmark harness (see docs/concepts/benchmarks.md)."""

from ._harness import main

if __name__ == "__main__":
    raise SystemExit(main())
