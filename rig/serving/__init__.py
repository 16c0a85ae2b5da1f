"""Operating the serving tier: declared serving roles, drain/stop/start through HAProxy's runtime API, drift, sudo."""
