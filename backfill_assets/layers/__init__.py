"""The hourly layers: raw (``raw``), transformed (``transformed``), aggregated (``aggregated``)."""
