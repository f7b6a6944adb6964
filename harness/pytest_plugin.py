"""pytest plugin: an emulator for the whole session, reset before every test, with a fault-plan marker.

Fixtures:

* ``sandbox_emulator`` - the :class:`~emulator.server.EmulatorServer` (loopback, threaded) for this test, reset
  (journal and counters) and loaded with the test's ``@pytest.mark.faults(...)`` plan, or no faults.
* ``sandbox_fusion_url`` - the full ``/run_code`` URL, as verl's ``sandbox_fusion_url`` wants it.
* ``emulator_journal`` - the journal of this test's requests.
* ``sandbox_emulator_session`` - the session-scoped server itself.
* ``daytona_config`` - a ``daytona.DaytonaConfig`` (the real SDK's) pointed at this test's emulator, with its key.
* ``daytona_client`` - a sync ``daytona.Daytona`` built from ``daytona_config`` (needs the ``daytona`` extra), shut
  down after the test.
* ``daytona_leaks`` - the Daytona sandbox report of this test (``.leaked``, ``.leaked_by(label)``, ``.max_alive``).
* ``chaos_seed`` - the seed this test's fault plan runs with (derived from ``--chaos-seed`` and the node id).
* ``chaos_judge`` - a ``harness.chaos.judges.ChaosJudge`` over this test's journal and decision log.
* ``virtual_time`` - a ``harness.chaos.vtime.VirtualTime`` loop for this test (virtual clock, closed after it).

Fixtures that build their own emulator call :func:`attach_chaos` to get the same seeding, replay and failure log.

The emulator is reset after every test, which destroys the sandboxes the test left alive.

Marker: ``@pytest.mark.faults(plan)`` (or ``plan=plan``) where plan is a dict, a YAML/JSON path (a relative one is
read from the test file's directory) or a profile name;
``@pytest.mark.faults(plan, seed=N)`` pins the plan's seed to ``N`` instead of deriving it. Any other keyword, no plan
or two, and a seed that is not an integer are an error of the test, and nothing of it is loaded.

Chaos options: ``--chaos-seed N`` (default 0) derives each test's plan seed from ``N``, the test's node id and the
plan's own seed, so a test's decisions depend on nothing else. When a test that used the emulator fails, its decision
log is written under ``--chaos-log-dir`` (default ``.chaos`` in the rootdir) and the failure report names the one
command that replays it: ``pytest '<nodeid>' --chaos-replay=<log>``, which answers every request from that log
(strictly: a request the log does not hold is an error). Both are checked once, at the start: an empty path, a log dir
that is a file or cannot be created, and a replay log that cannot be read, is not a decision log or holds no
decisions, are one usage error (exit 4) instead of an error in every test.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from emulator.app import Emulator, EmulatorConfig
from emulator.daytona import SandboxReport
from emulator.executor import ExecutorConfig
from emulator.faults import PROFILES, FaultEngine, FaultPlan, FaultPlanError, load_plan
from emulator.faults.log import DecisionLog
from emulator.faults.replay import ReplayEngine
from emulator.journal import Journal
from emulator.server import EmulatorServer
from harness.chaos.seeds import DEFAULT_CHAOS_SEED, derive_seed, log_path_for, parse_chaos_seed, replay_command
from harness.outputs import dir_problem

#: The reference checks' options (``--reference-url``, ``--reference-service``) and fixtures.
pytest_plugins = ["harness.reference.plugin"]


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("sandbox-emulator")
    group.addoption(
        "--emulator-python-mode",
        choices=["fast", "faithful"],
        default="fast",
        help="how the emulator runs submitted Python: fork from a warm interpreter (fast) or a fresh one",
    )
    group.addoption(
        "--chaos-seed",
        default=None,
        metavar="N",
        help=f"session chaos seed; each test's fault-plan seed derives from it and the node id "
        f"(default {DEFAULT_CHAOS_SEED})",
    )
    group.addoption(
        "--chaos-log-dir",
        default=None,
        metavar="DIR",
        help="where a failing test's fault decision log is written (default: .chaos in the rootdir)",
    )
    group.addoption(
        "--chaos-replay",
        default=None,
        metavar="LOG",
        help="answer every emulator request from this decision log (written by a failing test) instead of the plan",
    )


@dataclass
class ChaosSettings:
    """The session's chaos options, checked once."""

    seed: int
    log_dir: Path
    replay: Path | None
    #: The decisions read from ``replay``, once: each test replays a fresh engine over them.
    replay_log: DecisionLog | None = None
    #: ``(nodeid, command)`` of every failing test whose decisions were logged, for the terminal summary.
    commands: list[tuple[str, str]] = field(default_factory=list)


