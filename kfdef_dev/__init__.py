"""Development machinery, not shipped: the embedded control plane, the operator as a child process, and
the demo. Used by ``make demo``, the tests and the benchmarks."""
