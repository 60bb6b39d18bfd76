"""The homogenized limit's stochastic density equation (common noise), on the circle and on S^2. (The public names: ``solvers``.)"""
