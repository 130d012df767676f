"""Pure metrics between distributions and samples."""

from ._calibration import (
    brier_score as brier_score,
    classification_nll as classification_nll,
    expected_calibration_error as expected_calibration_error,
)
from ._digits import (
    DigitsFeatureNet as DigitsFeatureNet,
    digits_fd as digits_fd,
    digits_feature_net as digits_feature_net,
    digits_features as digits_features,
    digits_logits as digits_logits,
)
from ._distances import (
    empirical_gaussian_w2 as empirical_gaussian_w2,
    energy_distance as energy_distance,
    feature_frechet_distance as feature_frechet_distance,
    gaussian_w2 as gaussian_w2,
    mmd_unbiased as mmd_unbiased,
    sliced_w2 as sliced_w2,
    w1_1d as w1_1d,
)
from ._images import (
    lr_consistency_psnr as lr_consistency_psnr,
    psnr as psnr,
    sample_diversity as sample_diversity,
    ssim as ssim,
)
from ._sliced import ise_1d as ise_1d, sliced_w1 as sliced_w1
