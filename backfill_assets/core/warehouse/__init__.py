"""The warehouse: tables and shadow versions, the ledger database, the publisher and its gates,
retention and erasure."""
