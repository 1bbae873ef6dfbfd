"""From brick times to a model's estimate: composition, calibration, the analysis of where
the time goes, and validation against the whole model."""
