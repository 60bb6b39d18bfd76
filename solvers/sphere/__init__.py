"""S^2: spherical harmonics (shtns), weighted atoms, and the hand-over between them. (The public names: ``solvers``.)"""
