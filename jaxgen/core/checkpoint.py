"""Checkpoints of training state: atomic writes, resume from the latest.

A checkpoint is one directory ``step_XXXXXXXX`` holding ``state.eqx`` (the pytree of arrays,
serialised with `equinox.tree_serialise_leaves`) and ``meta.json`` (step and loss history). The
pytree structure comes from a template built by the caller, as with any equinox deserialisation.
"""

import json
import os
import shutil
import tempfile
from typing import Any

import equinox as eqx
from jaxtyping import PyTree

_PREFIX = "step_"


def save_checkpoint(directory: str, step: int, state: PyTree, meta: dict[str, Any]) -> str:
    """Write ``state`` and ``meta`` for ``step`` atomically; return the checkpoint's path."""
    os.makedirs(directory, exist_ok=True)
    final = os.path.join(directory, f"{_PREFIX}{step:08d}")
    tmp = tempfile.mkdtemp(prefix=".tmp_", dir=directory)
    eqx.tree_serialise_leaves(os.path.join(tmp, "state.eqx"), state)
    with open(os.path.join(tmp, "meta.json"), "w") as f:
        json.dump({"step": step, **meta}, f)
    if os.path.exists(final):
        shutil.rmtree(final)
    os.replace(tmp, final)
    return final


def latest_checkpoint(directory: str | None) -> str | None:
    """Path of the checkpoint with the highest step in ``directory``, or ``None``."""
    if directory is None or not os.path.isdir(directory):
        return None
    steps = sorted(d for d in os.listdir(directory) if d.startswith(_PREFIX))
    return os.path.join(directory, steps[-1]) if steps else None


def load_checkpoint(path: str, template: PyTree) -> tuple[PyTree, dict[str, Any]]:
    """Load the state saved at ``path`` into the structure of ``template``; return (state, meta)."""
    state = eqx.tree_deserialise_leaves(os.path.join(path, "state.eqx"), template)
    with open(os.path.join(path, "meta.json")) as f:
        meta = json.load(f)
    return state, meta


def prune_checkpoints(directory: str, keep: int) -> None:
    """Delete all but the ``keep`` most recent checkpoints in ``directory``."""
    steps = sorted(d for d in os.listdir(directory) if d.startswith(_PREFIX))
    for d in steps[: max(len(steps) - keep, 0)]:
        shutil.rmtree(os.path.join(directory, d))
