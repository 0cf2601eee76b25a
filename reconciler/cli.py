"""The ``reconciler`` command.

Exit codes: 0 success (for ``plan``: no changes), 2 ``plan`` found changes, 1 any error.
Human output goes to stdout; progress and errors to stderr; nothing printed carries a secret
value (everything passes the redactor) or a raw terminal control character (everything passes
``reconciler.output.safe``: values come from services, logs and files we do not control).
"""

from __future__ import annotations

import errno
import json
import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

# pydantic looks for plugins among every installed distribution's entry points the first time
# a model is built: a scan of site-packages on every command (status included) for plugins
# this tool never uses. A user who wants one sets the variable themselves.
os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")

import click

from reconciler.textsafe import safe, safe_block, safe_json

# Everything else is imported where it is used: `--help`, `status` and `events` must not pay
# for the engine (Docker, SSH, every controller: ~0.5 s), the spec models or rich's tables.
if TYPE_CHECKING:
    from rich.console import Console

    from reconciler.daemon import Daemon
    from reconciler.engine import Engine
    from specs.trust import TrustPolicy
    from specs.validate import SpecSet
    from state.errors import CorruptState
    from state.etcdstore import EtcdStore
    from state.evidence import Evidence
    from state.keys import Key
    from state.models import ResourceStatus
    from state.store import Store

EXIT_OK, EXIT_ERROR, EXIT_CHANGES = 0, 1, 2
ENV_STATE_DIR = "RECONCILER_STATE_DIR"
ENV_INSTANCE = "RECONCILER_INSTANCE"
ENV_TRUST_FILE = "RECONCILER_TRUST"
DISK_WRITE_ERRNOS = (errno.EROFS, errno.ENOSPC, errno.EDQUOT, errno.EACCES)
STARTING_NEEDS_WRITES = (" (a daemon starts only on a state directory that takes writes: its "
                         "lock, log and control socket live there; one already running rides a "
                         "full or read-only disk out as Degraded)")
ENV_STATE = "RECONCILER_STATE"
PIPE_WIDTH = 240


def default_state_dir() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "rtvi-reconciler"


class Context:
    def __init__(self, state_dir: Path, instance: str | None, verbose: bool,
                 trust_file: Path | None = None, allow_read: tuple[str, ...] = (),
                 allow_run: tuple[str, ...] = (), state: str = "files",
                 allow_pull: tuple[str, ...] = ()) -> None:
        self.state_dir = state_dir
        self.state = state
        self.requested_instance = instance
        self.verbose = verbose
        self.trust_file = trust_file
        self.allow_read = allow_read
        self.allow_run = allow_run
        self.allow_pull = allow_pull

    def trust(self) -> TrustPolicy:
        """What specs may read and run: ``--trust FILE`` (or the default trust file where it
        exists), plus ``--allow-read``/``--allow-run``; nothing at all by default."""
        from specs.trust import TrustError, TrustPolicy, default_trust_file, enforce, load_policy

        try:
            path = self.trust_file or default_trust_file()
            chosen = self.trust_file is not None or path.is_file()
            base = load_policy(path) if chosen else TrustPolicy()
            policy = base.with_cli(self.allow_read, self.allow_run).with_pulls(
                self.allow_pull)
        except TrustError as exc:
            self.fail(str(exc))
        enforce(policy)  # judged again where a file is used (secrets.py)
        return policy

    @cached_property
    def out(self) -> Console:
        from rich.console import Console

        # Piped output gets a wide console: tables stay one row per resource for grep/awk.
        width = None if sys.stdout.isatty() else PIPE_WIDTH
        # emoji=False: a ":smile:" in a value stays literal, like markup does.
        return Console(highlight=False, soft_wrap=True, width=width, emoji=False)

    @cached_property
    def err(self) -> Console:
        from rich.console import Console

        return Console(stderr=True, highlight=False, soft_wrap=True, emoji=False)

    def store(self) -> Store:
        """The store ``--state`` names: files in ``--state-dir`` (the default), or etcd keys
        (``--state-dir`` then keeps only this machine's logs, socket and evidence); fails
        (exit 1) unless the directory is private to us."""
        from state.errors import StateError
        from state.store import Store

        try:
            if self.state == "files":
                store = Store(self.state_dir)
            else:
                from state.etcdstore import EtcdStore

                store = EtcdStore.open(self.state, self.state_dir)
            store.check_root()
        except StateError as exc:
            self.fail(str(exc))
        return store

    def say(self, message: str) -> None:
        """One daemon progress line on stderr, escaped (it may quote logs or services)."""
        self.err.print(safe(message), markup=False)

    def progress(self, resource: str, message: str) -> None:
        """One apply/delete progress line on stderr, escaped like :meth:`say`."""
        self.err.print(f"{safe(resource)}: {safe(message)}", markup=False)

    def fail(self, message: str) -> NoReturn:
        self.err.print(f"error: {safe_block(message)}", markup=False)
        raise SystemExit(EXIT_ERROR)


