"""Scaling: data parallelism over two `jax.distributed` CPU processes (gloo collectives, two
host devices each), process-local sampling, process-0 checkpoints, and FSDP parameter sharding of
the language-model core."""

import os
import signal
import socket
import subprocess
import sys
import time

import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import optax
import pytest
from jax.sharding import AbstractMesh, PartitionSpec

from jaxgen.core import data_mesh, fit, fsdp_rule, sharded_minibatches
from tests.core import multiprocess_fit as mp

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(num_processes, devices_per_process, *args):
    """Start ``python -m tests.core.multiprocess_fit ARGS`` once per process, as a launcher
    (``srun``, ``mpirun``) would: same command, per-process environment."""
    port = free_port()
    procs = []
    for i in range(num_processes):
        env = dict(
            os.environ,
            JAX_PLATFORMS="cpu",
            PYTHONPATH=ROOT,
            XLA_FLAGS=f"{os.environ.get('XLA_FLAGS', '')} "
            f"--xla_force_host_platform_device_count={devices_per_process}",
        )
        if num_processes > 1:
            env.update(
                JAX_COORDINATOR_ADDRESS=f"127.0.0.1:{port}",
                JAX_NUM_PROCESSES=str(num_processes),
                JAX_PROCESS_ID=str(i),
            )
        cmd = [sys.executable, "-m", "tests.core.multiprocess_fit", *map(str, args)]
        procs.append(
            subprocess.Popen(
                cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=ROOT
            )
        )
    return procs


def finish(procs, timeout=300):
    outs = []
    try:
        for p in procs:
            out, _ = p.communicate(timeout=timeout)
            outs.append(out)
            assert p.returncode == 0, out[-3000:]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.communicate()
    return outs


def load(path):
    with np.load(path) as f:
        return {k: f[k] for k in f.files}


def assert_same_run(a, b, prefix_a="", prefix_b="", what=""):
    keys = [k[len(prefix_a) :] for k in a if k.startswith(prefix_a)]
    assert "losses" in keys and len(keys) > 1
    for k in keys:
        np.testing.assert_allclose(a[prefix_a + k], b[prefix_b + k], rtol=1e-5, atol=1e-7,
                                   err_msg=f"{what}: {k}")  # fmt: skip


def lines(out, tag):
    return [line.split()[1:] for line in out.splitlines() if line.startswith(tag + " ")]


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """One process with 4 host devices: the run on a 4-device mesh and on one device, and
    the FSDP-sharded transformer."""
    out = tmp_path_factory.mktemp("reference") / "ref.npz"
    finish(launch(1, 4, out))
    return load(out)


def test_sharded_minibatches_mesh_equals_one_device(reference):
    """Fast twin of the two-process test: the per-device draws of `sharded_minibatches`
    and the data-parallel `fit` on 4 host devices equal the one-device run."""
    assert reference["one_losses"].shape == (mp.NUM_STEPS,)
    losses = reference["one_losses"]
    assert losses[-5:].mean() < 0.5 * losses[:5].mean()  # it trains
    assert_same_run(reference, reference, "mesh_", "one_", "4-device mesh vs one device")


@pytest.mark.slow
def test_two_processes_equal_one_process_and_resume_after_a_kill(reference, tmp_path):
    # Uninterrupted: 2 processes x 2 devices, each feeding its own rows.
    ckpt = tmp_path / "ckpt"
    outs = finish(launch(2, 2, tmp_path / "two.npz", ckpt))
    two = load(tmp_path / "two.npz")
    assert_same_run(two, reference, "", "mesh_", "2 processes vs 1 process with 4 devices")
    assert_same_run(two, reference, "", "one_", "2 processes vs one device")
    saved = [s for out in outs for s in lines(out, "SAVED")]
    assert saved == [["0", "10"], ["0", "20"], ["0", "30"]], saved  # process 0 writes, alone
    assert sorted(os.listdir(ckpt)) == ["step_00000020", "step_00000030"]
    assert sorted(os.listdir(ckpt / "step_00000030")) == ["meta.json", "state.eqx"]
    # Killed (both processes, SIGKILL) after the step-10 checkpoint, then restarted.
    ckpt = tmp_path / "killed"
    procs = launch(2, 2, tmp_path / "killed.npz", ckpt)
    try:
        for line in procs[0].stdout:
            if line.startswith("STEP 0 10"):
                break
        else:
            pytest.fail("the run ended before its first checkpoint")
        for p in procs:
            p.send_signal(signal.SIGKILL)
        for p in procs:
            p.wait()
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
            p.stdout.close()
    time.sleep(0.5)
    outs = finish(launch(2, 2, tmp_path / "killed.npz", ckpt))
    assert [lines(out, "RESUMED") for out in outs] == [[["0", "10"]], [["1", "10"]]]
    assert_same_run(load(tmp_path / "killed.npz"), two, what="killed and resumed vs uninterrupted")
    assert sorted(os.listdir(ckpt)) == ["step_00000020", "step_00000030"]


