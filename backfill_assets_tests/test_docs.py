"""The docs' copy of the backup-format contract is the contract, word for word.

The contract lives beside the repository (``../shared/backup-format.md``, what the backup
tool's owners publish); ``docs/backup-format.md`` is its copy for readers of a clone."""

import pytest

from backfill_assets.settings import PROJECT_ROOT

CONTRACT = PROJECT_ROOT.parent / "shared" / "backup-format.md"
COPY = PROJECT_ROOT / "docs" / "backup-format.md"


@pytest.mark.skipif(not CONTRACT.is_file(), reason="no shared/backup-format.md beside the clone")
def test_the_docs_copy_of_the_contract_is_the_contract():
    assert COPY.read_text() == CONTRACT.read_text(), (
        f"docs/backup-format.md differs from {CONTRACT}: copy it again (cp {CONTRACT} {COPY})"
    )
