"""fit guards its run: non-finite steps stop (or are skipped), bad keys are refused, damaged
checkpoints are skipped with a warning, and a run killed with SIGKILL at random moments (also
while writing a checkpoint) and restarted ends exactly where an uninterrupted run ends."""

import os
import queue
import signal
import subprocess
import sys
import textwrap
import threading
import time

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import optax
import pytest

from jaxgen.core import (
    CheckpointWarning,
    CorruptCheckpointError,
    NonFiniteError,
    fit,
    latest_checkpoint,
    load_checkpoint,
    minibatches,
    verify_checkpoint,
)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TRUE_W = jnp.array([1.5, -2.0, 0.5])
DATA = (lambda x: (x, x @ TRUE_W))(jr.normal(jr.key(11), (64, 3)))
BAD_STEP = 13


class Linear(eqx.Module):
    weight: jax.Array

    def __call__(self, x):
        return x @ self.weight


@jax.custom_jvp
def poison_gradient(x, bad):
    """Identity whose derivative is NaN where ``bad``: a finite loss with a NaN gradient."""
    return x


@poison_gradient.defjvp
def _poison_gradient_jvp(primals, tangents):
    x, bad = primals
    return x, jnp.where(bad, jnp.nan, 1.0) * tangents[0]


def loss_nan_at(model, batch, key, *, step, bad_loss):
    """Squared error; at step `BAD_STEP` the loss (``bad_loss``) or only its gradient is NaN."""
    x, y = batch
    bad = step == BAD_STEP
    weight = poison_gradient(model.weight, bad & ~bad_loss)
    loss = jnp.mean((x @ weight - y) ** 2)
    return jnp.where(bad & bad_loss, jnp.nan, loss)


NAN_LOSS = eqx.Partial(loss_nan_at, bad_loss=True)
NAN_GRAD = eqx.Partial(loss_nan_at, bad_loss=False)
COMMON = dict(key=jr.key(5), pass_step=True, steps_per_call=4, progress=False)


def run(loss, num_steps, **kwargs):
    return fit(loss, Linear(jnp.zeros(3)), minibatches(DATA, 8), optax.adam(0.05),
               num_steps=num_steps, **{**COMMON, **kwargs})  # fmt: skip


@pytest.mark.parametrize("loss", [NAN_LOSS, NAN_GRAD], ids=["nan_loss", "nan_gradient"])
def test_fit_stops_at_the_first_nonfinite_step(loss, tmp_path):
    ckpt = str(tmp_path / "run")
    clean = run(loss, BAD_STEP)  # steps 0..12: all finite
    with pytest.raises(NonFiniteError) as info:
        run(loss, 30, checkpoint_dir=ckpt, checkpoint_every=5)
    err = info.value
    assert err.step == BAD_STEP
    assert err.last_finite_loss == clean.losses[-1]
    assert err.checkpoint == os.path.join(ckpt, "step_00000010")
    message = str(err)
    assert f"at step {BAD_STEP}" in message and err.checkpoint in message
    assert f"{clean.losses[-1]:.6g} at step {BAD_STEP - 1}" in message
    # The last good checkpoint is kept; nothing past the bad step was written.
    assert sorted(d for d in os.listdir(ckpt) if not d.startswith(".")) == [
        "step_00000005",
        "step_00000010",
    ]
    np.testing.assert_array_equal(load_checkpoint(err.checkpoint, clean_template())[1]["losses"],
                                  clean.losses[:10])  # fmt: skip


def clean_template():
    model = Linear(jnp.zeros(3))
    return (model, optax.adam(0.05).init(model), jr.key_data(COMMON["key"]))


def test_fit_skip_step_leaves_the_step_out_and_ignore_trains_on_nan():
    before = run(NAN_GRAD, BAD_STEP)  # the state after steps 0..12
    with pytest.warns(RuntimeWarning, match=r"skipped 1 step\(s\).*steps 13\b"):
        skipped = run(NAN_GRAD, BAD_STEP + 1, on_nonfinite="skip_step")
    assert skipped.nonfinite_steps == (BAD_STEP,)
    np.testing.assert_array_equal(skipped.losses[:BAD_STEP], before.losses)
    # Step 13 changed nothing: parameters and optimiser state (its step count too) are those
    # after step 12.
    leaves = jax.tree_util.tree_leaves
    pairs = zip(
        leaves((skipped.model, skipped.opt_state)),
        leaves((before.model, before.opt_state)),
        strict=True,
    )
    for a, b in pairs:
        np.testing.assert_array_equal(a, b)
    ignored = run(NAN_GRAD, BAD_STEP + 1, on_nonfinite="ignore")
    assert np.all(np.isnan(ignored.model.weight)) and ignored.nonfinite_steps == ()


