"""Benchmark: the real VSS perf harness run against the service."""