pass_ctx = click.make_pass_decorator(Context)
PATHS = click.argument("paths", nargs=-1, required=True,
                       type=click.Path(path_type=Path, exists=False))


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--state-dir", type=click.Path(path_type=Path), envvar=ENV_STATE_DIR,
              default=default_state_dir, show_default="$XDG_STATE_HOME/rtvi-reconciler",
              help=f"Where status, history, inventory and events live (env {ENV_STATE_DIR}).")
@click.option("--state", "state", envvar=ENV_STATE, default="files", metavar="files|etcd://...",
              help="Where the records live: 'files' in --state-dir (one machine, nothing to "
                   "run), or etcd://HOST:PORT[,HOST:PORT...][/NAMESPACE] (any machine that "
                   "reaches the cluster reads status and events; see the README's 'More than "
                   f"one machine') (env {ENV_STATE}).")
@click.option("--instance", envvar=ENV_INSTANCE, default=None,
              help="Name of this reconciler instance; recorded in the state dir on first use "
                   f"and in every label (env {ENV_INSTANCE}, default 'default').")
@click.option("-v", "--verbose", is_flag=True, help="Also print JSON logs to stderr.")
@click.option("--trust", "trust_file", type=click.Path(path_type=Path), envvar=ENV_TRUST_FILE,
              default=None, metavar="FILE",
              help="The operator's trust file (TOML): the folders specs may read secrets, media "
                   "and harness files from ([read] secrets/media/harness = [DIRS]), the "
                   "commands they may run ([run] commands = [...]) and the registries Hosts "
                   f"may pull from ([pull] registries = [...]) (env {ENV_TRUST_FILE}; "
                   "default $XDG_CONFIG_HOME/rtvi-reconciler/trust.toml where it exists). "
                   "Without one, a spec may read no file, run no command and pull nothing.")
@click.option("--allow-read", multiple=True, metavar="CATEGORY=DIR",
              help="Also let specs read CATEGORY (secrets, media, harness) files under DIR. "
                   "Repeatable.")
@click.option("--allow-run", multiple=True, metavar="COMMAND",
              help="Also let a benchmark's harness.argv start with COMMAND. Repeatable.")
@click.option("--allow-pull", multiple=True, metavar="REGISTRY",
              help="Let Hosts pull images from REGISTRY (nvcr.io; host:port; a host alone "
                   "allows every port of it) when an image is missing ([pull] registries in "
                   "the trust file). Without one, nothing is pulled. Repeatable.")
@click.pass_context
def main(ctx: click.Context, state_dir: Path, state: str, instance: str | None,
         verbose: bool, trust_file: Path | None, allow_read: tuple[str, ...],
         allow_run: tuple[str, ...], allow_pull: tuple[str, ...]) -> None:
    """Declarative reconciler for NVIDIA VSS real-time VLM (RT-VLM) fleets.

    Desired state lives in YAML specs (Host, Deployment, StreamSet, Experiment). Typical use:

    \b
      reconciler validate specs/            # check specs, no engine needed
      reconciler plan specs/                # what would change and why (exit 2 = changes)
      reconciler apply specs/ --timeout 600 # converge and wait until Ready
      reconciler status                     # what runs where, healthy or why not
      reconciler delete Deployment/NAME     # remove what we created, nothing else
      reconciler evidence RUN_ID --verify   # an experiment run's verdict, its files re-checked
    """
    ctx.obj = Context(state_dir, instance, verbose, trust_file, allow_read, allow_run, state,
                      allow_pull)


def _names(resource: str, name: str) -> bool:
    """``name`` (KIND/NAME, or a bare NAME of any kind) names ``resource``."""
    return resource == name if "/" in name else resource.partition("/")[2] == name


def _load(ctx: Context, paths: tuple[Path, ...]) -> SpecSet:
    from specs.errors import SpecError
    from specs.loader import LoaderLimits
    from specs.validate import load_spec_set

    try:
        spec_set = load_spec_set(list(paths), limits=LoaderLimits.from_env(),
                                 trust=ctx.trust())
    except SpecError as exc:
        for issue in exc.issues:
            ctx.err.print(safe_block(issue), markup=False)
        n = len(exc.issues)
        ctx.err.print(f"{n} error{'s' if n != 1 else ''}; nothing was changed.", markup=False)
        raise SystemExit(EXIT_ERROR) from None
    for warning in spec_set.warnings:
        ctx.err.print(safe_block(warning), markup=False)
    return spec_set


