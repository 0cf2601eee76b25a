"""Capacity: the search for the highest stable stream count (ours, or the harness's)."""
