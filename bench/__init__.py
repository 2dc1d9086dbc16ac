"""Benchmarks of kfdef-operator against kubectl and raw server-side apply (``python -m bench``)."""
