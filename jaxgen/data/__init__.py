"""Offline datasets (numpy out) and key-first synthetic data.

Loaders return numpy arrays with documented dtype and shape; converting to ``jnp`` is the caller's
job. A missing package raises `MissingDataError` naming what to install.
"""

from ._common import (
    debian_files as debian_files,
    MissingDataError as MissingDataError,
    require_module as require_module,
)
from ._images import (
    extract_patches as extract_patches,
    load_digits as load_digits,
    load_sample_images as load_sample_images,
    load_skimage_grey as load_skimage_grey,
    SKIMAGE_IMAGES as SKIMAGE_IMAGES,
)