def _report_broken(ctx: Context, broken: list[CorruptState]) -> None:
    """Name every unusable state file and why, on stderr."""
    for problem in broken:
        ctx.err.print(safe_block(problem), markup=False)


def _preflight(ctx: Context, store: Store) -> None:
    """Refuse to act on a state directory whose fixed files are links, folders or other
    non-files: fail before the first action, naming each, rather than halfway through."""
    from state.errors import StateError
    from state.store import LOG_FILE_NAME

    try:
        broken = store.check_layout((LOG_FILE_NAME,))
    except StateError as exc:
        ctx.fail(str(exc))
    if broken:
        _report_broken(ctx, broken)
        ctx.fail(f"{len(broken)} unusable file(s) in state directory {ctx.state_dir}; nothing "
                 "was changed")


@contextmanager
def _engine(ctx: Context, lock: bool) -> Iterator[Engine]:
    """An engine bound to the store; ``lock`` takes the single-writer lock for mutations."""
    from reconciler import logsetup
    from reconciler.engine import Engine
    from state.errors import StateError

    store = ctx.store()
    _preflight(ctx, store)
    try:
        logsetup.configure(ctx.state_dir, ctx.verbose)
        instance = store.instance(ctx.requested_instance)
        state_lock = store.lock() if lock else None
        if state_lock is not None:
            state_lock.acquire()
    except StateError as exc:
        ctx.fail(str(exc))
    engine = Engine(store, instance, ctx.progress)
    try:
        yield engine
    except StateError as exc:  # e.g. a corrupt record: say which, never a traceback
        ctx.fail(f"state directory {ctx.state_dir}: {exc}")
    finally:
        engine.close()
        if state_lock is not None:
            state_lock.release()


@main.command()
@PATHS
@pass_ctx
def validate(ctx: Context, paths: tuple[Path, ...]) -> None:
    """Check spec files (syntax, schema, rules that need no engine). Exit 1 on any error."""
    spec_set = _load(ctx, paths)
    kinds: dict[str, int] = {}
    for res in spec_set.resources:
        kinds[res.kind] = kinds.get(res.kind, 0) + 1
    summary = ", ".join(f"{n} {k}" for k, n in sorted(kinds.items())) or "no resources"
    ctx.out.print(f"valid: {summary}")


@main.command()
def schema() -> None:
    """Print the JSON Schema of all kinds (for editors, e.g. yaml-language-server)."""
    from specs.validate import json_schema

    click.echo(json.dumps(json_schema(), indent=2))


@main.command()
@PATHS
@pass_ctx
def plan(ctx: Context, paths: tuple[Path, ...]) -> None:
    """Show what apply would change, and why. Exit 0 no changes, 2 changes, 1 error."""
    from reconciler.output import print_plan

    spec_set = _load(ctx, paths)
    with _engine(ctx, lock=False) as engine:
        plans = engine.plan(spec_set)
    print_plan(ctx.out, plans)
    if any(rp.error is not None or (rp.plan and rp.plan.conflict) for rp in plans):
        raise SystemExit(EXIT_ERROR)
    raise SystemExit(EXIT_CHANGES if any(rp.changes for rp in plans) else EXIT_OK)


@main.command()
@PATHS
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), default=None,
              metavar="SECONDS",
              help="Give up waiting for readiness after this long (default: each Deployment's "
                   "readiness.timeoutSeconds). An Experiment's run is waited for until its "
                   "verdict, within its own budgetSeconds.")
@pass_ctx
def apply(ctx: Context, paths: tuple[Path, ...], timeout: float | None) -> None:
    """Converge Hosts, Deployments and StreamSets, run Experiments, and wait until they are
    Ready (a run: until its verdict).

    Prints each action with its cause and progress while waiting; exits 1 naming the reason
    if something is not Ready in time. Interrupted (Ctrl-C, SIGTERM), a run that executes as
    a job on its Host (the default, executor: host) keeps running: the next apply, or the
    daemon, finds it by its labels, follows it and brings its evidence home. A run in this
    process (executor: reconciler) ends with it: the next apply or daemon ends it
    INCONCLUSIVE after its cleanup.
    """
    spec_set = _load(ctx, paths)
    started = time.monotonic()
    with _engine(ctx, lock=True) as engine:
        plans = engine.plan(spec_set)
        rejected = [issue for rp in plans for issue in rp.issues]
        if rejected:
            for issue in rejected:
                ctx.err.print(safe_block(issue), markup=False)
            ctx.fail(f"{len(rejected)} rule(s) failed against observed Host facts; nothing was "
                     "changed.")
        outcomes = engine.apply(plans, timeout, spec_set)
    failed = 0
    for outcome in outcomes:
        mark = "✓" if outcome.ok else "✗"
        failed += not outcome.ok
        ctx.out.print(f"{mark} {safe(outcome.resource)}: {safe(outcome.message)}", markup=False)
    elapsed = time.monotonic() - started
    if failed:
        ctx.err.print(f"{failed} of {len(outcomes)} not Ready ({elapsed:.1f}s)", markup=False)
        raise SystemExit(EXIT_ERROR)
    ctx.out.print(f"{len(outcomes)} Ready ({elapsed:.1f}s)", markup=False)


