"""Offline datasets (numpy out) and key-first synthetic data.

Loaders return numpy arrays with documented dtype and shape; converting to ``jnp`` is the caller's
job. A missing package raises `MissingDataError` naming what to install.
"""

from ._common import (
    MissingDataError as MissingDataError,
    debian_files as debian_files,
    require_module as require_module,
)
from ._corruptions import CORRUPTIONS as CORRUPTIONS, corrupt as corrupt
from ._deconvolution import (
    laplace_mixture_1d as laplace_mixture_1d,
    laplace_mixture_1d_density as laplace_mixture_1d_density,
    load_baseball as load_baseball,
)
from ._degradations import (
    SR_IMAGES as SR_IMAGES,
    UPSAMPLE_METHODS as UPSAMPLE_METHODS,
    area_downsample as area_downsample,
    blur_radius as blur_radius,
    degrade as degrade,
    degrade_mean as degrade_mean,
    gaussian_blur as gaussian_blur,
    gaussian_kernel_1d as gaussian_kernel_1d,
    load_sr_patches as load_sr_patches,
    upsample as upsample,
)
from ._dynamics import (
    coupled_pendulum_field as coupled_pendulum_field,
    lorenz96_eigenplane as lorenz96_eigenplane,
    lorenz96_field as lorenz96_field,
    lorenz96_manifold_dataset as lorenz96_manifold_dataset,
    pendulum_lengths as pendulum_lengths,
    pendulum_lowest_mode as pendulum_lowest_mode,
    pendulum_manifold_dataset as pendulum_manifold_dataset,
)
from ._graphs import (
    GraphData as GraphData,
    load_davis_southern_women as load_davis_southern_women,
    load_florentine_families as load_florentine_families,
    load_karate_club as load_karate_club,
    load_les_miserables as load_les_miserables,
)
from ._images import (
    DIGITS_TEST_SIZE as DIGITS_TEST_SIZE,
    SKIMAGE_IMAGES as SKIMAGE_IMAGES,
    DigitsSplit as DigitsSplit,
    digits_split as digits_split,
    extract_patches as extract_patches,
    load_digits as load_digits,
    load_sample_images as load_sample_images,
    load_skimage_grey as load_skimage_grey,
)
from ._text import (
    TEXT_CORPORA as TEXT_CORPORA,
    BPETokenizer as BPETokenizer,
    ByteTokenizer as ByteTokenizer,
    TextCorpus as TextCorpus,
    load_text_corpus as load_text_corpus,
    load_text_documents as load_text_documents,
    random_windows as random_windows,
)
from ._timeseries import load_irates as load_irates
from ._toy2d import TOY_2D as TOY_2D, sample_toy_2d as sample_toy_2d
