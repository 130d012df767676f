"""jaxgen benchmarks: one module per paper claim; run with ``python -m benchmarks``."""
