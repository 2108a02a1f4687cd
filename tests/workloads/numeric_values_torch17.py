"""numeric_values.py on torch 1.7 (Debian bullseye), whose torch lacks three functions
the reference's numeric mode calls (nanmean and nanmedian came in 1.10, nan_to_num in
1.8): each is given here only where it is missing, from functions 1.7 has, with the
same results (nanmedian: the lower median of the non-NaN values, as torch.median gives;
nanmean: their mean; both NaN when none is left). The model and its work are
numeric_values.py's, unchanged; nothing here touches what the model computes."""
import os
import sys

import torch


def _kept(x):
    return x[~torch.isnan(x)]


def _nanmean(x):
    kept = _kept(x)
    return kept.mean() if kept.numel() else torch.tensor(float("nan"), dtype=x.dtype)


def _nanmedian(x):
    kept = _kept(x)
    return kept.median() if kept.numel() else torch.tensor(float("nan"), dtype=x.dtype)


def _nan_to_num(x, nan=0.0):
    return torch.where(torch.isnan(x), torch.full_like(x, nan), x)


for name, fn in (("nanmean", _nanmean), ("nanmedian", _nanmedian), ("nan_to_num", _nan_to_num)):
    if not hasattr(torch, name):
        setattr(torch, name, fn)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from numeric_values import Model, build, run  # noqa: E402,F401
