"""Work that outlives one SSH call.

This package owns job manifests, the job runner with durable state, the
requirements (preflight) and inventory checks, submit, the poll-and-land tick,
the guarded fast-forward landing itself and the `tracks.json` reader. It may
import `lanes`, `dagu` and `bench`.
"""
