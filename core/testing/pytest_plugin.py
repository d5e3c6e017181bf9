"""The kit as a pytest plugin: ``pytest -p torchkiln.testing --kiln-backend NAME``.

With ``--kiln-backend`` (repeatable) the plugin adds the kit's checks as test items of
their own, so the kit runs from any directory, beside whatever else was collected.
Slow checks carry the ``kiln_slow`` marker and are left out unless an ``-m``
expression names it or ``--kiln-all`` is given; so are those a backend's suite
parametrizes with ``torchkiln.testing.kit_params``, which are reported too. The report comes at the end of
the terminal summary.
"""

from __future__ import annotations

import pytest

from torchkiln.testing.kit import SLOW_MARKER, Check, checks
from torchkiln.testing.report import Recorder, Report, Result

_REPORT = pytest.StashKey[Report]()
_NOTES = pytest.StashKey[object]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("torchkiln", "torchkiln conformance kit (torchkiln.testing)")
    group.addoption(
        "--kiln-backend",
        action="append",
        default=[],
        metavar="NAME",
        help="run the conformance kit against this registered backend (repeatable)",
    )
    group.addoption(
        "--kiln-all",
        action="store_true",
        help=f"run the slow checks ({SLOW_MARKER}) as well as the fast ones",
    )
    group.addoption(
        "--kiln-xfail",
        action="append",
        default=[],
        metavar="CHECK=REASON",
        help="a check known to fail and why, e.g. 'ops/cat=no converter yet' (repeatable)",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{SLOW_MARKER}: a slow check of the torchkiln conformance kit "
        f"(run with -m {SLOW_MARKER} or --kiln-all)",
    )
    config.stash[_REPORT] = Report()


class KitItem(pytest.Item):
    """One check of the kit, run as a test."""

    def __init__(self, *, check: Check, **kwargs) -> None:
        super().__init__(**kwargs)
        self.check = check

    def runtest(self) -> None:
        self.check.run()

    def reportinfo(self):
        return "torchkiln.testing", None, f"{self.check}: {self.check.doc}"


class KitCollector(pytest.Collector):
    """The checks of one backend, under the node ``torchkiln-kit[NAME]``."""

    def __init__(self, *, backend: str, xfail: dict[str, str], **kwargs) -> None:
        super().__init__(**kwargs)
        self.backend = backend
        self.xfail = xfail

    def collect(self) -> list[KitItem]:
        found = checks(self.backend)
        unknown = sorted(set(self.xfail) - {c.id for c in found})
        if unknown:
            raise pytest.UsageError(
                f"--kiln-xfail names checks the kit does not have: {unknown}; "
                "use the ids the report lists, e.g. 'ops/cat'"
            )
        items = []
        for check in found:
            item = KitItem.from_parent(self, name=check.id, check=check)
            if check.slow:
                item.add_marker(SLOW_MARKER)
            if check.id in self.xfail:
                item.add_marker(pytest.mark.xfail(reason=self.xfail[check.id], strict=True))
            items.append(item)
        return items


def _xfails(config: pytest.Config) -> dict[str, str]:
    xfail = {}
    for entry in config.getoption("kiln_xfail"):
        check, sep, reason = entry.partition("=")
        if not sep or not reason.strip():
            raise pytest.UsageError(
                f"--kiln-xfail {entry!r}: give the check and why, e.g. 'ops/cat=no converter yet'"
            )
        xfail[check.strip()] = reason.strip()
    return xfail


@pytest.hookimpl(tryfirst=True)  # before -m and -k select among the items
def pytest_collection_modifyitems(
    session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
) -> None:
    backends = config.getoption("kiln_backend")
    if config.getoption("kiln_xfail") and not backends:
        raise pytest.UsageError("--kiln-xfail needs --kiln-backend NAME")
    xfail = _xfails(config)
    for backend in backends:
        try:
            collector = KitCollector.from_parent(
                session, name=f"torchkiln-kit[{backend}]", backend=backend, xfail=xfail
            )
            items += collector.collect()
        except pytest.UsageError:
            raise
        except Exception as e:  # unknown or unusable backend: say so, run nothing
            raise pytest.UsageError(f"--kiln-backend {backend}: {e}") from e
    if config.getoption("kiln_all") or SLOW_MARKER in (config.option.markexpr or ""):
        return
    slow = [i for i in items if _check_of(i) is not None and i.get_closest_marker(SLOW_MARKER)]
    if slow:
        chosen = set(slow)
        items[:] = [i for i in items if i not in chosen]
        config.hook.pytest_deselected(items=slow)
        for item in slow:
            config.stash[_REPORT].not_run[_check_of(item).backend] += 1


def _check_of(item: pytest.Item) -> Check | None:
    if isinstance(item, KitItem):
        return item.check
    params = getattr(getattr(item, "callspec", None), "params", {})
    return next((v for v in params.values() if isinstance(v, Check)), None)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item):
    check = _check_of(item)
    if check is None:
        return (yield)
    recorder = Recorder(check.backend)
    with recorder:
        try:
            return (yield)
        finally:
            item.stash[_NOTES] = recorder.notes


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    report = yield
    check = _check_of(item)
    if check is None or not (
        report.when == "call" or (report.when == "setup" and not report.passed)
    ):
        return report
    xfail = getattr(report, "wasxfail", None)
    if report.failed:
        outcome, message = "failed", call.excinfo.exconly().strip().splitlines()[0][:240]
    elif xfail is not None:
        outcome, message = ("xfailed" if report.skipped else "xpassed"), xfail
    elif report.skipped:
        outcome, message = (
            "skipped",
            str(report.longrepr[2]) if isinstance(report.longrepr, tuple) else "",
        )
    else:
        outcome, message = "passed", ""
    item.config.stash[_REPORT].add(
        Result(
            check, outcome, message, item.stash.get(_NOTES, None) or Recorder(check.backend).notes
        )
    )
    return report


def pytest_terminal_summary(terminalreporter, config: pytest.Config) -> None:
    lines = config.stash[_REPORT].lines()
    if lines and not config.option.collectonly:
        terminalreporter.write_sep("=", "torchkiln conformance report")
        for line in lines:
            terminalreporter.write_line(line)
