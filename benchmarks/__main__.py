"""Command line of the benchmark harness (see BENCHMARKS.md)."""

from ._harness import main

if __name__ == "__main__":
    raise SystemExit(main())
