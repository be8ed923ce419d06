"""What runs on the node: the job's run, node groups, metrics over the measured window, provenance, the monitor."""
