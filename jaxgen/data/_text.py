"""Offline text corpora (CPython stdlib sources, Debian corpora), a byte tokenizer, window sampler.

Every corpus is a list of documents (``str``) in a fixed order; the train/validation split is by
document and deterministic: document ``i`` goes to validation when ``i % period == period - 1``
(``period = round(1 / val_fraction)``), so both halves cover the whole corpus evenly.
"""

import gzip
import os
import re
import shutil
import subprocess
import sysconfig
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
from jaxtyping import Array, Int, PRNGKeyArray

from ._common import MissingDataError, debian_files, require_module

TEXT_CORPORA = ("python_stdlib", "bible-kjv", "fortunes", "dict-jargon")


def _stdlib_documents() -> list[str]:
    root = sysconfig.get_paths()["stdlib"]
    docs = []
    for dirpath, dirnames, filenames in os.walk(root):
        # Deterministic walk; skip third-party packages and the (huge) test suites.
        dirnames[:] = sorted(
            d
            for d in dirnames
            if d
            not in ("site-packages", "test", "tests", "__pycache__", "idle_test", "dist-packages")
        )
        for fname in sorted(filenames):
            if fname.endswith(".py"):
                with open(os.path.join(dirpath, fname), encoding="utf-8", errors="replace") as f:
                    docs.append(f.read())
    if not docs:
        raise MissingDataError(f"no Python sources found under the stdlib path {root!r}.")
    return docs


def _bible_documents() -> list[str]:
    debian_files("bible-kjv")  # raises MissingDataError naming the package
    if shutil.which("bible") is None:
        raise MissingDataError(
            "the `bible` program of the Debian package 'bible-kjv' is missing; "
            "install it with `apt-get install bible-kjv`."
        )
    text = subprocess.run(
        ["bible", "Genesis1:1-Revelation22:21"], capture_output=True, text=True, check=True
    ).stdout
    blocks = [b for b in text.strip("\n").split("\n\n") if b.strip()]
    # Blocks alternate "Book N" headers and chapter bodies: one document per chapter.
    docs, header = [], ""
    for block in blocks:
        if re.fullmatch(r"[^\n]* \d+", block.strip()) and not block.startswith(" "):
            header = block.strip() + "\n"
        else:
            docs.append(header + block + "\n")
            header = ""
    return docs


def _fortune_documents() -> list[str]:
    files = sorted(
        f
        for f in debian_files("fortunes")
        if "/games/fortunes/" in f and not f.endswith((".dat", ".u8"))
    )
    docs = []
    for path in files:
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
        docs += [e.strip("\n") + "\n" for e in re.split(r"^%$", text, flags=re.M) if e.strip()]
    return docs


def _jargon_documents() -> list[str]:
    paths = [f for f in debian_files("dict-jargon") if f.endswith("jargon.dict.dz")]
    if not paths:
        raise MissingDataError(
            "the Debian package 'dict-jargon' has no jargon.dict.dz; "
            "reinstall it with `apt-get install --reinstall dict-jargon`."
        )
    with gzip.open(paths[0]) as f:
        text = f.read().decode("utf-8", errors="replace")
    # Entries start on a non-indented line after a blank line.
    return [e.strip("\n") + "\n" for e in re.split(r"\n\n(?=\S)", text) if e.strip()]


_LOADERS: dict[str, Callable[[], list[str]]] = {
    "python_stdlib": _stdlib_documents,
    "bible-kjv": _bible_documents,
    "fortunes": _fortune_documents,
    "dict-jargon": _jargon_documents,
}


def load_text_documents(name: str = "python_stdlib") -> list[str]:
    """The documents of an offline corpus, in a fixed order.

    Corpora: ``"python_stdlib"`` (one document per ``.py`` file of the
    running CPython's standard library, tests and site-packages skipped; always present),
    ``"bible-kjv"`` (one per chapter; Debian ``bible-kjv``), ``"fortunes"`` (one per fortune;
    Debian ``fortunes``), ``"dict-jargon"`` (one per Jargon File entry; Debian ``dict-jargon``).

    Raises:
        ValueError: unknown ``name`` (the message lists the valid ones).
        MissingDataError: the Debian package is absent (the message names it).
    """
    if name not in _LOADERS:
        raise ValueError(f"unknown text corpus {name!r}; expected one of {list(TEXT_CORPORA)}.")
    return _LOADERS[name]()


