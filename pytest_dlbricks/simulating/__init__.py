"""Counting the bricks instead of timing them: each distinct brick's calls run under valgrind's
callgrind in worker processes, their counts read from callgrind's output and composed."""
