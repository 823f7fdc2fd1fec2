"""``helmlog evidence``: bundles, checkpoints, keys, and offline verification.

Pattern: a Typer group whose default is the export (``helmlog evidence
         SESSION`` runs ``export``), with ``verify``, ``checkpoint`` and
         ``keygen``; each command is a few lines over ``helmlog.events``
         (``session_bundle``, ``log_checkpoint``) and ``helmlog_evidence``.
Role:    the face; registers ``evidence`` on the one app.

Laws: issue 30 items 1, 4 and 5 (exit 0 when a bundle verifies, 1 naming the
first failure, 2 on bad input; the private key file is mode 0600).

Why ``verify`` imports nothing of the runtime itself: it prints exactly what
``python -m helmlog_evidence verify`` prints, which an auditor runs alone.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from typer.core import TyperGroup

import helmlog_evidence
from helmlog import HelmlogError
from helmlog._record import chain_key_from_env
from helmlog.events import (
    EventStore,
    HeadSigner,
    log_checkpoint,
    open_event_store,
    session_bundle,
)

from ._app import ReadStore, app, fail, store_or_exit

SIGNING_KEY_ENV = "HELMLOG_SIGNING_KEY"
KEY_HELP = (
    "The signer key file (PRIVATE+KEY+...) that signs the checkpoint. "
    "Default: $HELMLOG_SIGNING_KEY."
)
ORIGIN_HELP = "The log's origin line. Default: helmlog/heads/<key name>."
OUT_HELP = "Write the bundle to this file."
SINCE_EXPORT_HELP = (
    "A checkpoint an auditor kept: the bundle also carries the proof that "
    "the log grew from it (repeatable)."
)
PUBLIC_KEY_HELP = (
    "A verifier key (NAME+ID+KEY) or a file of them, one a line "
    "(repeatable: old keys after a rotation)."
)
SINCE_HELP = (
    "A signed checkpoint you kept earlier: the bundle's checkpoint must "
    "extend it, or the log was rewritten."
)


class _EvidenceGroup(TyperGroup):
    """``helmlog evidence SESSION ...`` is ``helmlog evidence export SESSION``."""

    # ``ctx`` is the click Context Typer vendors, which it does not export.
    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        if args and not args[0].startswith("-") and args[0] not in self.commands:
            args = ["export", *args]
        return super().parse_args(ctx, args)


evidence_app = typer.Typer(
    cls=_EvidenceGroup,
    name="evidence",
    help=(
        "Evidence an auditor checks alone: helmlog evidence SESSION --out FILE "
        "writes a session's bundle; verify, checkpoint and keygen."
    ),
    no_args_is_help=True,
    rich_markup_mode=None,
)
app.add_typer(evidence_app, name="evidence")


def _signing_key(path: Path | None) -> helmlog_evidence.SigningKey:
    chosen = path or (Path(p) if (p := os.environ.get(SIGNING_KEY_ENV)) else None)
    if chosen is None:
        typer.echo(
            f"helmlog evidence needs a signing key: pass --key FILE or set "
            f"${SIGNING_KEY_ENV}",
            err=True,
        )
        raise typer.Exit(2)
    return helmlog_evidence.SigningKey.parse(chosen.read_text())


def _open(url: str, key: helmlog_evidence.SigningKey) -> EventStore:
    store = open_event_store(
        url, chain_key=chain_key_from_env(), signer=HeadSigner(key)
    )
    return store


@evidence_app.command("export")
def export_command(
    session: Annotated[str, typer.Argument(help="The session id.")],
    out: Annotated[Path, typer.Option(help=OUT_HELP)],
    store: ReadStore = None,
    key: Annotated[Path | None, typer.Option(help=KEY_HELP, metavar="FILE")] = None,
    origin: Annotated[str | None, typer.Option(help=ORIGIN_HELP)] = None,
    since: Annotated[
        list[Path] | None, typer.Option(help=SINCE_EXPORT_HELP, metavar="CHECKPOINT")
    ] = None,
) -> None:
    """Write a session's evidence bundle: its events, signed head, a signed
    checkpoint and the proofs."""
    import asyncio

    err = Console(stderr=True)
    url = store_or_exit(store, "evidence")
    try:
        signer = _signing_key(key)
        sizes = [_size_of(path) for path in since or []]

        async def go() -> helmlog_evidence.Bundle:
            opened = _open(url, signer)
            try:
                return await session_bundle(
                    opened, session, signer, origin=origin, since_sizes=sizes
                )
            finally:
                await opened.close()

        bundle = asyncio.run(go())
        out.write_bytes(helmlog_evidence.encode_bundle(bundle))
    except (HelmlogError, helmlog_evidence.EvidenceError, OSError) as exc:
        raise fail(err, "evidence", exc) from exc
    typer.echo(
        f"wrote {out}: session {session}, {len(bundle.records)} events, "
        f"head leaf {bundle.leaf_index}"
    )


def _size_of(path: Path) -> int:
    text = path.read_text().split("\n\n", 1)[0] + "\n"
    return helmlog_evidence.Checkpoint.parse(text).size


@evidence_app.command("verify")
def verify_command(
    bundle: Annotated[Path, typer.Argument(help="The bundle file.")],
    public_key: Annotated[list[str], typer.Option(help=PUBLIC_KEY_HELP, metavar="KEY")],
    since: Annotated[
        Path | None, typer.Option(help=SINCE_HELP, metavar="CHECKPOINT")
    ] = None,
) -> None:
    """Verify a bundle offline with public keys alone; exit 1 naming the
    first thing that fails."""
    from helmlog_evidence.__main__ import main

    args = ["verify", str(bundle)]
    for item in public_key:
        args += ["--public-key", item]
    if since is not None:
        args += ["--since", str(since)]
    raise typer.Exit(main(args))


@evidence_app.command("checkpoint")
def checkpoint_command(
    store: ReadStore = None,
    key: Annotated[Path | None, typer.Option(help=KEY_HELP, metavar="FILE")] = None,
    origin: Annotated[str | None, typer.Option(help=ORIGIN_HELP)] = None,
) -> None:
    """Print the log's latest signed checkpoint, for an auditor or a witness
    to keep."""
    import asyncio

    err = Console(stderr=True)
    url = store_or_exit(store, "evidence checkpoint")
    try:
        signer = _signing_key(key)

        async def go() -> str:
            opened = _open(url, signer)
            try:
                return await log_checkpoint(opened, signer, origin)
            finally:
                await opened.close()

        note = asyncio.run(go())
    except (HelmlogError, helmlog_evidence.EvidenceError, OSError) as exc:
        raise fail(err, "evidence checkpoint", exc) from exc
    typer.echo(note, nl=False)


@evidence_app.command("keygen")
def keygen_command(
    out: Annotated[Path, typer.Option(help="The folder to write the pair in.")],
    name: Annotated[str, typer.Option(help="The key's name.")] = "helmlog",
) -> None:
    """Write an Ed25519 key pair: NAME.key (private, mode 0600) and
    NAME.vkey (the verifier key to hand to auditors)."""
    err = Console(stderr=True)
    try:
        key = helmlog_evidence.SigningKey.generate(name)
        out.mkdir(parents=True, exist_ok=True)
        private, public = out / f"{name}.key", out / f"{name}.vkey"
        if private.exists():
            raise FileExistsError(f"{private} exists; keygen never overwrites a key")
        fd = os.open(private, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(key.text() + "\n")
        public.write_text(key.public.text() + "\n")
    except (helmlog_evidence.EvidenceError, OSError) as exc:
        raise fail(err, "evidence keygen", exc) from exc
    typer.echo(f"wrote {private} (private, 0600) and {public}: {key.public.text()}")