_SETTINGS = pytest.StashKey[ChaosSettings]()
_EMULATOR = pytest.StashKey[Emulator]()
_DUMPED = pytest.StashKey[bool]()
_SEED = pytest.StashKey[int]()
#: The test's decisions as they were when its emulator was restored (which resets the engine's log).
_LOG = pytest.StashKey[DecisionLog]()
#: The report attribute that carries a failing test's replay command (to the xdist controller too).
_REPLAY_ATTR = "sandbox_emulator_replay"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "faults(plan, seed=None): load this fault plan (dict, YAML/JSON path or profile name) into the emulator",
    )
    raw_seed = config.getoption("--chaos-seed", None)
    try:
        seed = DEFAULT_CHAOS_SEED if raw_seed is None else parse_chaos_seed(str(raw_seed))
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from None
    here = config.invocation_params.dir
    raw_dir = config.getoption("--chaos-log-dir", None)
    raw_replay = config.getoption("--chaos-replay", None)
    for option, raw in (("--chaos-log-dir", raw_dir), ("--chaos-replay", raw_replay)):
        if raw is not None and not str(raw).strip():  # "--chaos-replay=$LOG" with LOG unset must not run unreplayed
            raise pytest.UsageError(f"{option}: an empty path names nothing; give a path or leave the option out")
    log_dir = (here / raw_dir).resolve() if raw_dir else config.rootpath / ".chaos"
    problem = dir_problem(log_dir, "--chaos-log-dir", create=False) if raw_dir else None
    if problem is not None:  # said once, not as an INTERNALERROR at the first failing test
        raise pytest.UsageError(problem)
    replay = (here / raw_replay).resolve() if raw_replay else None
    replay_log = _load_replay(replay) if replay is not None else None
    settings = ChaosSettings(seed, log_dir, replay, replay_log)
    config.stash[_SETTINGS] = settings
    config.pluginmanager.register(_ReplaySummary(settings), "sandbox-emulator-replay-summary")


def _load_replay(path: Path) -> DecisionLog:
    """The decision log at ``path`` (``--chaos-replay``), or a usage error saying why it cannot be replayed."""
    if not path.is_file():
        raise pytest.UsageError(f"--chaos-replay: no decision log at {path}")
    try:
        log = DecisionLog.load_jsonl(path)
    except FaultPlanError as exc:  # unreadable, not UTF-8, a line that is not one JSON object; says the file (and line)
        raise pytest.UsageError(f"--chaos-replay: {exc}") from None
    try:
        ReplayEngine(log)  # every record must be a decision
    except FaultPlanError as exc:
        raise pytest.UsageError(f"--chaos-replay: {path}: not a decision log: {exc}") from None
    if not len(log):
        raise pytest.UsageError(
            f"--chaos-replay: {path} holds no decisions (a failing test's log has one per emulator request)"
        )
    return log


def pytest_report_header(config: pytest.Config) -> str | None:
    settings = config.stash.get(_SETTINGS, None)
    if settings is None:
        return None
    if settings.replay is not None:
        return f"chaos: replaying decisions from {settings.replay}"
    return f"chaos seed: {settings.seed} (--chaos-seed)"


def _chaos_settings(config: pytest.Config) -> ChaosSettings:
    return config.stash[_SETTINGS]


#: What the ``faults`` marker takes by keyword.
_MARKER_KEYWORDS = ("plan", "seed")


def _marker_plan(request: pytest.FixtureRequest) -> tuple[FaultPlan, int | None]:
    """The marker's plan, built but not loaded, and its pinned seed (None: derive it). Everything the marker says is
    checked here, before the emulator is touched: a marker written wrong must not leave a plan for the next test."""
    marker = request.node.get_closest_marker("faults")
    if marker is None:
        return load_plan(None), None
    unknown = sorted(set(marker.kwargs) - set(_MARKER_KEYWORDS))
    if unknown:
        raise FaultPlanError(
            "faults marker", f"unknown keyword {', '.join(map(repr, unknown))}: it takes a plan and seed=N"
        )
    given = list(marker.args) + ([marker.kwargs["plan"]] if "plan" in marker.kwargs else [])
    if len(given) != 1:
        raise FaultPlanError(
            "faults marker",
            f"takes one plan (first argument or plan=), got {len(given)}: "
            "@pytest.mark.faults(plan) with a dict, a YAML/JSON path or a profile name",
        )
    pinned = marker.kwargs.get("seed")
    if pinned is not None and (isinstance(pinned, bool) or not isinstance(pinned, int)):
        raise FaultPlanError("faults marker", f"seed must be an integer, got {pinned!r}")
    return load_plan(_beside_test(given[0], request.node.path.parent)), pinned


