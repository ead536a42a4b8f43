"""Identity flags shared by the commands, and `certs init`, `token create/revoke`.

Every command that talks to a controller, and the controller and proxy
themselves, take:

  --certs DIR          DIR/ca.crt plus DIR/<role>.crt and .key (as written by
                       `servefleet certs init`); the role is the command's:
                       controller, proxy, or admin for the client commands
  --cluster-ca/--cluster-cert/--cluster-key FILE
                       the same files named one by one (they win over --certs)
  --token TOKEN        a bearer token (client commands; default $SERVEFLEET_TOKEN)

Without any of them the environment is read (SERVEFLEET_CERTS,
SERVEFLEET_CLUSTER_CA/_CERT/_KEY), and without that: plain text.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from servefleet._private.security import revocation, tokens
from servefleet._private.security.certs import PEOPLE_ROLES, ROLES, init_certs, issue_cert
from servefleet._private.security.roles import TOKEN_ROLES
from servefleet._private.security.tls import (
    ENV_CERTS,
    ENV_TOKEN,
    Credentials,
    TlsConfigError,
    TlsFiles,
)

from . import helptext
from .errors import UsageError


def add_tls_flags(parser: argparse.ArgumentParser, role: str) -> None:
    group = parser.add_argument_group("mutual TLS")
    group.add_argument("--certs", metavar="DIR", default=None,
                       help=f"DIR/ca.crt, DIR/{role}.crt and DIR/{role}.key "
                            "(servefleet certs init DIR); default: $SERVEFLEET_CERTS")
    for part in ("ca", "cert", "key"):
        group.add_argument(f"--cluster-{part}", metavar="FILE", default=None,
                           help=f"the {part} file, instead of the one under --certs")
    parser.set_defaults(tls_role=role)


def add_client_flags(parser: argparse.ArgumentParser) -> None:
    add_tls_flags(parser, "admin")
    add_server_name_flag(parser)
    parser.add_argument("--token", default=None,
                        help=f"bearer token for the controller (default: ${ENV_TOKEN})")


def add_server_name_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--controller-server-name", default=None, metavar="NAME",
                        help="with TLS: the name to expect in the controllers' certificates "
                             "instead of the address dialled (a Service or Pod IP no "
                             "certificate names), e.g. controller.servefleet, which servefleet "
                             "certs init puts in the controller's (default: the address)")


def _server_name(args: argparse.Namespace) -> str | None:
    name = getattr(args, "controller_server_name", None)
    if name is not None and (not name or any(c.isspace() or c in "/:@" for c in name)):
        raise UsageError(f"--controller-server-name {name!r}: a DNS name the controllers' "
                         "certificates carry (e.g. controller.servefleet)")
    return name


def tls_files(args: argparse.Namespace, role: str | None = None) -> TlsFiles | None:
    try:
        return TlsFiles.from_settings(role or args.tls_role, args.certs, args.cluster_ca,
                                      args.cluster_cert, args.cluster_key)
    except TlsConfigError as e:
        raise UsageError(str(e)) from None


def credentials(args: argparse.Namespace) -> Credentials:
    token = args.token or os.environ.get(ENV_TOKEN) or None
    try:
        return Credentials(tls_files(args), token, _server_name(args))
    except TlsConfigError as e:  # a token no gRPC client can send
        raise UsageError(f"{'--token' if args.token else '$' + ENV_TOKEN}: {e}") from None


def add_controller_flags(parser: argparse.ArgumentParser) -> None:
    add_tls_flags(parser, "controller")
    group = parser.add_argument_group("replicas, etcd and tokens")
    group.add_argument("--replica-cert", metavar="FILE", default=None,
                       help="with TLS: the certificate replicas get (default DIR/replica.crt "
                            "under --certs)")
    group.add_argument("--replica-key", metavar="FILE", default=None,
                       help="the private key of --replica-cert (default DIR/replica.key under "
                            "--certs)")
    group.add_argument("--replica-tls", choices=["auto", "on", "off"], default="auto",
                       help="with TLS: replicas serve HTTP (requests, WebSockets, handle calls) "
                            "and gRPC with TLS and require a cluster certificate of callers: "
                            "'on', "
                            "'off', or 'auto' (default): on unless a replica listens on "
                            "loopback only")
    for part in ("ca", "cert", "key"):
        group.add_argument(f"--etcd-{part}", metavar="FILE", default=None,
                           help=f"for an etcds:// store: the {part} file (default: "
                                "etcd-ca.crt and etcd-client.* under --certs, else the "
                                "controller's own)")
    group.add_argument("--auth-tokens", metavar="FILE", default=None,
                       help="bearer tokens callers may present (servefleet token create); "
                            "reread on SIGHUP")
    group.add_argument("--revoked-certs", metavar="FILE", default=None,
                       help="serial numbers of certificates refused by this controller and "
                            "the replicas (servefleet certs revoke); reread on SIGHUP")
    policy = parser.add_argument_group("what deploys may run")
    policy.add_argument("--allow-working-dir", action="append", default=[], metavar="DIR",
                        help="runtime.working_dir must lie below DIR (repeatable; default: "
                             "below the current directory when --listen is loopback, "
                             "none otherwise)")
    policy.add_argument("--allow-image", action="append", default=[], metavar="PATTERN",
                        help="images a deploy may name, shell-style (repeatable; default: "
                             "only --docker-image)")
    policy.add_argument("--allow-env", action=argparse.BooleanOptionalAction, default=None,
                        help="whether a deploy may set runtime.env (default: only when "
                             "--listen is loopback)")
    policy.add_argument("--allow-packages-below", action="append", default=[],
                        metavar="DIR",
                        help="a virtualenv or site-packages directory below a working dir "
                             "whose modules import paths may name (repeatable; default: none)")
    policy.add_argument("--allow-code-by-value", action="store_true",
                        help="let deploys send code and init args by value (pickles that "
                             "replicas load: servefleet.run of a script or notebook); "
                             "default: refused")
    policy.add_argument("--replica-user", default="auto", metavar="USER",
                        help="who user code (replicas of the process runtime, builds, custom "
                             "autoscaling policies) runs as: a user name or UID[:GID], 'none' "
                             "for this controller's user, or 'auto': an unprivileged user "
                             "('servefleet' if it exists, else nobody) when this controller "
                             "runs as root and the cluster has TLS or tokens (default auto)")


def controller_security(args: argparse.Namespace) -> dict[str, Any]:
    """The ControllerConfig fields the flags set; UsageError naming the flag at fault."""
    own = tls_files(args)
    replica = None
    if own is not None:
        directory = args.certs or os.environ.get(ENV_CERTS)
        cert = args.replica_cert or (f"{directory}/replica.crt" if directory else None)
        key = args.replica_key or (f"{directory}/replica.key" if directory else None)
        if cert and key:
            try:
                replica = TlsFiles(own.ca, Path(cert), Path(key)).checked()
            except TlsConfigError as e:
                raise UsageError(f"--replica-cert/--replica-key: {e}") from None
    etcd = None
    directory = args.certs or os.environ.get(ENV_CERTS)
    if own is not None and directory and Path(directory, "etcd-client.crt").exists():
        # certs init's etcd CA: the controller's own certificate would not open etcd.
        base = Path(directory).expanduser()
        etcd = TlsFiles(base / "etcd-ca.crt", base / "etcd-client.crt", base / "etcd-client.key")
    if args.etcd_ca or args.etcd_cert or args.etcd_key:
        try:
            etcd = TlsFiles.from_settings("controller", None, args.etcd_ca, args.etcd_cert,
                                          args.etcd_key)
        except TlsConfigError as e:
            raise UsageError(str(e).replace("--cluster-", "--etcd-")) from None
    if args.auth_tokens:
        try:
            tokens.TokenTable.load(args.auth_tokens)
        except tokens.TokenFileError as e:
            raise UsageError(f"--auth-tokens: {e}") from None
    if args.revoked_certs:
        try:
            revocation.read_file(args.revoked_certs)
        except revocation.RevokedCertsError as e:
            raise UsageError(f"--revoked-certs: {e}") from None
    for flag, directories in (("--allow-working-dir", args.allow_working_dir),
                              ("--allow-packages-below", args.allow_packages_below)):
        for directory in directories:
            if not os.path.isabs(directory):
                raise UsageError(f"{flag} {directory!r}: must be an absolute path")
    return {"tls": own, "replica_tls": replica, "etcd_tls": etcd,
            "auth_tokens": args.auth_tokens, "revoked_certs": args.revoked_certs,
            "allow_working_dirs": tuple(args.allow_working_dir),
            "allow_images": tuple(args.allow_image), "allow_env": args.allow_env,
            "allow_packages_below": tuple(args.allow_packages_below),
            "allow_code_by_value": args.allow_code_by_value,
            "replica_user": args.replica_user, "replica_http_tls": args.replica_tls}


# -- certs and token commands --------------------------------------------------------


def cmd_certs_init(args: argparse.Namespace) -> int:
    if args.kube_secret or args.kube_owner:
        from .certs_secret import cmd_certs_secret

        return cmd_certs_secret(args)
    if args.dir is None:
        raise UsageError("certs init: DIR, or --kube-secret NAME")
    try:
        written = init_certs(args.dir, hosts=args.host, days=args.days, force=args.force)
    except (FileExistsError, ValueError) as e:
        raise UsageError(str(e)) from None
    except OSError as e:
        raise UsageError(f"{args.dir}: {e.strerror or e}") from None
    print(f"wrote {len(written)} files to {args.dir}: a development CA and certificates for "
          "controller, proxy, replica, admin, client and etcd")
    print(f"next: servefleet up --certs {args.dir}   (clients: --certs {args.dir} "
          f"or SERVEFLEET_CERTS={args.dir})")
    return 0


def cmd_certs_issue(args: argparse.Namespace) -> int:
    try:
        written = issue_cert(args.dir, args.name, args.role, hosts=args.host, days=args.days)
    except ValueError as e:
        raise UsageError(str(e)) from None
    except OSError as e:
        raise UsageError(f"{e.filename or args.dir}: {e.strerror or e} (the CA's files, "
                         "as servefleet certs init writes them)") from None
    serial, _ = revocation.certificate_serial(written[0])
    print(f"wrote {written[0]} and {written[1]} (role {args.role}, serial {serial})")
    return 0


def cmd_certs_revoke(args: argparse.Namespace) -> int:
    try:
        if args.serial is not None:
            serial, note = revocation.parse_serial(args.serial), ""
        else:
            serial, note = revocation.certificate_serial(args.cert)
            note = f"{args.cert}: {note}"
        added = revocation.revoke(args.file, serial, note)
    except revocation.RevokedCertsError as e:
        raise UsageError(str(e)) from None
    except OSError as e:
        raise UsageError(f"{args.file}: {e.strerror or e}") from None
    print(f"{'revoked' if added else 'already listed:'} serial {serial} in {args.file}; send "
          "SIGHUP to running controllers (--revoked-certs) to refuse it everywhere now",
          file=sys.stderr)
    return 0


def cmd_token_create(args: argparse.Namespace) -> int:
    try:
        token = tokens.create(args.file, args.name, args.role)
    except tokens.TokenFileError as e:
        raise UsageError(str(e)) from None
    print(token)
    print(f"# {args.name} ({args.role}) added to {args.file}; the token is shown only "
          "this once. A running controller picks it up on SIGHUP.", file=sys.stderr)
    return 0


def cmd_token_revoke(args: argparse.Namespace) -> int:
    try:
        tokens.revoke(args.file, args.name)
    except tokens.TokenFileError as e:
        raise UsageError(str(e)) from None
    print(f"revoked {args.name}; send SIGHUP to running controllers to drop it now",
          file=sys.stderr)
    return 0


def add_commands(commands: argparse._SubParsersAction) -> None:
    certs = helptext.add_command(
        commands, "certs", help="development certificates",
        example=["servefleet certs init certs --host 10.0.0.5"])
    certs_sub = certs.add_subparsers(dest="certs_command", required=True, metavar="COMMAND")
    init = helptext.add_command(
        certs_sub, "init", help="write a CA and one certificate per role to DIR",
        description="Write a development CA and one certificate per role to DIR (controller, "
                    "proxy, replica, admin, client), plus a separate CA for etcd and the "
                    "controllers' client certificate for it. `--certs DIR` then gives each "
                    "command its own.",
        example=["servefleet certs init certs --host 10.0.0.5 --host servefleet.internal",
                 "servefleet up examples/config.yaml --certs certs",
                 "servefleet status --certs certs",
                 "",
                 "# in a Kubernetes Secret, as the Helm chart makes it at install",
                 "servefleet certs init --kube-secret servefleet-certs "
                 "--kube-owner Deployment/servefleet-controller"])
    init.add_argument("dir", metavar="DIR", nargs="?",
                      help="where to write the files (made if missing)")
    init.add_argument("--host", action="append", default=[], metavar="NAME",
                      help="another DNS name or IP the certificates name (repeatable; "
                           "localhost, 127.0.0.1 and ::1 are always in)")
    init.add_argument("--days", type=int, default=365,
                      help="days the certificates are valid (default 365)")
    init.add_argument("--force", action="store_true", help="replace the files in DIR")
    init.add_argument("--kube-secret", metavar="NAME", default=None,
                      help="instead of DIR: put the files in this Kubernetes Secret of the "
                           "namespace (in a Pod, its own; else $KUBECONFIG's context), unless "
                           "it is there already (the Helm chart's certs Job)")
    init.add_argument("--kube-owner", metavar="KIND/NAME", default=None,
                      help="with --kube-secret: the object that owns the Secret, which is "
                           "deleted with it (e.g. Deployment/servefleet-controller)")
    init.set_defaults(run=cmd_certs_init)
    issue = helptext.add_command(
        certs_sub, "issue", help="write one more certificate of a role, signed by DIR's CA",
        description="Write DIR/NAME.crt and DIR/NAME.key, a certificate of ROLE signed by the "
                    "CA in DIR, for one holder (a person, one proxy's host), so that it can be "
                    "revoked without the others (servefleet certs revoke).",
        example=["servefleet certs issue certs alice-laptop --role admin",
                 "servefleet certs issue certs prometheus --role reader",
                 "servefleet status --cluster-ca certs/ca.crt "
                 "--cluster-cert certs/alice-laptop.crt --cluster-key certs/alice-laptop.key"])
    issue.add_argument("dir", metavar="DIR", help="a directory servefleet certs init wrote")
    issue.add_argument("name", metavar="NAME", help="the files' name: NAME.crt and NAME.key")
    issue.add_argument("--role", required=True, choices=ROLES + PEOPLE_ROLES,
                       help="the role it carries (its subject's OU)")
    issue.add_argument("--host", action="append", default=[], metavar="NAME",
                       help="another DNS name or IP it names (repeatable)")
    issue.add_argument("--days", type=int, default=365,
                       help="days it is valid (default 365)")
    issue.set_defaults(run=cmd_certs_issue)
    revoke_cert = helptext.add_command(
        certs_sub, "revoke", help="add a certificate's serial number to a revocation file",
        description="Add the serial number of CERT (or --serial) to FILE, the file "
                    "controllers read with --revoked-certs; send them SIGHUP, and the "
                    "certificate is refused by the controllers and their replicas, and what "
                    "it has open is ended.",
        example=["servefleet certs revoke certs/alice-laptop.crt --file revoked.txt",
                 "servefleet certs revoke --serial 3A1F09 --file revoked.txt",
                 "kill -HUP \"$CONTROLLER_PID\"  # each controller"])
    which = revoke_cert.add_mutually_exclusive_group(required=True)
    which.add_argument("cert", metavar="CERT", nargs="?", help="the certificate (PEM)")
    which.add_argument("--serial", metavar="HEX",
                       help="its serial number instead (openssl x509 -serial -noout)")
    revoke_cert.add_argument("--file", required=True, metavar="FILE",
                             help="the revocation file (made if missing)")
    revoke_cert.set_defaults(run=cmd_certs_revoke)

    token = helptext.add_command(
        commands, "token", help="bearer tokens for the controller",
        example=["servefleet token create ci --role deployer --file tokens.txt",
                 "servefleet token revoke ci --file tokens.txt"])
    token_sub = token.add_subparsers(dest="token_command", required=True, metavar="COMMAND")
    create = helptext.add_command(
        token_sub, "create", help="print a new token; append its hash to FILE",
        description="Print a new bearer token and append its hash (not the token) to FILE, "
                    "the file a controller's --auth-tokens (or a proxy's --http-tokens) "
                    "names. A running controller reads it again on SIGHUP.",
        example=["servefleet token create ci --role deployer --file tokens.txt",
                 "servefleet controller --store sqlite:///var/lib/servefleet/state.db "
                 "--auth-tokens tokens.txt",
                 "SERVEFLEET_TOKEN=sft_... servefleet deploy examples/config.yaml"])
    create.add_argument("name", metavar="NAME",
                        help="the token's name, unique in FILE (to revoke it by)")
    create.add_argument("--role", required=True, choices=TOKEN_ROLES,
                        help="what the token may do: read, deploy, everything (admin), or "
                             "what a proxy does")
    create.add_argument("--file", required=True, metavar="FILE",
                        help="the token file a controller reads (--auth-tokens)")
    create.set_defaults(run=cmd_token_create)
    revoke = helptext.add_command(
        token_sub, "revoke", help="remove a token from FILE",
        description="Remove the token NAME from FILE; send SIGHUP to running controllers "
                    "(and proxies with --http-tokens) to drop it at once.",
        example=["servefleet token revoke ci --file tokens.txt"])
    revoke.add_argument("name", metavar="NAME", help="the name the token was created with")
    revoke.add_argument("--file", required=True, metavar="FILE",
                        help="the token file it is in")
    revoke.set_defaults(run=cmd_token_revoke)


def proxy_credentials(args: argparse.Namespace) -> Credentials:
    """The proxy's identity towards the controllers: its certificate, and on a
    cluster with tokens but no TLS a token of role proxy."""
    return credentials(args)
