"""What the runs app announces to the apps that build on it (they subscribe; runs never imports them)."""
from django.dispatch import Signal

# Sent after each sync of a job, with `job` and `new_points` (the MetricPoints it added or changed).
# webapp.monitoring subscribes: metric rollups, the KL guard, protected checkpoints, retention.
job_synced = Signal()
