"""The layers' assets: raw, transformed and aggregated shadows, hourly partitioned."""
