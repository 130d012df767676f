"""`python -m benchmarks plan`: compile-only cost of a step, the `fit` probe, PLAN.md."""

import jax.numpy as jnp
import jax.random as jr
import optax

from benchmarks import _plan
from jaxgen.core import fit, minibatches


def test_compile_row_counts_matmul_flops_and_memory_without_running():
    n, m, k = 64, 32, 48
    calls = []

    def matmul(a, b):
        calls.append(1)  # traced once, never executed as Python per call
        return a @ b

    a, b = jnp.ones((n, k), jnp.float32), jnp.ones((k, m), jnp.float32)
    row = _plan.compile_row("toy", "matmul", matmul, (a, b), count=10)
    assert row.flops == 2 * n * m * k  # XLA's count of one dot: a multiply and an add per term
    # arguments + output, float32: (n k + k m + n m) * 4 bytes, at least
    assert row.peak_bytes >= 4 * (n * k + k * m + n * m)
    assert len(calls) == 1
    h100 = _plan.ACCELERATORS["H100 80GB"]
    expected = 10 * max(row.flops / h100["flops"], row.bytes_accessed / h100["bandwidth"])
    assert row.estimate_s(h100) == expected
    assert row.mesh_needed(h100) == 1


def test_fit_probe_compiles_the_step_of_the_requested_call_and_stops(tmp_path):
    data = jnp.linspace(0.0, 1.0, 32)[:, None]

    def loss(w, batch, key):
        return jnp.mean((batch @ w - 1.0) ** 2)

    probe = _plan._fit_probe("toy", target=2)
    first = probe(
        loss, jnp.zeros((1, 3)), minibatches(data, 8), optax.sgd(0.1), num_steps=5, key=jr.key(0)
    )
    assert first.losses.shape == (5,) and float(jnp.abs(first.model).max()) == 0.0  # untrained
    try:
        probe(
            loss,
            jnp.zeros((1, 3)),
            minibatches(data, 8),
            optax.adam(1e-3),
            num_steps=7,
            key=jr.key(0),
        )
    except _plan._Planned as planned:
        row = planned.row
    else:
        raise AssertionError("the probe did not stop the run")
    assert row.params == 3 and row.count == 7 and row.flops > 0 and "loss" in row.label
    assert fit is not probe  # the real fit is untouched outside `plan_benchmark`


def test_plan_markdown_flags_a_step_that_does_not_fit(tmp_path):
    big = _plan.PlanRow("big", "step", 10**9, 1e15, 1e12, 300e9, 100, 1.0)
    small = _plan.PlanRow("small", "step", 10, 1e6, 1e6, 1e6, 5, 0.1)
    path = _plan.write_plan([big, small], {"broken": "ValueError: x"}, str(tmp_path), ["docking"])
    with open(path) as f:
        text = f.read()
    big_line = next(line for line in text.splitlines() if line.startswith("| big"))
    assert big_line.split("|")[-2].strip() == "4"  # 300 GB over 80 GB devices
    assert "| no | no |" in big_line
    assert "`broken`: ValueError: x" in text and "`docking`" in text
