"""The synthetic backup tree follows shared/backup-format.md and carries the promised faults."""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np
import pytest
import zstandard

from backfill_assets.core.backups.contract import (
    MANIFEST_NAME,
    Rejected,
    format_iso_ms,
    parse_iso_ms,
    parse_line,
    received_outside_hour,
)
from backfill_assets_dev.generator import (
    MARKER_NAME,
    BackupTreeExistsError,
    GeneratorError,
    generate_backups,
    land_held_back,
    read_truth_payloads,
)
from backfill_assets_dev.generator import generate as generate_module
from backfill_assets_dev.generator.junk import ENCODING_ERRORS, KINDS, malformed_line
from backfill_assets_dev.generator.truth import read_truth_folders
from backfill_assets_dev.generator.world import build_url_pool, client_rng

START = "2026-11-20T00"
START_MS = parse_iso_ms("2026-11-20T00:00:00Z")
HOUR_MS = 3_600_000
DAY_MS = 24 * HOUR_MS
# Small and fast, with rates high enough that every fault shows up.
SHAPE = {
    "start": START,
    "hours": 3,
    "clients": 2,
    "users_per_client": 20,
    "seed": 11,
    "malformed_rate": 0.05,
    "duplicate_rate": 0.1,
    "late_hours_rate": 0.1,
    "late_days_rate": 0.05,
    "clock_ahead_rate": 0.2,
    "records_per_file": 10,
    "workers": 1,
}
FOLDER = re.compile(r"^date=(\d{4}-\d{2}-\d{2})/hour=(\d{2})/client_id=(\d+)$")


def folders_of(root: Path) -> dict[str, Path]:
    """Relative folder path (``date=.../hour=../client_id=N``) -> folder, raw/ and _held_back/."""
    out = {}
    for base in (root / "raw", root / "_held_back" / "raw"):
        for folder in sorted(base.glob("date=*/hour=*/client_id=*")):
            out[folder.relative_to(base).as_posix()] = folder
    return out


def read_folder(folder: Path) -> tuple[dict, list[bytes]]:
    """The manifest and the lines (without their newline) of a closed folder."""
    manifest = json.loads((folder / MANIFEST_NAME).read_text())
    lines: list[bytes] = []
    for entry in manifest["files"]:
        data = (
            zstandard.ZstdDecompressor()
            .decompressobj()
            .decompress((folder / entry["name"]).read_bytes())
        )
        assert data.endswith(b"\n")
        lines.extend(data[:-1].split(b"\n"))
    return manifest, lines


def folder_key(rel: str) -> tuple[int, int]:
    """(client_id, hour start ms) of a relative folder path."""
    date, hour, client = FOLDER.match(rel).groups()
    return int(client), parse_iso_ms(f"{date}T{hour}:00:00Z")


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, object]:
    root = tmp_path_factory.mktemp("backups")
    summary = generate_backups(root, **SHAPE)
    return root, summary


@pytest.fixture(scope="module")
def parsed(tree: tuple[Path, object]) -> dict:
    """Every line of the tree: accepted payloads (with their folder) and rejections."""
    root, _ = tree
    accepted, rejected = [], []
    for rel, folder in folders_of(root).items():
        client_id, hour_ms = folder_key(rel)
        _, lines = read_folder(folder)
        for line in lines:
            try:
                payload = parse_line(line, client_id, hour_ms)
            except Rejected as exc:
                rejected.append((rel, exc.code, line))
            else:
                accepted.append((rel, hour_ms, payload, json.loads(line)))
    return {"accepted": accepted, "rejected": rejected}


def test_layout_matches_the_contract(tree: tuple[Path, object]) -> None:
    root, summary = tree
    assert sorted(p.name for p in root.iterdir()) == [MARKER_NAME, "_truth", "raw"]
    rels = folders_of(root)
    assert len(rels) == summary.folders == 6  # 3 hours x 2 clients, all with traffic
    multi_part = 0
    for rel, folder in rels.items():
        date, hour, client = FOLDER.match(rel).groups()
        assert f"{date}T{hour}" in ("2026-11-20T00", "2026-11-20T01", "2026-11-20T02")
        assert client in ("1", "2")
        names = sorted(p.name for p in folder.iterdir())
        assert names[0] == MANIFEST_NAME  # "_" sorts before "p"
        parts = names[1:]
        assert parts == [f"part-{i:05d}.jsonl.zst" for i in range(len(parts))]
        multi_part += len(parts) > 1
    assert multi_part > 0  # records_per_file=10 splits folders
    assert summary.files == sum(len(list(f.glob("part-*"))) for f in rels.values())


