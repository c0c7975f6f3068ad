"""Deployment side: latency tables, accuracy predictor, evolutionary search, Pareto front."""
