"""Timing the bricks: the brick models synthesized, run and timed, the inference call's cost,
the probes of the parallel executor, the machine's load and speed while the run lasts."""
