"""Reading the backup tree: the contract (``contract``), the listing (``inventory``),
and Spark (``reader``)."""