@main.command()
@click.option("--specs", "specs_dir", type=click.Path(path_type=Path, file_okay=False),
              help="Watch this folder of spec files.")
@click.option("--git", "git_url", metavar="URL",
              help="Follow a Git repository (file://, ssh://, https:// or a path).")
@click.option("--branch", default="main", show_default=True, help="Branch to follow (--git).")
@click.option("--path", "git_path", default=None, help="Folder inside the repository (--git).")
@click.option("--interval", type=float, default=30.0, show_default=True, metavar="SECONDS",
              help="Git fetch interval (jittered ±10%); `reconciler sync` fetches at once.")
@click.option("--resync", type=float, default=300.0, show_default=True, metavar="SECONDS",
              help="Re-check every resource this often (jittered), events or not.")
@click.option("--workers", type=int, default=16, show_default=True,
              help="Concurrent reconciles per kind.")
@click.option("--metrics-address", default="127.0.0.1:9464", show_default=True,
              metavar="HOST:PORT", help="Prometheus /metrics listener; 'off' disables it.")
@click.option("--quiet-period", type=click.FloatRange(min=0), default=0.5, show_default=True,
              metavar="SECONDS", help="A saved folder must read the same before and after "
              "this long before it is used (--specs), so a half-written file is never acted on. "
              "A file renamed over a spec (a safe write) is whole and is used at once.")
@click.option("--shutdown-timeout", type=click.FloatRange(min=1), default=10.0,
              show_default=True, metavar="SECONDS",
              help="On SIGTERM, stop within this long: waits end at once, in-flight passes "
              "are left where they stand (recorded first, so the next run adopts them).")
@click.option("--allow-empty", is_flag=True,
              help="Apply a revision with no resources even though resources are owned "
                   "(deletes them all). Off by default: an emptied folder is held, Stalled.")
@click.option("--allow-mass-prune", is_flag=True,
              help="Apply a revision that deletes all owned resources, or more than "
                   "--max-prune-share of them when more than 4 are owned. Off by default; "
                   "`reconciler sync --approve-prune REVISION` allows one held revision.")
@click.option("--max-prune-share", type=click.FloatRange(min=0, max=1), default=0.5,
              show_default=True, metavar="SHARE",
              help="Share of owned resources one revision may delete without an opt-in.")
@click.option("--replica", default=None, metavar="NAME",
              help="Run as one replica among others on the same etcd --state (each with its "
                   "own NAME, e.g. the machine's): each works the Hosts it holds a lease on, "
                   "and takes over a dead replica's Hosts within --lease-ttl. Without it, "
                   "one daemon holds the whole namespace.")
@click.option("--lease-ttl", type=click.IntRange(min=2, max=300), default=15,
              show_default=True, metavar="SECONDS",
              help="A replica's lease: a dead, paused or cut-off replica's Hosts are taken "
                   "over this long after its last renewal (renewed every third of it).")
