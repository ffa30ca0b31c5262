"""The course's measures of sample quality, computed on features of the course's digit network.

Labs that judge generated digits (Lab 2's samplers and guidance) import these; Lab 5 is where students write
their own versions of the same measures, so the grader's policy keeps this package out of Lab 5's graded cells
(``autograder/course.toml``, ``[policy.labs.lab5_fid]``). One concept per module:

- :mod:`genlab.metrics.frechet`: FID, the Fréchet distance between Gaussians fitted to two feature sets;
- :mod:`genlab.metrics.kid`: KID, the unbiased MMD² with the cubic polynomial kernel;
- :mod:`genlab.metrics.manifold`: precision and recall (Kynkäänniemi et al. 2019), density and coverage (Naeem et
  al. 2020), from k-nearest-neighbour balls, with the per-point counts the bootstrap resamples;
- :mod:`genlab.metrics.bootstrap`: replicates on shared, paired resamples of the rows, and the percentile interval.

``tests/test_metrics.py`` checks each against Lab 5's reference functions and against torchmetrics, scipy and the
``prdc`` package where they define the same quantity.
"""
from genlab.metrics.bootstrap import paired_replicates, percentile_interval
from genlab.metrics.frechet import fid, frechet_distance, gaussian_stats
from genlab.metrics.kid import kid, mmd2_unbiased
from genlab.metrics.manifold import manifold_counts, precision_recall_density_coverage

__all__ = ["paired_replicates", "percentile_interval", "fid", "frechet_distance", "gaussian_stats", "kid",
           "mmd2_unbiased", "manifold_counts", "precision_recall_density_coverage"]
