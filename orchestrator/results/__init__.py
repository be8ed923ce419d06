"""The result file a job writes, its layout and check, and the collector that lands it in the store."""
