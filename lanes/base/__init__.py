"""The foundation every package stands on: settings, errors, exit codes, masking, the git and SSH
choke points, JSON files, crontab lines, process groups and terminal output.

Nothing here knows about lanes, jobs or the rig: these modules import only the standard library,
third-party packages and each other. Other packages import `lanes.base` freely and, from the rest
of `lanes`, only the named lane entry points (see tests/test_architecture.py).
"""
