"""Checkpoints of training state: durable atomic writes, verified loads, resume from the latest.

A checkpoint is one directory ``step_XXXXXXXX`` holding ``state.eqx`` (the pytree of arrays,
serialised with `equinox.tree_serialise_leaves`) and ``meta.json`` (step, loss history and the
SHA-256 digest and size of ``state.eqx``). The pytree structure comes from a template built by
the caller, as with any equinox deserialisation.

Crash safety: a checkpoint is written into a hidden temporary directory (``.tmp_*``), every file
and that directory are ``fsync``-ed, and only then is it renamed to ``step_XXXXXXXX`` (an atomic
``rename``), after which the parent directory is ``fsync``-ed too. A process killed at any moment
therefore leaves either the complete checkpoint or none under a ``step_`` name (the hidden
leftovers are ignored and removed by the next save). A checkpoint damaged afterwards (a truncated
or edited file) fails its digest check in `verify_checkpoint`, and `load_latest_checkpoint` falls
back to the previous one with a `CheckpointWarning`.
"""

import hashlib
import io
import json
import os
import shutil
import tempfile
import warnings
from collections.abc import Callable
from typing import Any

import equinox as eqx
from jaxtyping import PyTree

_PREFIX = "step_"
_TMP_PREFIX = ".tmp_"
_STATE = "state.eqx"
_META = "meta.json"


class CheckpointWarning(UserWarning):
    """A checkpoint could not be used (damaged, unreadable) and an older one was loaded."""


class CorruptCheckpointError(ValueError):
    """A checkpoint's files are missing, unreadable or do not match their recorded digest."""


