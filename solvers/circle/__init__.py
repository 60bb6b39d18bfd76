"""The circle: finite volumes, Fourier, mass coordinates, and the hand-overs between them. (The public names: ``solvers``.)"""
