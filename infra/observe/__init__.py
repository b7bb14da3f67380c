"""Observability: health checks, metrics (Prometheus text, EMF lines) and their sums across
worker processes."""