def _fsync_dir(path: str) -> None:
    """Make a directory's entries (a created or renamed child) durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    except OSError:  # some file systems refuse fsync on directories; the rename stays atomic
        pass
    finally:
        os.close(fd)


def _write_durable(path: str, payload: bytes) -> None:
    with open(path, "wb") as f:
        f.write(payload)
        f.flush()
        os.fsync(f.fileno())


def _serialise(state: PyTree) -> bytes:
    buffer = io.BytesIO()
    eqx.tree_serialise_leaves(buffer, state)
    return buffer.getvalue()


def _sha256(payload: bytes) -> str:
    return hashlib.sha256(payload).hexdigest()


def _step_dirs(directory: str) -> list[str]:
    return sorted(d for d in os.listdir(directory) if d.startswith(_PREFIX))


def save_checkpoint(directory: str, step: int, state: PyTree, meta: dict[str, Any]) -> str:
    """Write ``state`` and ``meta`` for ``step`` durably and atomically; return the path.

    The files are written into a hidden temporary directory, fsync-ed (files, then the
    directory), renamed to ``step_XXXXXXXX`` and the parent directory fsync-ed: a reader never
    sees a partial checkpoint under a ``step_`` name, whenever the writer is killed. Leftover
    temporary directories of killed writers are removed first.

    Args:
        directory: the checkpoint directory (created if missing).
        step: the step number (names the checkpoint).
        state: pytree of arrays (anything `equinox.tree_serialise_leaves` accepts).
        meta: JSON-serialisable metadata; ``step``, ``sha256`` and ``size`` are added.

    Returns:
        The path of the written checkpoint directory.
    """
    os.makedirs(directory, exist_ok=True)
    for leftover in os.listdir(directory):
        if leftover.startswith(_TMP_PREFIX):
            shutil.rmtree(os.path.join(directory, leftover), ignore_errors=True)
    payload = _serialise(state)
    final = os.path.join(directory, f"{_PREFIX}{step:08d}")
    tmp = tempfile.mkdtemp(prefix=_TMP_PREFIX, dir=directory)
    _write_durable(os.path.join(tmp, _STATE), payload)
    record = {"step": step, **meta, "sha256": _sha256(payload), "size": len(payload)}
    _write_durable(os.path.join(tmp, _META), json.dumps(record).encode())
    _fsync_dir(tmp)
    if os.path.exists(final):
        # Move the old one aside first (a rename cannot replace a non-empty directory).
        old = tempfile.mkdtemp(prefix=_TMP_PREFIX, dir=directory)
        os.replace(final, os.path.join(old, "old"))
        os.replace(tmp, final)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(tmp, final)
    _fsync_dir(directory)
    return final


def latest_checkpoint(directory: str | None) -> str | None:
    """Path of the checkpoint with the highest step in ``directory``, or ``None``.

    This does not read the files; `load_latest_checkpoint` verifies them and falls back.
    """
    if directory is None or not os.path.isdir(directory):
        return None
    steps = _step_dirs(directory)
    return os.path.join(directory, steps[-1]) if steps else None


def verify_checkpoint(path: str) -> dict[str, Any]:
    """Check that the checkpoint at ``path`` is complete and intact; return its metadata.

    Raises:
        CorruptCheckpointError: a file is missing, ``meta.json`` is not valid JSON, or
            ``state.eqx`` does not have the size and SHA-256 digest recorded when it was written.
    """
    try:
        with open(os.path.join(path, _META), "rb") as f:
            meta = json.loads(f.read())
        with open(os.path.join(path, _STATE), "rb") as f:
            payload = f.read()
    except (OSError, ValueError) as e:
        raise CorruptCheckpointError(f"checkpoint {path} is unreadable: {e}") from None
    if not isinstance(meta, dict) or "step" not in meta:
        raise CorruptCheckpointError(f"checkpoint {path} has no step in its {_META}.")
    if "sha256" in meta:  # checkpoints of older versions carry no digest
        if len(payload) != meta.get("size") or _sha256(payload) != meta["sha256"]:
            raise CorruptCheckpointError(
                f"checkpoint {path}: {_STATE} has {len(payload)} bytes and does not match the "
                f"digest recorded when it was written ({meta.get('size')} bytes); it was "
                "truncated or modified after the write."
            )
    return meta


def load_checkpoint(path: str, template: PyTree) -> tuple[PyTree, dict[str, Any]]:
    """Load the state saved at ``path`` into the structure of ``template``; return (state, meta).

    Raises:
        CorruptCheckpointError: the files are damaged (see `verify_checkpoint`).
        RuntimeError / ValueError: from equinox when the intact file does not fit ``template``
            (another model or optimiser).
    """
    meta = verify_checkpoint(path)
    with open(os.path.join(path, _STATE), "rb") as f:
        state = eqx.tree_deserialise_leaves(f, template)
    return state, meta


def load_latest_checkpoint(
    directory: str | None,
    template: PyTree,
    *,
    load: Callable[[str, PyTree], tuple[PyTree, dict[str, Any]]] = load_checkpoint,
) -> tuple[str, PyTree, dict[str, Any]] | None:
    """Load the newest intact checkpoint of ``directory``; ``None`` when there is none.

    A damaged checkpoint (see `verify_checkpoint`) is skipped with a `CheckpointWarning` that
    names it, and the previous one is tried. A directory whose checkpoints are all damaged
    raises rather than restarting from scratch in silence.

    Returns:
        ``(path, state, meta)`` of the checkpoint loaded, or ``None`` for no checkpoint.

    Raises:
        CorruptCheckpointError: every checkpoint in ``directory`` is damaged.
    """
    if directory is None or not os.path.isdir(directory):
        return None
    steps = _step_dirs(directory)
    damaged = []
    for name in reversed(steps):
        path = os.path.join(directory, name)
        try:
            state, meta = load(path, template)
        except CorruptCheckpointError as e:
            damaged.append(path)
            warnings.warn(
                f"{e} Falling back to the previous checkpoint.", CheckpointWarning, stacklevel=2
            )
            continue
        return path, state, meta
    if damaged:
        raise CorruptCheckpointError(
            f"every checkpoint in {directory} is damaged ({', '.join(damaged)}); remove them "
            "to start from scratch, or pass another `checkpoint_dir`."
        )
    return None


def prune_checkpoints(directory: str, keep: int) -> None:
    """Delete all but the ``keep`` most recent checkpoints in ``directory``."""
    steps = _step_dirs(directory)
    for d in steps[: max(len(steps) - keep, 0)]:
        # Renamed to a hidden name first: a process killed while deleting leaves no partial
        # ``step_`` directory behind.
        trash = tempfile.mkdtemp(prefix=_TMP_PREFIX, dir=directory)
        os.replace(os.path.join(directory, d), os.path.join(trash, d))
        shutil.rmtree(trash, ignore_errors=True)