@pass_ctx
def run(ctx: Context, specs_dir: Path | None, git_url: str | None, branch: str,
        git_path: str | None, interval: float, resync: float, workers: int,
        metrics_address: str, quiet_period: float, shutdown_timeout: float, allow_empty: bool,
        allow_mass_prune: bool, max_prune_share: float, replica: str | None,
        lease_ttl: int) -> None:
    """Run the reconciler daemon: watch a folder or follow a Git branch, converge every
    revision, repair drift, until SIGTERM.

    \b
      reconciler run --specs specs/
      reconciler run --git file:///srv/specs.git --branch main --path deploy --interval 15

    A revision is used whole or not at all: an unreadable file or folder, a file still being
    written, a spec over a loader limit (file size: env RECONCILER_MAX_SPEC_BYTES, default
    1 MiB) or a revision that would delete most of what is owned is held, with the source
    Stalled and the reason in `reconciler status Source/specs`; the last good revision stays
    in force. With --state etcd://... and --replica NAME, several daemons (on several
    machines) share the fleet, one lease per Host. Exit status: 0 after SIGTERM/SIGINT, 1
    on a start-up error, 3 when a daemon thread kept dying. SIGUSR1 prints every thread's
    stack on standard error (what a daemon that seems stuck is waiting on) and changes
    nothing.
    """
    from reconciler import logsetup
    from reconciler.daemon import Daemon, DaemonOptions
    from reconciler.pruneguard import PrunePolicy
    from reconciler.sources import FolderSource, GitSource, Source
    from specs.errors import SpecError
    from specs.loader import LoaderLimits
    from state.errors import StateError

    if (specs_dir is None) == (git_url is None):
        ctx.fail("give exactly one of --specs DIR or --git URL")
    try:
        limits = LoaderLimits.from_env()
    except SpecError as exc:
        ctx.fail(str(exc))
    source: Source
    if specs_dir is not None:
        source = FolderSource(specs_dir.resolve(), quiet_s=quiet_period, limits=limits,
                              trust=ctx.trust())
    else:
        assert git_url is not None
        if interval <= 0:
            ctx.fail("--interval must be greater than 0")
        try:
            source = GitSource(git_url, branch, ctx.state_dir / "git", path=git_path,
                               interval_s=interval, limits=limits, trust=ctx.trust())
        except ValueError as exc:
            ctx.fail(str(exc))
    if resync <= 0 or workers < 1:
        ctx.fail("--resync must be greater than 0 and --workers at least 1")
    policy = PrunePolicy(allow_empty=allow_empty, allow_mass_prune=allow_mass_prune,
                         max_share=max_prune_share)
    options = DaemonOptions(resync_s=resync, workers=workers,
                            metrics_address=_address(ctx, metrics_address), prune_policy=policy,
                            shutdown_timeout_s=shutdown_timeout)
    store = ctx.store()
    _preflight(ctx, store)
    try:
        logsetup.configure(ctx.state_dir, ctx.verbose)
        instance = store.instance(ctx.requested_instance)
        if replica is not None:
            raise SystemExit(_replica(ctx, store, replica, lease_ttl,
                                      Daemon(store, instance, source, options, ctx.say)))
        with store.lock():
            daemon = Daemon(store, instance, source, options, ctx.say)
            raise SystemExit(daemon.run())
    except (StateError, OSError) as exc:
        ctx.fail(_cannot_start(exc))


def _cannot_start(exc: Exception) -> str:
    """Why the daemon did not start; a disk that takes no writes says what that means."""
    cause = exc if isinstance(exc, OSError) else exc.__cause__
    needs = isinstance(cause, OSError) and cause.errno in DISK_WRITE_ERRNOS
    return f"cannot start: {exc}{STARTING_NEEDS_WRITES if needs else ''}"


def _replica(ctx: Context, store: Store, name: str, ttl_s: int, daemon: Daemon) -> int:
    """Run ``daemon`` as replica ``name`` (``reconciler.sharing``): etcd state only."""
    from controllers.clients.docker_client import fence_calls
    from reconciler.sharing import Sharing
    from state.etcdstore import EtcdStore

    if not isinstance(store, EtcdStore):
        ctx.fail("--replica shares the fleet through etcd: give --state etcd://HOST:PORT,...")
    daemon.sharing = Sharing(store, name, ttl_s, daemon.share_of, daemon.shares,
                             daemon.resume, ctx.say)
    fence_calls(daemon.sharing.fence)
    ctx.say(f"replica {name}: lease {daemon.sharing.replica.lease:x}, TTL {ttl_s}s")
    return daemon.run()


def _address(ctx: Context, text: str) -> tuple[str, int] | None:
    if text == "off":
        return None
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit():
        ctx.fail(f"--metrics-address: want HOST:PORT or off, got {text!r}")
    return host.strip("[]"), int(port)


@main.command()
@click.option("--approve-prune", "approve", metavar="REVISION", default=None,
              help="Let this exact held revision (see `reconciler status Source/specs`) "
                   "delete what it leaves out, once.")
@pass_ctx
def sync(ctx: Context, approve: str | None) -> None:
    """Ask the running daemon to fetch its source now and re-check every resource."""
    from reconciler.control import ControlUnavailable, request

    try:
        answer = request(ctx.state_dir, "POST", "/sync",
                         params={"approve-prune": approve} if approve else None)
    except ControlUnavailable as exc:
        ctx.fail(str(exc))
    ctx.out.print(safe(answer.get("message", answer)), markup=False)


@main.command()
@click.argument("resource", metavar="Deployment/NAME")
@click.option("--approve", "approve", metavar="RUN_ID", default=None,
              help="Let the held candidate whose qualification run this is through, once: it "
                   "replaces the running version at the next pass. Its bundle keeps the "
                   "measured verdict and says the override beside it.")
