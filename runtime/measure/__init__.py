"""Measuring what runs: bench.py (`edgeserve bench`: cold start, latency percentiles, stages),
compare.py (`bench OUT`: every artifact side by side), loop_energy.py (its energy column)."""
