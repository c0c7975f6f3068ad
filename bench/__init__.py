"""Benchmarks of the installed project, each a module run from the repository root as ``python -m bench.NAME``.

``python -m bench.run_all`` runs the registered ones and records what they print under ``bench/data/``,
beside the records of finished studies (progressive-shrinking runs, ablations, figures).
"""