@click.option("--rerun", is_flag=True,
              help="Qualify the held candidate again (a new run, RUN_ID-r1, -r2, ...).")
@pass_ctx
def promote(ctx: Context, resource: str, approve: str | None, rerun: bool) -> None:
    """Decide about a candidate a Deployment's qualification held out (`spec.promotion`).

    `reconciler status Deployment/NAME` says why it was held (each gate with both numbers) and
    names its run; the run's bundle (`reconciler evidence RUN_ID`) holds the comparison. With a
    daemon running, it is told and acts at once; without one, the next `apply` acts.
    """
    from reconciler.control import ControlUnavailable, RequestRefused, ask, request
    from state.errors import StateError
    from state.keys import InvalidKey, Key

    if (approve is None) == (not rerun):
        ctx.fail("say --approve RUN_ID or --rerun (one of them)")
    name, value = ("approve", approve or "") if approve is not None else ("rerun", "")
    try:
        key = Key.parse(resource)
    except InvalidKey as exc:
        ctx.fail(str(exc))
    try:
        answer = request(ctx.state_dir, "POST", "/ask",
                         params={"resource": key, "request": name, "value": value})
    except ControlUnavailable:
        with _engine(ctx, lock=True) as engine:
            try:
                said = ask(engine.store, key, name, value)
            except (RequestRefused, StateError) as exc:
                ctx.fail(str(exc))
        ctx.out.print(safe(said), markup=False)
        return
    if not answer.get("ok"):
        ctx.fail(str(answer.get("message", answer)))
    ctx.out.print(safe(str(answer.get("message"))), markup=False)


@main.command()
@pass_ctx
def health(ctx: Context) -> None:
    """Exit 0 if a daemon runs on this state directory, answers, and all its threads run;
    exit 1 (printing the summary) when one of them died."""
    from reconciler.control import ControlUnavailable, request

    try:
        answer = request(ctx.state_dir, "GET", "/health")
    except ControlUnavailable as exc:
        ctx.fail(str(exc))
    click.echo(safe_json(json.dumps(answer, indent=2)))
    if answer.get("ok") is not True:
        raise SystemExit(EXIT_ERROR)


@main.command()
@click.argument("name", required=False)
@click.option("-o", "--output", type=click.Choice(["table", "json"]), default="table",
              show_default=True)
@click.option("--live", is_flag=True, help="Ask the running daemon instead of reading the "
              "store (also shows its source revision and queue).")
@pass_ctx
def status(ctx: Context, name: str | None, output: str, live: bool) -> None:
    """Show status (no daemon needed). NAME (KIND/NAME, or a NAME of any kind) for detail.

    Unreadable state files are listed on stderr with why, after the readable records; the exit
    status is then 1.
    """
    from reconciler.output import print_status_detail, print_status_table

    records, broken = _live_records(ctx) if live else _stored_records(ctx)
    if name is not None:
        records = _named_record(ctx, records, name, broken)
    if output == "json":
        data: Any = [r.model_dump(mode="json") for r in records]
        click.echo(safe_json(json.dumps(data[0] if name is not None else data, indent=2)))
    elif name is not None:
        print_status_detail(ctx.out, records[0])
    elif not records:
        ctx.out.print(f"no resources recorded in {safe(ctx.state_dir)}", markup=False)
    else:
        print_status_table(ctx.out, records)
    if broken:
        _report_broken(ctx, broken)
        ctx.fail(f"{len(broken)} state file(s) in {ctx.state_dir} could not be read; the "
                 "records shown are the readable ones")
    _unwritable(ctx)


def _unwritable(ctx: Context) -> None:
    """Where a daemon runs on this state directory and cannot write it (a full or read-only
    disk), the records just shown may be stale: say so, and exit 1."""
    from state.store import SOCKET_NAME

    if not (ctx.state_dir / SOCKET_NAME).exists():
        return
    from reconciler.control import ControlUnavailable, request

    try:
        writes = request(ctx.state_dir, "GET", "/health").get("stateWrites")
    except ControlUnavailable:
        return
    if writes:
        ctx.fail(f"the daemon cannot write {ctx.state_dir} since {writes['sinceSeconds']}s "
                 f"({writes['failing']}): the statuses above may be stale; it recovers by "
                 "itself once the disk takes writes")


def _stored_records(ctx: Context) -> tuple[list[ResourceStatus], list[CorruptState]]:
    """Every readable record, and every state file that could not be read."""
    from state.errors import StateError
    from state.store import LOG_FILE_NAME

    store = ctx.store()
    try:
        broken = store.check_layout((LOG_FILE_NAME,))
        records, unreadable = store.scan()
    except StateError as exc:
        ctx.fail(str(exc))
    return records, broken + unreadable