def _beside_test(spec: Any, test_dir: Path) -> Any:
    """A relative plan file path, read from the test file's directory: where the test and its plans live, not
    wherever pytest was started from. A profile name, a mapping or an absolute path is left as it is."""
    if isinstance(spec, str):
        if not spec.strip() or spec in PROFILES:
            return spec
        path = Path(spec)
        looks_like_a_file = path.suffix.lower() in (".yaml", ".yml", ".json") or "/" in spec or os.sep in spec
        if not (looks_like_a_file or (test_dir / path).exists()):
            return spec  # an unknown profile: load_plan says so, with the known ones
    elif isinstance(spec, Path):
        path = spec
    else:
        return spec
    return path if path.is_absolute() else test_dir / path


def _use_engine(emulator: Emulator, engine: FaultEngine | ReplayEngine) -> None:
    """Point the emulator and its gate (which holds its own reference) at ``engine``; both read it per request."""
    emulator.use_engine(engine)


@pytest.fixture(scope="session")
def sandbox_emulator_session(pytestconfig: pytest.Config) -> Iterator[EmulatorServer]:
    mode = pytestconfig.getoption("--emulator-python-mode")
    emulator = Emulator(EmulatorConfig(executor=ExecutorConfig(python_mode=mode)))
    with EmulatorServer(emulator) as server:
        yield server


@pytest.fixture
def sandbox_emulator(
    sandbox_emulator_session: EmulatorServer, request: pytest.FixtureRequest
) -> Iterator[EmulatorServer]:
    emulator = sandbox_emulator_session.emulator
    restore = attach_chaos(emulator, request)
    try:
        yield sandbox_emulator_session
    finally:
        restore()


def attach_chaos(emulator: Emulator, request: pytest.FixtureRequest) -> Callable[[], None]:
    """Give ``emulator`` this test's chaos: the marker's plan with the test's seed (or, with ``--chaos-replay``, the
    logged decisions), a fresh journal, and its decision log dumped with a replay command if the test fails.

    ``sandbox_emulator`` uses it; a fixture that builds its own emulator (e.g. one served on a virtual-time loop)
    calls it too, after creating the emulator and before the test's requests; the returned function undoes it. When
    it raises (a bad marker), the emulator is as it was: nothing of this test's is left loaded.
    """
    plan, pinned = _marker_plan(request)
    seed = (
        pinned
        if pinned is not None
        else derive_seed(_chaos_settings(request.config).seed, request.node.nodeid, plan.seed)
    )
    original = emulator.engine

    def restore() -> None:
        # A teardown failure's report is built after this runs: it takes the test's decisions from here.
        request.node.stash[_LOG] = DecisionLog(emulator.engine.log.records, max_records=None)
        _use_engine(emulator, original)
        emulator.set_faults(None)
        emulator.reset()

    try:
        emulator.set_faults(plan.with_seed(seed))
        request.node.stash[_SEED] = seed
        emulator.reset()
        emulator.daytona.reseed_listings(seed)  # Daytona's unordered listings, by the same seed
        replay_log = _chaos_settings(request.config).replay_log
        if replay_log is not None:
            _use_engine(emulator, ReplayEngine(replay_log, strict=True, clock=emulator.clock))
    except BaseException:
        restore()
        raise
    request.node.stash[_EMULATOR] = emulator
    return restore


@pytest.fixture
def chaos_judge(sandbox_emulator: EmulatorServer) -> Any:
    """A :class:`harness.chaos.judges.ChaosJudge` over this test's emulator (journal and decision log)."""
    from harness.chaos.judges import ChaosJudge

    return ChaosJudge.of(sandbox_emulator.emulator)


@pytest.fixture
def virtual_time() -> Iterator[Any]:
    """A :class:`harness.chaos.vtime.VirtualTime`: one virtual-clock event loop for this test, closed after it."""
    from harness.chaos.vtime import VirtualTime

    with VirtualTime() as vt:
        yield vt


