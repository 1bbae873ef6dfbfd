"""The pytest layer: options, the session and its engine, collection, items, tracking over
time, distribution over workers, and the command line."""