class TextCorpus(NamedTuple):
    """A byte-level corpus split by documents.

    Attributes:
        name: corpus name.
        train: ``uint8`` array ``(N_train,)``, the UTF-8 bytes of the training documents joined.
        validation: ``uint8`` array ``(N_val,)``, likewise for the validation documents.
        train_documents: the training documents (``str``).
        validation_documents: the validation documents (``str``).
    """

    name: str
    train: np.ndarray
    validation: np.ndarray
    train_documents: list[str]
    validation_documents: list[str]


def load_text_corpus(
    name: str = "python_stdlib", *, val_fraction: float = 0.1, max_bytes: int | None = None
) -> TextCorpus:
    """Load an offline corpus as UTF-8 bytes with a deterministic document-level split.

    Args:
        name: one of ``TEXT_CORPORA`` (see `load_text_documents`).
        val_fraction: fraction of documents held out (every ``round(1/val_fraction)``-th one).
        max_bytes: if given, keep documents (in order) until about this many bytes in total
            (for small CPU runs); the split is applied after truncation.

    Returns:
        `TextCorpus` with ``uint8`` ``train``/``validation`` arrays.
    """
    if not 0.0 < val_fraction < 1.0:
        raise ValueError(f"`val_fraction` must be in (0, 1), got {val_fraction!r}.")
    if max_bytes is not None and (not isinstance(max_bytes, int) or max_bytes < 1):
        raise ValueError(f"`max_bytes` must be an int >= 1 or None, got {max_bytes!r}.")
    docs = load_text_documents(name)
    if max_bytes is not None:
        kept, total = [], 0
        for doc in docs:
            if total >= max_bytes:
                break
            kept.append(doc)
            total += len(doc.encode("utf-8"))
        docs = kept
    period = max(2, round(1.0 / val_fraction))
    train_docs = [d for i, d in enumerate(docs) if i % period != period - 1]
    val_docs = [d for i, d in enumerate(docs) if i % period == period - 1]
    if not val_docs:  # tiny corpora: hold out the last document
        train_docs, val_docs = docs[:-1], docs[-1:]

    def to_bytes(ds: list[str]) -> np.ndarray:
        return np.frombuffer("".join(ds).encode("utf-8"), dtype=np.uint8).copy()

    return TextCorpus(name, to_bytes(train_docs), to_bytes(val_docs), train_docs, val_docs)


def _checked_ids(ids: np.ndarray | Array | list[int], vocab_size: int) -> np.ndarray:
    """``ids`` as a 1-D numpy array, or a ValueError naming the shape / the out-of-range ids."""
    arr = np.asarray(ids)
    if arr.ndim != 1:
        raise ValueError(f"`ids` must be 1-D, got shape {arr.shape}.")
    if arr.size and (arr.min() < 0 or arr.max() >= vocab_size):
        raise ValueError(
            f"token ids must lie in [0, {vocab_size}), got range [{arr.min()}, {arr.max()}]."
        )
    return arr


class ByteTokenizer:
    """Byte-level tokenizer: ids ``0..255`` are bytes, then optional special tokens.

    ``ByteTokenizer(("<bos>", "<mask>"))`` has ``vocab_size == 258``, ``special_id("<mask>") ==
    257``. Decoding drops special ids and replaces invalid UTF-8.
    """

    def __init__(self, special_tokens: tuple[str, ...] = ()):
        if len(set(special_tokens)) != len(special_tokens):
            raise ValueError(f"`special_tokens` must be distinct, got {special_tokens!r}.")
        self.special_tokens = tuple(special_tokens)
        self.vocab_size = 256 + len(self.special_tokens)

    def special_id(self, token: str) -> int:
        """Id of a special token."""
        if token not in self.special_tokens:
            raise ValueError(f"unknown special token {token!r}; have {self.special_tokens}.")
        return 256 + self.special_tokens.index(token)

    def encode(self, text: str | bytes) -> np.ndarray:
        """UTF-8 bytes of ``text`` as an ``int32`` array ``(n,)``."""
        data = text.encode("utf-8") if isinstance(text, str) else bytes(text)
        return np.frombuffer(data, dtype=np.uint8).astype(np.int32)

    def decode(self, ids: np.ndarray | Array | list[int]) -> str:
        """Text of a 1-D id sequence (special ids dropped, bad UTF-8 replaced)."""
        arr = _checked_ids(ids, self.vocab_size)
        return bytes(arr[arr < 256].astype(np.uint8).tolist()).decode("utf-8", errors="replace")


