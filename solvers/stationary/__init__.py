"""Stationary states, their continuation in a parameter, bifurcation diagrams."""
