"""Isolation for upstream servers: bubblewrap and container launchers, limits, seccomp, ``doctor`` checks."""
