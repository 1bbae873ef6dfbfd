"""The vocabulary every stage shares: the graph view, settings, errors, identities, noise and
the verdict's terms, and the one door to onnxruntime (:mod:`.runtime`)."""
