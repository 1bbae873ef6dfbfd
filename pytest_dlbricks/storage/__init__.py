"""What outlives a run: the brick store, its records, the cut models kept in it, and the
atomic files they are written to."""
