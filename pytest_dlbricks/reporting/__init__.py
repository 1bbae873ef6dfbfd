"""The run's report and what is done with reports: its entries, comparisons with a saved
run and the gate, merging shards, recomposing, exported maps and suites."""