def test_fit_key_and_option_checks():
    for bad in (0, 1.5, np.zeros(2), jnp.zeros(2, jnp.float32)):
        # (under the jaxtyping import hook of the tests, its annotation check speaks first)
        with pytest.raises(TypeError, match="`key`|parameter 'key'"):
            run(NAN_LOSS, 2, key=bad)
    with pytest.raises(ValueError, match="`on_nonfinite` must be one of"):
        run(NAN_LOSS, 2, on_nonfinite="skip")
    raw = run(NAN_LOSS, 3, key=jr.PRNGKey(5))  # a raw key draws as the typed key does
    np.testing.assert_array_equal(raw.losses, run(NAN_LOSS, 3).losses)


def test_damaged_latest_checkpoint_falls_back_with_a_warning(tmp_path):
    ckpt = str(tmp_path / "run")
    full = run(NAN_LOSS, 12)
    run(NAN_LOSS, 10, checkpoint_dir=ckpt, checkpoint_every=5)
    state_file = os.path.join(latest_checkpoint(ckpt), "state.eqx")
    with open(state_file, "r+b") as f:  # truncate the newest checkpoint's arrays
        f.truncate(os.path.getsize(state_file) // 2)
    os.makedirs(os.path.join(ckpt, ".tmp_killed"))  # a killed writer's leftover: ignored
    with pytest.warns(CheckpointWarning, match="step_00000010.*truncated or modified"):
        resumed = run(NAN_LOSS, 12, checkpoint_dir=ckpt, checkpoint_every=5)
    assert resumed.resumed_from == 5
    np.testing.assert_array_equal(resumed.losses, full.losses)
    np.testing.assert_array_equal(resumed.model.weight, full.model.weight)
    verify_checkpoint(latest_checkpoint(ckpt))  # rewritten intact
    for name in ("step_00000010", "step_00000012"):
        with open(os.path.join(ckpt, name, "meta.json"), "w") as f:
            f.write('{"step": 1')  # cut mid-write by hand
    with pytest.warns(CheckpointWarning), pytest.raises(CorruptCheckpointError, match="every"):
        run(NAN_LOSS, 14, checkpoint_dir=ckpt, checkpoint_every=5)


# --- Fault injection: SIGKILL at random moments, restart, compare with an uninterrupted run.

KILL_NUM_STEPS, KILL_CHECKPOINT_EVERY, KILL_CALLBACK_EVERY = 48, 8, 4
WRITE_PAUSE_S = 0.5


def kill_loss(model, batch, key):
    x, y = batch
    noise = 0.1 * jr.normal(key, y.shape)
    return jnp.mean((jax.vmap(model)(x) - y - noise) ** 2)


def kill_run_args():
    model = eqx.nn.MLP(3, "scalar", 16, 2, key=jr.key(3))
    return (kill_loss, model, minibatches(DATA, 16), optax.adam(1e-2))


def kill_run_kwargs(num_steps=KILL_NUM_STEPS):
    return dict(num_steps=num_steps, key=jr.key(4), steps_per_call=4, progress=False)


KILL_SCRIPT = textwrap.dedent("""
    import os, sys, time
    import numpy as np, jax, equinox as eqx
    jax.config.update("jax_enable_x64", True)
    import jaxgen.core.checkpoint as ckpt
    from jaxgen.core import fit
    from tests.core.test_core_guard import (kill_run_args, kill_run_kwargs, KILL_CHECKPOINT_EVERY,
                                            KILL_CALLBACK_EVERY, WRITE_PAUSE_S)
    directory, out, num_steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
    write = ckpt._write_durable

    def slow_write(path, payload):  # half the arrays on disk, then a pause: a kill lands mid-write
        if path.endswith("state.eqx"):
            with open(path, "wb") as f:
                f.write(payload[: len(payload) // 2])
                f.flush()
            print("WRITING", flush=True)
            time.sleep(WRITE_PAUSE_S)
        write(path, payload)

    ckpt._write_durable = slow_write

    def callback(step, model, state):
        print("STEP", step, flush=True)
        time.sleep(0.05)

    res = fit(*kill_run_args(), **kill_run_kwargs(num_steps), checkpoint_dir=directory,
              checkpoint_every=KILL_CHECKPOINT_EVERY, callback=callback,
              callback_every=KILL_CALLBACK_EVERY)
    leaves = jax.tree_util.tree_leaves(eqx.filter(res.model, eqx.is_array))
    np.savez(out + ".tmp.npz", losses=res.losses, resumed_from=res.resumed_from,
             **{f"p{i}": np.asarray(x) for i, x in enumerate(leaves)})
    os.replace(out + ".tmp.npz", out)
    print("DONE", flush=True)
""")


def _lines(proc):
    lines = queue.Queue()

    def pump():
        for line in proc.stdout:
            lines.put(line.strip())
        lines.put(None)

    threading.Thread(target=pump, daemon=True).start()
    return lines


def _wait_for(lines, prefix, timeout=300.0):
    """The next line starting with ``prefix``, or ``"DONE"`` / ``None`` when the run ended."""
    deadline = time.monotonic() + timeout
    while True:
        line = lines.get(timeout=max(deadline - time.monotonic(), 0.01))
        if line is None or line == "DONE" or line.startswith(prefix):
            return line


def _check_directory(directory, template):
    """Every ``step_`` checkpoint is complete and loadable (digest-verified: a half-written
    one would raise); returns whether the kill left a partial write behind (hidden)."""
    partial = False
    for name in os.listdir(directory):
        if name.startswith("step_"):
            load_checkpoint(os.path.join(directory, name), template)
        else:
            assert name.startswith(".tmp_"), name
            partial = True
    return partial


def run_with_kills(tmp_path, num_kills, seed, num_steps=KILL_NUM_STEPS):
    """Run the kill script and SIGKILL it ``num_kills`` times, alternately while it writes its
    first or second checkpoint (the second for the first kill, so that it resumes; a random
    moment of the write) and at a random moment of training (after 1 to 3 progress lines),
    restarting it after each kill; return the final result and what the kills hit."""
    directory, out = str(tmp_path / "ckpt"), str(tmp_path / "out.npz")
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=ROOT)
    cmd = [sys.executable, "-c", KILL_SCRIPT, directory, out, str(num_steps)]
    args = kill_run_args()
    template = (args[1], args[3].init(eqx.filter(args[1], eqx.is_inexact_array)),
                jr.key_data(kill_run_kwargs()["key"]))  # fmt: skip
    rng = np.random.default_rng(seed)
    kills, mid_write, found = 0, 0, []
    while True:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, env=env, cwd=ROOT)
        lines = _lines(proc)
        try:
            line = None
            if kills < num_kills:
                during_write = kills % 2 == 0
                target = "WRITING" if during_write else "STEP"
                occurrence = (
                    (2 if kills == 0 else int(rng.integers(1, 3))) if during_write else None
                )
                for _ in range(occurrence or int(rng.integers(1, 4))):
                    line = _wait_for(lines, target)
                    if line is None or line == "DONE":
                        break
                if line is not None and line.startswith(target):
                    time.sleep(rng.uniform(0.0, 0.5 * WRITE_PAUSE_S if during_write else 0.3))
                    proc.send_signal(signal.SIGKILL)
                    proc.wait()
                    kills += 1
                    mid_write += _check_directory(directory, template) and during_write
                    newest = latest_checkpoint(directory)
                    found.append(newest and os.path.basename(newest))
                    continue
            if line != "DONE":
                assert _wait_for(lines, "DONE") == "DONE"
            assert proc.wait(timeout=60) == 0
            break
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            proc.stdout.close()
    with np.load(out) as f:
        result = {k: f[k] for k in f.files}
    return result, kills, mid_write, found


