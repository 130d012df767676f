"""A data-parallel `fit` launched as one process per host (here: per CPU process).

Launched by the tests of ``test_core_scale.py`` as ``python -m tests.core.multiprocess_fit OUT
[CHECKPOINT_DIR]`` in each process, with ``JAX_COORDINATOR_ADDRESS``, ``JAX_NUM_PROCESSES`` and
``JAX_PROCESS_ID`` set (the launch recipe of `jaxgen.core.mesh`) and
``XLA_FLAGS=--xla_force_host_platform_device_count=2``. Without ``JAX_NUM_PROCESSES`` it runs in
one process, on a mesh of all its devices and on one device, for the reference results, and
trains the language-model core replicated and FSDP-sharded (`fsdp_transformer`).

Each process holds only its own rows of the data set and draws its part of the global batch
from them (`sharded_minibatches` with ``process_local=True``).
"""

import os
import sys
import tempfile

import jax

NUM_ROWS, BATCH, NUM_STEPS, CHECKPOINT_EVERY, NUM_SHARDS = 64, 16, 30, 10, 4


def data():
    """The whole data set; a process of a multi-process run reads only its rows of it."""
    import numpy as np

    rng = np.random.default_rng(0)
    x = rng.normal(size=(NUM_ROWS, 3)).astype(np.float32)
    y = (x @ np.array([1.5, -2.0, 0.5], np.float32) + 0.1 * rng.normal(size=NUM_ROWS)).astype(
        np.float32
    )
    return x, y


def loss(model, batch, key):
    import jax.numpy as jnp
    import jax.random as jr

    x, y = batch
    noise = 0.05 * jr.normal(key, y.shape, y.dtype)
    return jnp.mean((jax.vmap(model)(x) - y - noise) ** 2)


def run(batches, mesh, **kwargs):
    import equinox as eqx
    import jax.random as jr
    import optax

    from jaxgen.core import fit

    model = eqx.nn.MLP(3, "scalar", 8, 1, key=jr.key(1))
    return fit(loss, model, batches, optax.adam(3e-2), num_steps=NUM_STEPS, key=jr.key(2),
               steps_per_call=5, mesh=mesh, progress=False, **kwargs)  # fmt: skip


def arrays(result):
    import equinox as eqx
    import numpy as np

    leaves = jax.tree_util.tree_leaves(eqx.filter(result.model, eqx.is_array))
    return {"losses": result.losses, **{f"p{i}": np.asarray(x) for i, x in enumerate(leaves)}}


def fsdp_transformer():
    """The language-model core trained replicated and FSDP-sharded on a 4-device mesh."""
    import equinox as eqx
    import jax.random as jr
    import numpy as np
    import optax

    from jaxgen.core import bytes_per_device, data_mesh, fit, minibatches
    from jaxgen.nn import Transformer
    from jaxgen.transformers import lm_loss

    vocab, seq = 64, 16
    model = Transformer(vocab, 64, 1, 4, seq, key=jr.key(0))
    batches = minibatches(jr.randint(jr.key(1), (64, seq + 1), 0, vocab), 8)
    # One optimiser object: a new one is a new static argument (a new compilation).
    kw = dict(num_steps=6, key=jr.key(2), steps_per_call=3, progress=False)
    adam = optax.adam(1e-2)
    plain = fit(lm_loss, model, batches, adam, **kw)
    # Batch over the whole mesh, parameters and Adam moments over its 4-device "fsdp" axis.
    mesh = data_mesh(fsdp=len(jax.devices()))
    sharded = fit(lm_loss, model, batches, adam, mesh=mesh, shard_params=True, **kw)
    # Checkpointed at step 3 and resumed: the sharded state round-trips through the files.
    with tempfile.TemporaryDirectory() as directory:
        ckpt = dict(mesh=mesh, shard_params=True, checkpoint_dir=directory, checkpoint_every=3)
        fit(lm_loss, model, batches, adam, **{**kw, "num_steps": 3}, **ckpt)
        resumed = fit(lm_loss, model, batches, adam, **kw, **ckpt)
    arrays = lambda r: eqx.filter((r.model, r.opt_state), eqx.is_array)  # noqa: E731
    return {
        "fsdp_resumed_from": np.array(resumed.resumed_from),
        "fsdp_resumed_losses": resumed.losses,
        "fsdp_resumed_bytes": np.array(bytes_per_device(arrays(resumed))),
        "fsdp_plain_losses": plain.losses,
        "fsdp_sharded_losses": sharded.losses,
        "fsdp_bytes": np.array([bytes_per_device(arrays(r)) for r in (plain, sharded)]),
        "fsdp_embedding_shard": np.array(sharded.model.embedding.addressable_shards[0].data.shape),
    }


def main(out, checkpoint_dir=None):
    import numpy as np

    from jaxgen.core import data_mesh, init_processes, sharded_minibatches

    if "JAX_NUM_PROCESSES" in os.environ:
        jax.config.update("jax_cpu_collectives_implementation", "gloo")  # the default, stated
        init_processes()  # reads JAX_COORDINATOR_ADDRESS, JAX_NUM_PROCESSES, JAX_PROCESS_ID
    import jaxgen.core.train as train

    save = train.save_checkpoint

    def save_and_report(directory, step, *args, **kwargs):
        print(f"SAVED {jax.process_index()} {step}", flush=True)
        return save(directory, step, *args, **kwargs)

    train.save_checkpoint = save_and_report
    mesh = data_mesh()
    x, y = data()
    if jax.process_count() > 1:
        p, n = jax.process_index(), jax.process_count()
        rows = slice(p * NUM_ROWS // n, (p + 1) * NUM_ROWS // n)  # this process's rows only
        batches = sharded_minibatches((x[rows], y[rows]), BATCH, mesh=mesh, process_local=True)

        def callback(step, model, state):
            print(f"STEP {jax.process_index()} {step}", flush=True)

        result = run(batches, mesh, checkpoint_dir=checkpoint_dir,
                     checkpoint_every=CHECKPOINT_EVERY, callback=callback,
                     callback_every=CHECKPOINT_EVERY)  # fmt: skip
        print(f"RESUMED {jax.process_index()} {result.resumed_from}", flush=True)
        if jax.process_index() == 0:
            np.savez(out, **arrays(result))
    else:  # the references: one process on a mesh of its devices, and one device; FSDP
        on_mesh = run(sharded_minibatches((x, y), BATCH, num_shards=NUM_SHARDS, mesh=mesh), mesh)
        one = run(sharded_minibatches((x, y), BATCH, num_shards=NUM_SHARDS), None)
        results = {f"mesh_{k}": v for k, v in arrays(on_mesh).items()}
        results.update({f"one_{k}": v for k, v in arrays(one).items()}, **fsdp_transformer())
        np.savez(out, **results)
    print(f"DONE {jax.process_index()}", flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:])
