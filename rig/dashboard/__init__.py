"""`nev rig dashboard`: a local page (127.0.0.1 only) of lanes, aliases, jobs, batches and floors.

`collect` has one small collector per source, each returning plain data or an `unavailable`
marker with the reason, so a missing source shows as such and never breaks the page; `plot`
draws the batch plots as inline SVG on the server; `page` renders the HTML (pure); `server`
serves it and refreshes the data in the background.
"""