def _live_records(ctx: Context) -> tuple[list[ResourceStatus], list[CorruptState]]:
    """The running daemon's records (and its summary, on stderr)."""
    from reconciler.control import ControlUnavailable, request
    from state.models import ResourceStatus

    store = ctx.store()  # the same checks of the state directory as without --live
    from state.etcdstore import EtcdStore

    if isinstance(store, EtcdStore):  # the replicas and their leases, as etcd has them
        _print_replicas(ctx, store)
        return _stored_records(ctx)
    try:
        answer = request(ctx.state_dir, "GET", "/status")
    except ControlUnavailable as exc:
        ctx.fail(str(exc))
    summary = answer["daemon"]
    ctx.err.print(safe(f"daemon: instance {summary['instance']}, source {summary['source']} "
                       f"at revision {summary['revision']}, queue {summary['queue']}"),
                  markup=False)
    return [ResourceStatus.model_validate(r) for r in answer["resources"]], []


def _print_replicas(ctx: Context, store: EtcdStore) -> None:
    """Each replica present in etcd: the shares (Hosts) it holds and its lease's time left."""
    from rich.table import Table
    from rich.text import Text

    from reconciler.sharing import replicas
    from state.errors import StateError

    try:
        found = replicas(store)
    except StateError as exc:
        ctx.fail(f"cannot read the replicas: {exc}")
    if not found:
        ctx.out.print(f"no replica holds a lease in {safe(store.where)} (one daemon without "
                      "--replica holds it whole, or none runs)", markup=False)
        return
    table = Table(show_edge=False, pad_edge=False, box=None, header_style="bold")
    for col in ("REPLICA", "HOLDS", "LEASE", "RENEWED", "EXPIRES IN"):
        table.add_column(col, overflow="fold")
    for view in found:
        left = f"{view.ttl_left_s}s" if view.ttl_left_s >= 0 else "expired"
        table.add_row(*(Text(safe(c)) for c in (view.name, ", ".join(view.shares) or "-",
                                                 f"{view.lease:x}", f"{view.renewed_s_ago}s ago",
                                                 left)))
    ctx.out.print(table)
    ctx.out.print()


def _named_record(ctx: Context, records: list[ResourceStatus], name: str,
                  broken: list[CorruptState]) -> list[ResourceStatus]:
    """The one record ``name`` names; fails naming the candidates, or the unreadable files."""
    found = [r for r in records if _names(r.resource, name)]
    if len(found) > 1:
        ctx.fail(f"{name} names {len(found)} resources "
                 f"({', '.join(r.resource for r in found)}): say which, as KIND/NAME")
    if not found:
        _report_broken(ctx, broken)
        listed = f" ({len(broken)} unreadable state file(s) listed above)" if broken else ""
        ctx.fail(f"no readable status for {name} in {ctx.state_dir}{listed}")
    return found


@main.command()
@click.argument("targets", nargs=-1, required=True)
@pass_ctx
def delete(ctx: Context, targets: tuple[str, ...]) -> None:
    """Delete what we created for spec PATHs or NAMEs (KIND/NAME, or a NAME of any kind).

    Only containers that our inventory lists AND that carry our labels are removed; anything
    else with a matching name is left untouched and reported.
    """
    spec_set, names, bare = _delete_targets(ctx, targets)
    with _engine(ctx, lock=True) as engine:  # it deletes dependents before what they use
        names += _recorded_names(ctx, engine.store, bare)
        outcomes = engine.delete(spec_set, names)
    for outcome in outcomes:
        ctx.out.print(f"{'✓' if outcome.ok else '!'} {safe(outcome.resource)}: "
                      f"{safe(outcome.message)}", markup=False)
    if not all(o.ok for o in outcomes):
        raise SystemExit(EXIT_ERROR)


def _delete_targets(ctx: Context, targets: tuple[str, ...]
                    ) -> tuple[SpecSet | None, list[Key], list[str]]:
    """The spec set of the PATHs, the keys of KIND/NAMEs, and the bare NAMEs (looked up in
    the records later, under the lock). A target that is none of these fails, deleting
    nothing."""
    from reconciler.kinds import REGISTRY, key_of
    from state.keys import InvalidKey, Key

    spec_set = None
    names: list[Key] = []
    bare: list[str] = []
    paths = [Path(t) for t in targets if Path(t).exists()]
    if paths:
        spec_set = _load(ctx, tuple(paths))
        owning = REGISTRY.owning()  # a Host's record is forgotten only when named
        names += [key_of(r) for r in spec_set.resources if r.kind in owning]
    for target in (t for t in targets if not Path(t).exists()):
        kind, _, rest = target.rpartition("/")
        if kind and (kind not in REGISTRY or not rest):
            ctx.fail(f"{target}: no such file or folder, and not a resource name (NAME or "
                     f"KIND/NAME, KIND one of {', '.join(REGISTRY.names)}); nothing was deleted")
        if target.endswith((".yaml", ".yml")):
            ctx.fail(f"{target}: no such file; nothing was deleted")
        if not kind:
            bare.append(target)
            continue
        try:
            names.append(Key(kind, rest))
        except InvalidKey as exc:
            ctx.fail(f"{target}: {exc}; nothing was deleted")
    return spec_set, names, bare


