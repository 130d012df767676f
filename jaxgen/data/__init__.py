"""Offline datasets (numpy out) and key-first synthetic data.

Loaders return numpy arrays with documented dtype and shape; converting to ``jnp`` is the caller's
job. A missing package raises `MissingDataError` naming what to install.
"""

from ._common import (
    MissingDataError as MissingDataError,
)
from ._common import (
    debian_files as debian_files,
)
from ._common import (
    require_module as require_module,
)
from ._graphs import (
    GraphData as GraphData,
)
from ._graphs import (
    load_davis_southern_women as load_davis_southern_women,
)
from ._graphs import (
    load_florentine_families as load_florentine_families,
)
from ._graphs import (
    load_karate_club as load_karate_club,
)
from ._graphs import (
    load_les_miserables as load_les_miserables,
)
from ._images import (
    SKIMAGE_IMAGES as SKIMAGE_IMAGES,
)
from ._images import (
    extract_patches as extract_patches,
)
from ._images import (
    load_digits as load_digits,
)
from ._images import (
    load_sample_images as load_sample_images,
)
from ._images import (
    load_skimage_grey as load_skimage_grey,
)
from ._text import (
    TEXT_CORPORA as TEXT_CORPORA,
)
from ._text import (
    BPETokenizer as BPETokenizer,
)
from ._text import (
    ByteTokenizer as ByteTokenizer,
)
from ._text import (
    TextCorpus as TextCorpus,
)
from ._text import (
    load_text_corpus as load_text_corpus,
)
from ._text import (
    load_text_documents as load_text_documents,
)
from ._text import (
    random_windows as random_windows,
)
from ._timeseries import load_irates as load_irates
