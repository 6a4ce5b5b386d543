"""What a release did, told to people: diffs of published data, charts, the rendered report."""
