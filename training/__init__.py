"""Training backends for the RLHF Workbench.

This package never imports Django: it runs on GPU hosts and talks to the web app only
through the run directory described in docs/run-directory.md.
"""