def test_fsdp_sharded_transformer_same_losses_less_memory(reference):
    """`fit(shard_params=True)` on `jaxgen.nn.Transformer` + `lm_loss`, 4 host devices."""
    plain, sharded = reference["fsdp_plain_losses"], reference["fsdp_sharded_losses"]
    assert plain.shape == (6,) and plain[-1] < plain[0]  # it trains
    np.testing.assert_allclose(sharded, plain, rtol=1e-5)  # float32
    full, per_device = (int(b) for b in reference["fsdp_bytes"])
    ratio = per_device / full
    print(f"per-device parameter + optimiser bytes: {per_device} of {full} ({ratio:.3f}x)")
    assert ratio <= 0.3, (full, per_device, ratio)
    assert tuple(reference["fsdp_embedding_shard"]) == (16, 64)  # (vocab / 4, dim)
    # Checkpointed at step 3 and resumed sharded: the uninterrupted sharded run.
    assert int(reference["fsdp_resumed_from"]) == 3
    np.testing.assert_array_equal(reference["fsdp_resumed_losses"], sharded)
    assert int(reference["fsdp_resumed_bytes"]) == per_device


def test_fsdp_rule_picks_a_divisible_dimension_and_obeys_the_user_rule():
    mesh = AbstractMesh((2, 4), ("data", "fsdp"))
    rule = fsdp_rule(mesh, min_size=64)
    spec = lambda shape, r=rule: r((), jnp.zeros(shape))  # noqa: E731
    assert spec((8, 16)) == PartitionSpec("fsdp", None)  # leading dimension
    assert spec((6, 12, 40)) == PartitionSpec(None, None, "fsdp")  # largest divisible one
    assert spec((7, 9)) == PartitionSpec()  # none divisible: replicated
    assert spec((4, 8)) == PartitionSpec()  # below min_size: replicated
    both = fsdp_rule(mesh, axes=("data", "fsdp"), min_size=64)
    assert spec((16, 8), both) == PartitionSpec(("data", "fsdp"), None)
    keep_3d = lambda path, x: PartitionSpec() if x.ndim == 3 else None  # noqa: E731
    user = fsdp_rule(mesh, min_size=64, override=keep_3d)
    assert spec((6, 12, 40), user) == PartitionSpec() and spec((8, 16), user) == spec((8, 16))
    with pytest.raises(ValueError, match="`axes` must name axes"):
        fsdp_rule(mesh, axes="model")


def test_scaling_bad_input():
    x = np.zeros((12, 3))
    with pytest.raises(ValueError, match="`num_shards` is required"):
        sharded_minibatches(x, 4)
    with pytest.raises(ValueError, match="divisible by `num_shards` 5"):
        sharded_minibatches(x, 10, num_shards=5)
    with pytest.raises(ValueError, match="`process_local=True` needs"):
        sharded_minibatches(x, 4, num_shards=2, process_local=True)
    with pytest.raises(ValueError, match="`fsdp` must be an int >= 1 dividing"):
        data_mesh(fsdp=len(jax.devices()) + 1)
    args = (lambda m, b, k: jnp.sum(m * b), jnp.zeros(3), lambda k: jnp.ones(3), optax.sgd(0.1))
    with pytest.raises(ValueError, match="`shard_params` needs a `mesh`"):
        fit(*args, num_steps=1, key=jr.key(0), shard_params=True)
    # (the jaxtyping import hook of the tests checks the annotation first)
    with pytest.raises(TypeError, match="`shard_params` must be|parameter 'shard_params'"):
        fit(*args, num_steps=1, key=jr.key(0), mesh=data_mesh(), shard_params="fsdp")
