"""Pure attention on the line (d = 1): finite volumes and mass coordinates. (The public names: ``solvers``.)"""
