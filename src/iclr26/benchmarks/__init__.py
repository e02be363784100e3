"""Papers of the benchmarks domain, one sub-package each."""
