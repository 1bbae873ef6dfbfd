"""Loading a model and cutting it into bricks: screening the file, loading it into the graph
view (with the reference run), cutting it into bricks and counting their work."""
