"""Dataset quality checks as pure functions (no Django, no database): text normalisation, the task-type
classifier, near-duplicate clusters (MinHash LSH), n-gram contamination, language detection and
chosen/rejected identity. The report service (webapp.datasets.quality_service) streams rows through them.

ALGORITHM is part of a stored report's cache key: bump it whenever a rule below changes what a report says,
so that reports computed by the old rules are recomputed instead of served.
"""
from __future__ import annotations

ALGORITHM = 1