class BPETokenizer:
    """Byte-level BPE tokenizer trained on a corpus (needs the optional ``tokenizers`` package).

    The base alphabet is the 256 bytes, so every text round-trips exactly; ``vocab_size - 256 -
    len(special_tokens)`` merges are learned from ``texts``. Training is deterministic.

    Args:
        texts: training documents.
        vocab_size: total vocabulary, bytes + merges + special tokens (``> 256 + len(special)``).
        special_tokens: extra ids appended after the learned vocabulary.

    Raises:
        MissingDataError: ``tokenizers`` is not installed (``pip install tokenizers``).
    """

    def __init__(
        self, texts: list[str], vocab_size: int = 512, special_tokens: tuple[str, ...] = ()
    ):
        # The arguments first: a bad one is named even where `tokenizers` is not installed.
        if not isinstance(vocab_size, int) or vocab_size <= 256 + len(special_tokens):
            raise ValueError(
                f"`vocab_size` must be an int > 256 + len(special_tokens) = "
                f"{256 + len(special_tokens)}, got {vocab_size!r}."
            )
        if not texts:
            raise ValueError("`texts` must be a non-empty list of documents.")
        tk = require_module("tokenizers")
        tokenizer = tk.Tokenizer(tk.models.BPE())
        tokenizer.pre_tokenizer = tk.pre_tokenizers.ByteLevel(add_prefix_space=False)
        tokenizer.decoder = tk.decoders.ByteLevel()
        trainer = tk.trainers.BpeTrainer(
            vocab_size=vocab_size - len(special_tokens),
            show_progress=False,
            initial_alphabet=tk.pre_tokenizers.ByteLevel.alphabet(),
            special_tokens=[],
        )
        tokenizer.train_from_iterator(texts, trainer=trainer)
        tokenizer.add_special_tokens(list(special_tokens))
        self._tokenizer = tokenizer
        self.special_tokens = tuple(special_tokens)
        self.vocab_size = tokenizer.get_vocab_size()

    def special_id(self, token: str) -> int:
        """Id of a special token."""
        if token not in self.special_tokens:
            raise ValueError(f"unknown special token {token!r}; have {self.special_tokens}.")
        return self._tokenizer.token_to_id(token)

    def encode(self, text: str) -> np.ndarray:
        """Token ids of ``text``, ``int32`` array ``(n,)``."""
        return np.asarray(self._tokenizer.encode(text).ids, dtype=np.int32)

    def decode(self, ids: np.ndarray | Array | list[int]) -> str:
        """Text of a 1-D id sequence (special ids dropped)."""
        arr = _checked_ids(ids, self.vocab_size)
        return self._tokenizer.decode(arr.tolist(), skip_special_tokens=True)


def random_windows(
    tokens: np.ndarray | Array, batch_size: int, length: int
) -> Callable[[PRNGKeyArray], Int[Array, "B L"]]:
    """A pure, jit-friendly sampler of random contiguous windows of a token stream.

    For next-token training ask for ``length = context + 1`` and split ``(w[:, :-1], w[:, 1:])``.

    Args:
        tokens: 1-D integer array ``(N,)`` with ``N >= length``.
        batch_size: windows per batch.
        length: window length.

    Returns:
        ``batches(key) -> int32[batch_size, length]`` (starts uniform over ``0..N-length``).
    """
    arr = np.asarray(tokens)
    if arr.ndim != 1 or not np.issubdtype(arr.dtype, np.integer):
        raise ValueError(f"`tokens` must be a 1-D integer array, got {arr.dtype}{arr.shape}.")
    if not isinstance(length, int) or length < 1 or length > arr.shape[0]:
        raise ValueError(f"`length` must be an int in [1, {arr.shape[0]}], got {length!r}.")
    if not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"`batch_size` must be an int >= 1, got {batch_size!r}.")
    data = jnp.asarray(arr, dtype=jnp.int32)
    max_start = arr.shape[0] - length + 1

    def sample(key: PRNGKeyArray) -> Int[Array, "B L"]:
        starts = jr.randint(key, (batch_size,), 0, max_start)
        return jax.vmap(lambda s: jax.lax.dynamic_slice(data, (s,), (length,)))(starts)

    return sample
