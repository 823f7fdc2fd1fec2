"""``python -m helmlog_evidence verify FILE --public-key KEY [--since CKPT]``.

Pattern: an argparse front for ``verify``: prints the verdict's line, exits 0
         when the bundle verifies, 1 naming the first failure, 2 on bad input.
Role:    helmlog_evidence; what an auditor runs without installing helmlog's
         runtime (``helmlog evidence verify`` prints the same verdict).

Laws: issue 30 item 4 (offline, public keys only, non-zero on failure).

Why argparse, not the helmlog CLI: importing ``helmlog`` loads the runtime;
this entry loads only this package, msgspec and cryptography.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from ._errors import EvidenceFormatError
from ._note import PublicKey
from ._verify import verify


def read_keys(paths_or_keys: Sequence[str]) -> list[PublicKey]:
    """Verifier keys from files (one key a line) or given inline.

    Raises:
        EvidenceFormatError: a key is malformed (``OSError`` for a bad file).
    """
    keys: list[PublicKey] = []
    for item in paths_or_keys:
        path = Path(item)
        lines = path.read_text().splitlines() if path.is_file() else [item]
        keys.extend(PublicKey.parse(line) for line in lines if line.strip())
    return keys


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; the exit code."""
    parser = argparse.ArgumentParser(prog="python -m helmlog_evidence")
    sub = parser.add_subparsers(dest="command", required=True)
    check = sub.add_parser("verify", help="verify an evidence bundle offline")
    check.add_argument("bundle", type=Path)
    check.add_argument("--public-key", action="append", required=True)
    check.add_argument("--since", type=Path, help="a signed checkpoint you kept")
    args = parser.parse_args(argv)
    try:
        keys = read_keys(args.public_key)
        since = args.since.read_text() if args.since is not None else None
        data = args.bundle.read_bytes()
    except (EvidenceFormatError, OSError, UnicodeDecodeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    verdict = verify(data, keys, since=since)
    print(verdict.text())
    return 0 if verdict.ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
