"""A web process freezes its startup heap: a full garbage collection no longer walks the ~125k objects of the
loaded apps and views on whichever request it falls on."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
PROBE = """
import gc, json, sys, time
import webapp.wsgi  # what gunicorn and runserver load
t = time.perf_counter(); gc.collect(); full = time.perf_counter() - t
print(json.dumps({"frozen": gc.get_freeze_count(), "left": len(gc.get_objects()), "full_ms": full * 1000,
                  "views": "webapp.monitoring.views" in sys.modules}))
"""


def test_the_wsgi_application_freezes_its_loaded_views_out_of_the_collectors_walks():
    env = dict(os.environ, DJANGO_SETTINGS_MODULE="webapp.settings")
    out = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    probe = json.loads(out.stdout.strip().splitlines()[-1])
    assert probe["views"]  # the URLconf and its views were loaded before the freeze
    assert probe["frozen"] > 50_000 and probe["left"] < probe["frozen"] / 10, probe