def _recorded_names(ctx: Context, store: Store, bare: list[str]) -> list[Key]:
    """The recorded resource each bare NAME names; one that names two is refused."""
    recorded = [r.key for r in store.list()] if bare else []
    found: list[Key] = []
    for target in bare:
        named = [k for k in recorded if k.name == target]
        if len(named) > 1:
            ctx.fail(f"{target} names {len(named)} resources ({', '.join(named)}): say "
                     "which, as KIND/NAME; nothing was deleted")
        if not named:
            ctx.out.print(f"✓ {safe(target)}: nothing recorded; nothing to delete",
                          markup=False)
        found += named
    return found


@main.command()
@click.argument("name", required=False)
@click.option("-f", "--follow", is_flag=True, help="Keep printing new events.")
@click.option("-o", "--output", type=click.Choice(["text", "json"]), default="text")
@pass_ctx
def events(ctx: Context, name: str | None, follow: bool, output: str) -> None:
    """Print the event log (optionally of one resource: KIND/NAME, or NAME of any kind)."""
    from state.errors import StateError

    resource = name if name is not None and "/" in name else None
    log = ctx.store().events
    try:
        source = log.follow(resource=resource) if follow else iter(log.read(resource=resource))
        for event in source:
            if name is not None and not _names(event.resource, name):
                continue
            if output == "json":
                click.echo(safe_json(event.model_dump_json()))
            else:
                # safe() escapes newlines: a message can never print as a second event line.
                click.echo(safe(f"{event.time} {event.type:<7} {event.resource} "
                                f"{event.reason}: {event.message}"))
    except StateError as exc:
        ctx.fail(str(exc))
    except KeyboardInterrupt:
        sys.exit(EXIT_OK)


@main.command()
@click.argument("run_id")
@click.option("--root", type=click.Path(path_type=Path, file_okay=False),
              help="Evidence root (default: <state dir>/evidence, unless the Experiment named "
              "its own evidenceRoot).")
@click.option("--verify", is_flag=True,
              help="Re-read every file and compare with checksums.sha256; exit 1 naming each "
              "file that is missing, changed or was added after the run sealed it.")
@click.option("-o", "--output", type=click.Choice(["text", "json"]), default="text")
@pass_ctx
def evidence(ctx: Context, run_id: str, root: Path | None, verify: bool, output: str) -> None:
    """Show an Experiment run's result and gates from its evidence folder; --verify checks it."""
    from reconciler.evidence_view import default_root, print_summary, summary
    from state.evidence import Evidence, EvidenceError
    from state.evidence import verify as verify_folder

    try:
        found = Evidence.open(root or default_root(ctx.state_dir), run_id)
    except EvidenceError as exc:
        if root is not None:
            ctx.fail(str(exc))
        found = _stored_bundle(ctx, run_id, str(exc))  # not here: the store's copy (etcd)
    data = summary(found)
    problems = verify_folder(found.folder) if verify else []
    if output == "json":
        click.echo(safe_json(json.dumps({**data, "verified": not problems} if verify else data)))
    else:
        print_summary(ctx.out, data)
    for problem in problems:
        ctx.err.print(f"error: {safe(problem)}", markup=False)
    if verify and not problems and output == "text":
        ctx.out.print("  verified: every file matches checksums.sha256", markup=False)
    if problems:
        raise SystemExit(EXIT_ERROR)


def _stored_bundle(ctx: Context, run_id: str, missing: str) -> Evidence:
    """Run ``run_id``'s evidence as the store keeps it (records in etcd: the bundle the
    replica that finished it stored), unpacked under ``--state-dir``; fails with ``missing``
    (why the local folder would not do) when the store keeps none."""
    from state.errors import StateError
    from state.evidence import Evidence, EvidenceError

    try:
        copy = ctx.store().bundle(run_id, ctx.state_dir / "evidence-copies")
        if copy is None:
            ctx.fail(missing)
        return Evidence.open(copy.parent, run_id)
    except (StateError, EvidenceError) as exc:
        ctx.fail(str(exc))


if __name__ == "__main__":
    main()
