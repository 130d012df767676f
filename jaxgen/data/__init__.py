"""Offline datasets (numpy out) and key-first synthetic data.

Loaders return numpy arrays with documented dtype and shape; converting to ``jnp`` is the caller's
job. A missing package raises `MissingDataError` naming what to install.
"""

from ._common import (
    debian_files as debian_files,
    MissingDataError as MissingDataError,
    require_module as require_module,
)
from ._text import (
    ByteTokenizer as ByteTokenizer,
    TEXT_CORPORA as TEXT_CORPORA,
    TextCorpus as TextCorpus,
    load_text_corpus as load_text_corpus,
    load_text_documents as load_text_documents,
    random_windows as random_windows,
)
