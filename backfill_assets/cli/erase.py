"""``backfill-assets erase``: record a user's erasure and request the release that removes them."""

from __future__ import annotations

import argparse

from backfill_assets.cli.main import CommandError


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "erase",
        help="erase a user: keep them out of every build and purge every version holding them",
        description="Record an erasure request (a salted digest of client and user, never "
        "the id) in audit.erasures; from then on every build leaves the user's lines out. "
        "Requests one release of every published hour that holds the user; once it is "
        "published, every older version holding them is purged. Runs as a Dagster run of "
        "the erase_user job.",
    )
    p.add_argument("--client", type=int, required=True, help="the user's client_id")
    p.add_argument("--user", required=True, help="the user_id to erase")
    p.add_argument("--reason", required=True, help="why (the request's reference)")
    p.add_argument("--requested-at", default="", help="when the user asked (ISO 8601, UTC)")
    p.add_argument("--ticket", default="", help="ticket reference")
    p.add_argument("--requested-by", help="who records it (default: the current user)")
    p.set_defaults(handler=run_erase, validate=validate)


def validate(args: argparse.Namespace) -> dict:
    """The job's config (digest computed here), or one line naming the bad argument."""
    from datetime import datetime

    from backfill_assets.core.warehouse import erasure

    if args.client < 0:
        raise CommandError("--client must not be negative")
    if not args.user.strip():
        raise CommandError("--user must not be empty")
    if not args.reason.strip():
        raise CommandError("--reason must say why")
    if args.requested_at:
        try:
            datetime.fromisoformat(args.requested_at.replace("Z", "+00:00"))
        except ValueError:
            raise CommandError(
                f"--requested-at {args.requested_at!r}: expected ISO 8601 (2026-11-20T10:00Z)"
            ) from None
    return {
        "client_id": args.client,
        "user_digest": erasure.user_digest(args.client, args.user.strip()),
        "reason": args.reason.strip(),
        "requested_at": args.requested_at,
        "ticket": args.ticket,
    }


def run_erase(args: argparse.Namespace) -> int:
    import getpass

    from backfill_assets.cli.backfill import run_job
    from backfill_assets.core import tags
    from backfill_assets.defs.jobs.erase import ERASE_JOB, ERASE_OP

    return run_job(
        args,
        ERASE_JOB,
        ERASE_OP,
        validate(args),
        {tags.MODE: "erasure", tags.REQUESTED_BY: args.requested_by or getpass.getuser()},
        "erasure",
        f" (client {args.client})",
    )
