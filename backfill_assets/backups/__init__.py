"""Reading the backup tree: the contract (``contract``), the listing (``inventory``), Spark (``reader``)."""
