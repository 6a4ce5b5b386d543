"""The publish fence's processes (``python -c`` scripts; argv[1]: the warehouse): a holder
of layer raw's fence, which says "fenced" and lets go on a line on stdin; a waiter for the
raw and transformed fences, with a lock timeout (argv[2]); a publisher of raw's ledger
transactions under the fence, ``n`` of them once told to go. The fence tests run them
against a SQLite ledger and the stack's PostgreSQL one."""

HOLDER = """
import sys
from backfill_assets.core.warehouse import database
with database.fence(sys.argv[1], ["raw"]):
    print("fenced", flush=True)
    sys.stdin.readline()
print("released", flush=True)
"""

WAITER = """
import os, sys
os.environ["BACKFILL_LOCK_TIMEOUT_SECONDS"] = sys.argv[2]
from backfill_assets.core.warehouse import database
with database.fence(sys.argv[1], ["raw", "transformed"]):
    print("fenced", flush=True)
"""

# A publisher's ledger transaction of the raw layer's two tables, ``n`` times, under the
# fence as publish_release takes it: prepare rows (opening the transaction on each table),
# then the commit rows (closing it).
PUBLISHER = """
import sys, uuid
from backfill_assets.core.warehouse import database, ledger
warehouse, name, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
sys.stdin.readline()
for i in range(n):
    with database.fence(warehouse, ["raw"]):
        txn = uuid.uuid4().hex
        events = [
            ledger.event(t, "2026-11-20T00", ledger.PUBLISH, {"backfill_id": name}, name,
                         version=str(i), previous_location=None, new_location=f"{name}/{i}",
                         row_count=1, checksum=None, code_version=None, txn_id=txn)
            for t in ("raw.payloads", "raw.quarantine")
        ]
        ledger._open(warehouse, txn, events)
        ledger._close(warehouse, txn, ledger.stamp(events, ledger.COMMIT))
print("done", flush=True)
"""
