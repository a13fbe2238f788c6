"""Truth-free evidence of leakage and the estimated risk band a reviewer gets without the client's images.

* ``labels``: how determined the recovered labels are (agreement between methods, integrality of the counts);
* ``channels``: exact channels of the update (an analytic input recovery through a linear first layer, the BN
  batch statistics, RGLA's residuals);
* ``reconstruction``: how far the attack explained the update (gradient distance against a blank and random
  images), agreement between independent restarts, a natural-image score;
* ``estimate``: the frozen rule (fitted by ``benchmarks/verdict.py``, docs/results/verdict.md) that turns that
  evidence into ``risk_band_estimated`` with a confidence.
"""