def check_equals_uninterrupted(result, kills, mid_write, resumed, num_steps=KILL_NUM_STEPS):
    reference = fit(*kill_run_args(), **kill_run_kwargs(num_steps))
    summary = (f"survived {kills} SIGKILL(s) ({mid_write} while a checkpoint was being "
               f"written); checkpoints found after each kill: {resumed}")  # fmt: skip
    print(summary)
    np.testing.assert_array_equal(result["losses"], reference.losses, err_msg=summary)
    leaves = jax.tree_util.tree_leaves(eqx.filter(reference.model, eqx.is_array))
    for i, x in enumerate(leaves):
        np.testing.assert_array_equal(result[f"p{i}"], x, err_msg=summary)
    assert result["losses"].shape == (num_steps,), summary
    return summary


def test_fit_survives_a_kill_while_writing_a_checkpoint(tmp_path):
    result, kills, mid_write, resumed = run_with_kills(tmp_path, num_kills=1, seed=0)
    summary = check_equals_uninterrupted(result, kills, mid_write, resumed)
    assert kills == 1 and mid_write == 1, summary
    assert int(result["resumed_from"]) > 0, summary


@pytest.mark.slow
def test_fit_survives_repeated_random_kills(tmp_path):
    # 16 checkpoints: more than eight kills can skip, so every kill lands before the end.
    num_steps = 16 * KILL_CHECKPOINT_EVERY
    result, kills, mid_write, resumed = run_with_kills(tmp_path, 8, seed=1, num_steps=num_steps)
    summary = check_equals_uninterrupted(result, kills, mid_write, resumed, num_steps)
    assert kills == 8 and mid_write >= 2, summary