def test_manifests_match_the_part_files(tree: tuple[Path, object]) -> None:
    root, summary = tree
    sizes = Counter()
    total_lines = 0
    for rel, folder in folders_of(root).items():
        client_id, hour_ms = folder_key(rel)
        manifest = json.loads((folder / MANIFEST_NAME).read_text())
        assert set(manifest) == {"client_id", "hour", "records", "files", "closed_at"}
        assert manifest["client_id"] == client_id
        assert manifest["hour"] == format_iso_ms(hour_ms)[:13] + ":00:00Z"
        closed_ms = parse_iso_ms(manifest["closed_at"])
        assert hour_ms + HOUR_MS < closed_ms < hour_ms + HOUR_MS + 60_000
        assert re.fullmatch(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z", manifest["closed_at"])
        assert manifest["records"] == sum(f["records"] for f in manifest["files"])
        for entry in manifest["files"]:
            data = (folder / entry["name"]).read_bytes()
            assert entry["bytes"] == len(data)
            assert entry["sha256"] == hashlib.sha256(data).hexdigest()
            stream = zstandard.ZstdDecompressor().decompressobj()
            text = stream.decompress(data)
            assert stream.eof and stream.unused_data == b""  # exactly one frame
            assert text.count(b"\n") == entry["records"] and text.endswith(b"\n")
            size = zstandard.get_frame_parameters(data).content_size
            sizes["unknown" if size == zstandard.CONTENTSIZE_UNKNOWN else "known"] += 1
        _, lines = read_folder(folder)
        assert len(lines) == manifest["records"]
        total_lines += len(lines)
    assert sizes["unknown"] > 0 and sizes["known"] > 0
    assert total_lines == summary.lines


def test_malformed_lines_are_rejected_and_every_other_line_accepted(
    tree: tuple[Path, object], parsed: dict
) -> None:
    root, summary = tree
    assert len(parsed["rejected"]) == summary.malformed > 0
    assert len(parsed["accepted"]) + summary.malformed == summary.lines
    truth_ids = {p["payload_id"] for p in read_truth_payloads(root)}
    assert {a[2].payload_id for a in parsed["accepted"]} <= truth_ids
    for _, _, line in parsed["rejected"]:
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and "payload_id" in record:
            assert record["payload_id"] not in truth_ids
    assert len({code for _, code, _ in parsed["rejected"]}) >= 3


def test_lines_agree_with_the_truth(tree: tuple[Path, object], parsed: dict) -> None:
    root, summary = tree
    truth = {p["payload_id"]: p for p in read_truth_payloads(root)}
    first_seen: dict[str, int] = {}
    for _, _, payload, _ in parsed["accepted"]:
        expected = truth[payload.payload_id]
        assert payload.client_id == expected["client_id"]
        assert payload.user_id == expected["user_id"]
        assert payload.event_time_ms == expected["event_time_ms"]
        assert payload.event_type == expected["event_type"]
        assert payload.page_url == expected["page_url"]
        assert payload.device == expected["device"]
        assert payload.referrer == expected["referrer"]
        assert payload.schema_version == expected["schema_version"]
        previous = first_seen.get(payload.payload_id, payload.received_at_ms)
        first_seen[payload.payload_id] = min(previous, payload.received_at_ms)
    in_tree = {pid for pid, p in truth.items() if p["in_tree"]}
    assert set(first_seen) == in_tree
    assert len(in_tree) == summary.payloads_in_tree
    assert len(truth) == summary.payloads > len(in_tree)  # some arrive after the range
    for pid, received in first_seen.items():
        assert truth[pid]["received_at_ms"] == received
        assert truth[pid]["received_hour"] == format_iso_ms(received)[:13]
    copies = Counter(a[2].payload_id for a in parsed["accepted"])
    assert all(truth[pid]["copies_in_tree"] == n for pid, n in copies.items())


def test_lines_are_ordered_by_received_at(parsed: dict) -> None:
    """In delivery order; a redelivery after a restart carries its first delivery's time."""
    by_folder = defaultdict(list)
    seen: set[str] = set()
    for rel, _, payload, _ in parsed["accepted"]:
        if payload.payload_id not in seen:
            by_folder[rel].append(payload.received_at_ms)
        seen.add(payload.payload_id)
    for received in by_folder.values():
        assert received == sorted(received)


def test_lines_received_outside_their_folder_hour_are_valid_and_counted(tmp_path: Path) -> None:
    """Contract: received_at outside the folder's hour is valid; the truth counts them."""
    root = tmp_path / "backups"
    summary = generate_backups(root, **{**SHAPE, "duplicate_rate": 0.5, "malformed_rate": 0.0})
    outside: Counter[str] = Counter()
    for rel, folder in folders_of(root).items():
        client_id, hour_ms = folder_key(rel)
        for line in read_folder(folder)[1]:
            outside[rel] += received_outside_hour(parse_line(line, client_id, hour_ms), hour_ms)
    assert summary.received_outside_hour == sum(outside.values()) > 0
    truth = {
        f"date={f['hour'][:10]}/hour={f['hour'][11:13]}/client_id={f['client_id']}": f[
            "received_outside_hour"
        ]
        for f in read_truth_folders(root)
    }
    assert truth == dict(outside)


def test_both_schema_versions_in_the_same_hour(parsed: dict) -> None:
    versions = defaultdict(set)
    omitted = extra_keys = 0
    known = {
        "schema_version",
        "payload_id",
        "client_id",
        "user_id",
        "event_time",
        "event_time_ms",
        "received_at",
        "event_type",
        "page_url",
        "device",
        "referrer",
    }
    for rel, _, payload, record in parsed["accepted"]:
        versions[rel].add(payload.schema_version)
        omitted += "schema_version" not in record
        extra_keys += bool(set(record) - known)
        if payload.schema_version == 1:
            assert "event_time" in record and "event_time_ms" not in record
            assert "referrer" not in record
            assert record["event_time"] == format_iso_ms(payload.event_time_ms)
        else:
            assert "event_time_ms" in record and "event_time" not in record
        assert record["received_at"] == format_iso_ms(payload.received_at_ms)
    assert any(v == {1, 2} for v in versions.values())
    assert omitted > 0
    v2 = [r for _, _, p, r in parsed["accepted"] if p.schema_version == 2]
    assert any("referrer" not in r for r in v2)
    assert any(r.get("referrer") is None and "referrer" in r for r in v2)
    assert any(isinstance(r.get("referrer"), str) for r in v2)


def test_late_arrivals_land_in_later_hours(parsed: dict) -> None:
    hours_late = days_late = 0
    for _, hour_ms, payload, _ in parsed["accepted"]:
        event_hour = payload.event_time_ms // HOUR_MS * HOUR_MS
        delay = payload.received_at_ms - payload.event_time_ms
        if event_hour < hour_ms and HOUR_MS <= delay < DAY_MS:
            hours_late += 1
        if event_hour < hour_ms and delay >= DAY_MS:
            assert delay <= 7 * DAY_MS + 1
            days_late += 1
    assert hours_late > 0 and days_late > 0


def test_clock_ahead_payloads_exist(tree: tuple[Path, object], parsed: dict) -> None:
    _, summary = tree
    ahead = [p for _, _, p, _ in parsed["accepted"] if p.event_time_ms > p.received_at_ms]
    assert ahead
    assert all(p.event_time_ms - p.received_at_ms <= 300_000 for p in ahead)
    assert len({p.payload_id for p in ahead}) == summary.clock_ahead


def test_duplicates_differ_only_in_received_at(tree: tuple[Path, object], parsed: dict) -> None:
    _, summary = tree
    copies = defaultdict(list)
    for _, _, payload, record in parsed["accepted"]:
        copies[payload.payload_id].append(record)
    repeated = {pid: records for pid, records in copies.items() if len(records) > 1}
    assert repeated
    assert sum(len(r) - 1 for r in repeated.values()) == summary.duplicates
    for records in repeated.values():
        bodies = [{k: v for k, v in r.items() if k != "received_at"} for r in records]
        assert all(body == bodies[0] for body in bodies)
        first = min(r["received_at"] for r in records)
        # a quick re-send has its own received_at; one after a restart keeps the first's
        assert all(r["received_at"] >= first for r in records)


def test_page_urls_have_realistic_variety() -> None:
    urls = build_url_pool(client_rng(7, 1), 1).urls
    assert all(re.match(r"^https?://", u) for u in urls)
    assert any(re.search(r"[?&]utm_source=", u) for u in urls)
    assert any(re.search(r"[?&](UTM_Source|Utm_Source|utm_SOURCE)=", u) for u in urls)
    assert any("#" in u for u in urls)
    assert any(re.match(r"^https?://[^/]*[A-Z]", u) for u in urls)
    assert any(re.match(r"^(https://[^/]+:443|http://[^/]+:80)/", u) for u in urls)
    assert any(re.match(r"^https?://[^/]+/.+/(\?|#|$)", u) for u in urls)


def test_every_malformed_line_is_rejected_for_a_contract_reason() -> None:
    rng = np.random.default_rng(0)
    codes = Counter()
    for _ in range(1000):
        line = malformed_line(rng, 3, START_MS).encode("utf-8", ENCODING_ERRORS)
        assert b"\n" not in line
        with pytest.raises(Rejected) as info:
            parse_line(line, 3, START_MS)
        codes[info.value.code] += 1
    assert set(codes) == {
        "not_utf8",
        "not_json",
        "not_object",
        "missing_field",
        "wrong_type",
        "unknown_event_type",
    }
    assert len(KINDS) == 8


def tree_digest(root: Path) -> dict[str, str]:
    return {
        p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def test_same_seed_same_bytes_whatever_the_workers(tmp_path: Path) -> None:
    args = {**SHAPE, "hold_back": ["2026-11-20T01/2"]}
    generate_backups(tmp_path / "a", **{**args, "workers": 1})
    generate_backups(tmp_path / "b", **{**args, "workers": 2})
    generate_backups(tmp_path / "c", **{**args, "seed": 12})
    a, b, c = (tree_digest(tmp_path / name) for name in "abc")
    assert len(a) > 15
    assert a == b
    assert a != c
    assert a.keys() & c.keys()
    assert any(a[k] != c[k] for k in a.keys() & c.keys())


def test_hold_back_then_land(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    summary = generate_backups(
        tmp_path, **{**SHAPE, "hold_back": ["2026-11-20T01", "2026-11-20T02/1"]}
    )
    held = [
        "raw/date=2026-11-20/hour=01/client_id=1",
        "raw/date=2026-11-20/hour=01/client_id=2",
        "raw/date=2026-11-20/hour=02/client_id=1",
    ]
    assert summary.held_back == 3
    assert summary.held_back_folders == [f"_held_back/{rel}" for rel in held]
    for rel in held:
        assert (tmp_path / "_held_back" / rel / MANIFEST_NAME).exists()
        assert not (tmp_path / rel).exists()
    assert (tmp_path / "raw/date=2026-11-20/hour=02/client_id=2" / MANIFEST_NAME).exists()
    before = tree_digest(tmp_path / "_held_back")  # keys "raw/date=..."

    moves: list[str] = []
    real_replace = os.replace

    def recording_replace(src: str | os.PathLike, dst: str | os.PathLike) -> None:
        moves.append(Path(dst).relative_to(tmp_path).as_posix())
        real_replace(src, dst)

    monkeypatch.setattr(generate_module.os, "replace", recording_replace)
    assert land_held_back(tmp_path) == held
    monkeypatch.undo()

    for rel in held:
        in_folder = [m for m in moves if m.startswith(rel + "/")]
        assert in_folder[-1].endswith(MANIFEST_NAME)  # manifest last
        assert len(in_folder) >= 2
    assert not (tmp_path / "_held_back").exists()
    assert before.items() <= tree_digest(tmp_path).items()  # the same bytes, now in raw/
    assert land_held_back(tmp_path) == []


def test_land_refuses_to_replace_a_closed_folder(tmp_path: Path) -> None:
    generate_backups(tmp_path, **{**SHAPE, "hold_back": ["2026-11-20T01/1"]})
    rel = "raw/date=2026-11-20/hour=01/client_id=1"
    target = tmp_path / rel
    target.mkdir(parents=True)
    (target / MANIFEST_NAME).write_text("{}")
    with pytest.raises(GeneratorError, match="already closed"):
        land_held_back(tmp_path)


def test_refuses_to_write_into_an_existing_tree(tmp_path: Path) -> None:
    generate_backups(tmp_path, **SHAPE)
    first = tree_digest(tmp_path)
    (tmp_path / "README.txt").write_text("not ours")
    with pytest.raises(BackupTreeExistsError, match=re.escape(str(tmp_path / "raw"))) as info:
        generate_backups(tmp_path, **SHAPE)
    assert "--force" in str(info.value)
    assert {k: v for k, v in tree_digest(tmp_path).items() if k != "README.txt"} == first
    generate_backups(tmp_path, **{**SHAPE, "seed": 99}, force=True)
    generate_backups(tmp_path, **SHAPE, force=True)
    again = tree_digest(tmp_path)
    assert again.pop("README.txt")
    assert again == first


def test_force_never_deletes_a_tree_the_generator_did_not_write(tmp_path: Path) -> None:
    """Issue 9 item 6: --force deleted a foreign backup tree, foreign file included."""
    from backfill_assets_tests.helpers.backups import write_backup_folder, zst

    foreign = tmp_path / "backups"
    write_backup_folder(foreign, "2026-11-20T00", 1, {"part-00000.jsonl.zst": zst(["{}"])})
    (foreign / "raw" / "NOTES.txt").write_text("the backup tool's notes")
    before = tree_digest(foreign)
    with pytest.raises(BackupTreeExistsError, match=f"no {MARKER_NAME}.*nothing was deleted"):
        generate_backups(foreign, **SHAPE, force=True)
    assert tree_digest(foreign) == before
    assert not (foreign / MARKER_NAME).exists()


def test_force_never_deletes_a_foreign_file_inside_a_generated_tree(tmp_path: Path) -> None:
    generate_backups(tmp_path, **SHAPE)
    assert (tmp_path / MARKER_NAME).is_file()
    for rel in (
        "raw/date=2026-11-20/hour=00/client_id=1/copied-by-hand.jsonl.zst",
        "raw/date=2026-11-20/hour=00/client_id=x/part-00000.jsonl.zst",
        "_truth/my-analysis.csv",
        "_held_back/keep.txt",
    ):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("not the generator's")
        before = tree_digest(tmp_path)
        with pytest.raises(BackupTreeExistsError, match="nothing was deleted") as info:
            generate_backups(tmp_path, **SHAPE, force=True)
        named = str(info.value).split(" was not written")[0].split(" (and ")[0]
        assert named.endswith((rel.split("/")[-1], "client_id=x")), (rel, named)
        assert tree_digest(tmp_path) == before, rel
        (tmp_path / rel).unlink()
        if rel.endswith("part-00000.jsonl.zst"):
            (tmp_path / rel).parent.rmdir()
    generate_backups(tmp_path, **SHAPE, force=True)  # only its own files left: allowed


def test_land_refuses_a_tree_the_generator_did_not_write(tmp_path: Path) -> None:
    generate_backups(tmp_path, **{**SHAPE, "hold_back": ["2026-11-20T01/1"]})
    (tmp_path / MARKER_NAME).unlink()
    (tmp_path / "_truth" / "summary.json").unlink()
    with pytest.raises(GeneratorError, match=f"no {MARKER_NAME}.*nothing was moved"):
        land_held_back(tmp_path)
    assert (tmp_path / "_held_back/raw/date=2026-11-20/hour=01/client_id=1").is_dir()


def test_without_truth(tmp_path: Path) -> None:
    summary = generate_backups(tmp_path, **SHAPE, write_truth=False)
    assert not (tmp_path / "_truth").exists()
    assert summary.lines > 0


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"malformed_rate": 1.5}, "malformed_rate must be a number between 0 and 1"),
        ({"v2_share": -0.1}, "v2_share must be a number between 0 and 1"),
        ({"hours": 0}, "hours must be an integer >= 1"),
        ({"clients": True}, "clients must be an integer >= 1"),
        ({"start": "2026-11-20 00"}, "invalid hour"),
        ({"late_hours_rate": 0.6, "late_days_rate": 0.6}, "at most 1"),
        ({"hold_back": ["2026-11-21T00"]}, "outside the generated range"),
        ({"hold_back": ["2026-11-20T01/9"]}, "client_id 9 is not one of 1..2"),
        ({"hold_back": ["yesterday"]}, "invalid hold-back spec"),
    ],
)
def test_bad_arguments_are_refused(tmp_path: Path, change: dict, message: str) -> None:
    with pytest.raises(GeneratorError, match=re.escape(message)):
        generate_backups(tmp_path, **{**SHAPE, **change})
    assert not (tmp_path / "raw").exists()


def test_refuses_object_store_uris() -> None:
    with pytest.raises(GeneratorError, match="local paths only"):
        generate_backups("s3://bucket/backups", **SHAPE)


def test_describe_reads_as_a_paragraph(tree: tuple[Path, object]) -> None:
    _, summary = tree
    text = summary.describe()
    assert "\n" not in text
    assert f"{summary.lines:,} lines" in text and "malformed" in text


def test_workers_end_when_the_parent_ignores_sigterm(tmp_path: Path) -> None:
    """Dagster maps SIGTERM to SIGINT's handler, which a process started in the background
    ignores; spawned workers inherit that. The pool is closed and joined (its workers end on
    their own, SIGTERM restored in them), so generation returns and leaves no child."""
    import multiprocessing
    import signal

    previous = signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        generate_backups(tmp_path / "a", **{**SHAPE, "workers": 2})
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert multiprocessing.active_children() == []
    assert tree_digest(tmp_path / "a")
