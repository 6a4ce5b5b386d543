"""The jobs an operator runs: rollback, vacuum (retention), erase (erasure), and the record of
a cancellation; each wires its engine in ``core.warehouse``."""
