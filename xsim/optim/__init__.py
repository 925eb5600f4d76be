"""Optimization: in-place optimizers on xsim arrays, objectives over chosen parameters, scipy's
L-BFGS-B behind one call."""

from .losses import add_body_point_distance, add_squared_distance, new_loss
from .objective import Objective, Parameter, minimize
from .updates import SGD, Adam, flat_view

__all__ = ["SGD", "Adam", "Objective", "Parameter", "add_body_point_distance", "add_squared_distance", "flat_view", "minimize",
           "new_loss"]