@pytest.fixture
def chaos_seed(sandbox_emulator: EmulatorServer, request: pytest.FixtureRequest) -> int:
    """The seed this test's fault plan runs with (see ``--chaos-seed``)."""
    return int(request.node.stash[_SEED])


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, None]:
    """On the first failing phase of a test that used the emulator, write its decision log and name the replay."""
    outcome = yield
    report: pytest.TestReport = outcome.get_result()
    emulator = item.stash.get(_EMULATOR, None)
    if not report.failed or emulator is None or item.stash.get(_DUMPED, False):
        return
    item.stash[_DUMPED] = True
    settings = _chaos_settings(item.config)
    kept = item.stash.get(_LOG, None)
    log: DecisionLog = kept if kept is not None else emulator.engine.log
    if not len(log):  # a log with no decisions replays nothing (and --chaos-replay refuses it)
        report.sections.append(("chaos replay", "no fault decisions: the test made no emulator request\n"))
        return
    suffix = ".replay" if settings.replay is not None else ""
    path = log_path_for(settings.log_dir, item.nodeid, suffix)
    try:
        log.dump_jsonl(path)
    except OSError as exc:  # the log dir went away or filled up during the run: the test's own failure stands
        reason = exc.strerror or str(exc)
        report.sections.append(("chaos replay", f"{len(log)} fault decisions not written to {path}: {reason}\n"))
        return
    command = replay_command(item.nodeid, settings.replay if settings.replay is not None else path, settings.seed)
    seed_note = "" if settings.replay is not None else f" (chaos seed {settings.seed})"
    report.sections.append(
        (
            "chaos replay",
            f"{len(log)} fault decisions (one per request) in {path}{seed_note}; replay exactly with:\n{command}\n",
        )
    )
    # An attribute of the report travels with it from an xdist worker to the controller, which prints the summary.
    setattr(report, _REPLAY_ATTR, command)


class _ReplaySummary:
    """The end-of-run list of replay commands, one object per pytest run (registered at configure).

    It collects them where the reports arrive: in this process, or under xdist in the controller, which prints the
    summary (the worker that built a report keeps a list too, which nothing prints)."""

    def __init__(self, settings: ChaosSettings) -> None:
        self.settings = settings

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        command = getattr(report, _REPLAY_ATTR, None)
        if isinstance(command, str):
            self.settings.commands.append((report.nodeid, command))

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if not self.settings.commands:
            return
        terminalreporter.section("chaos replay")
        for _, command in self.settings.commands:
            terminalreporter.write_line(command)


@pytest.fixture
def sandbox_fusion_url(sandbox_emulator: EmulatorServer) -> str:
    return sandbox_emulator.run_code_url


def _daytona_sdk(fixture: str) -> Any:
    """The ``daytona`` SDK, or this test's failure saying which extra to install (not a bare ModuleNotFoundError
    from inside the plugin)."""
    try:
        import daytona
    except ImportError as exc:
        if (exc.name or "").split(".")[0] != "daytona":
            raise  # installed but broken: its own error says more
    else:
        return daytona
    pytest.fail(  # out of the except block: the message alone, not chained to the ImportError
        f"the {fixture} fixture needs the [daytona] extra (daytona is not installed); "
        "install it with: pip install 'sandbox-emulator[daytona]'",
        pytrace=False,
    )


@pytest.fixture
def daytona_config(sandbox_emulator: EmulatorServer) -> Any:
    sdk = _daytona_sdk("daytona_config")
    return sdk.DaytonaConfig(
        api_url=sandbox_emulator.url + "/api", api_key=sandbox_emulator.emulator.config.daytona.api_key
    )


@pytest.fixture
def daytona_client(daytona_config: Any) -> Iterator[Any]:
    client = _daytona_sdk("daytona_client").Daytona(daytona_config)
    try:
        yield client
    finally:
        _shut_down_daytona(client)


def _shut_down_daytona(client: Any) -> None:
    """Stop what a sync ``Daytona`` client starts, which it has no ``close()`` for: its subscription-expiry thread,
    its event socket and its connection pools. A client per test would otherwise leave a thread and a few
    descriptors behind each test, for the rest of the session."""
    close = getattr(client, "close", None)
    if callable(close):  # a later SDK's own
        close()
        return
    manager = getattr(client, "_subscription_manager", None)
    if manager is not None:
        manager.shutdown()
        worker = getattr(manager, "_worker", None)
        if isinstance(worker, threading.Thread) and worker is not threading.current_thread():
            worker.join(5)  # it exits when told; joined, so the thread is gone when the next test starts
    dispatcher = getattr(client, "_event_dispatcher", None)
    if dispatcher is not None:
        dispatcher.disconnect()
    http = getattr(client, "_http_client", None)
    if http is not None:
        http.close()
    for name in ("_api_client", "_toolbox_api_client"):
        pools = getattr(getattr(getattr(client, name, None), "rest_client", None), "pool_manager", None)
        if pools is not None:
            pools.clear()


@pytest.fixture
def daytona_leaks(sandbox_emulator: EmulatorServer) -> SandboxReportView:
    return SandboxReportView(sandbox_emulator.emulator)


class SandboxReportView:
    """A live view of the emulator's Daytona sandbox report (computed from the journal on each access)."""

    def __init__(self, emulator: Emulator) -> None:
        self._emulator = emulator

    @property
    def report(self) -> SandboxReport:
        return self._emulator.daytona_report()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._emulator.daytona_report(), name)


@pytest.fixture
def emulator_journal(sandbox_emulator: EmulatorServer) -> Journal:
    return sandbox_emulator.emulator.journal


__all__ = ["attach_chaos"]
