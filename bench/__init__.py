"""Benchmarks: scripts that print a table and compare against a named baseline in the same run
(README, "Benchmarks"). A package so that mypy checks them with the code they measure."""
