"""The rig as a whole, and the `nev` entry point.

This package owns the inventory (advertise, collect, probe, status), the
folknet declaration as seen live, snapshot and restore of every role's serving
configuration, capacity and throughput, the status dashboard and the
rig-in-a-box. Its CLI module is the one entry point and may import every other
package.
"""
