"""Dagu on a lane.

This package owns the pinned Dagu install, its config, start/stop/autostart,
the API client, run/watch/stop-run, the global queue, the job workflow YAML and
distributed mode (coordinator and workers with mTLS). Dagu is reached only
through SSH, so it uses the SSH choke point in `lanes.base.ssh`.
"""
