"""jobgate's benchmarks: ratios against the peers, measured side by side in one run."""
