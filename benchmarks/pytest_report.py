"""A pytest run's outcomes per test module as a result file (``tcemu._results``): passed, failed and skipped
counts from pytest's JUnit XML, with the machine's provenance (GPU, driver, torch, Triton, commit).

    pytest -q -n 6 -m gpu tests --junitxml=/tmp/gpu.xml
    python benchmarks/pytest_report.py /tmp/gpu.xml --out benchmarks/results/h200/tests/gpu_tests.csv

Also prints the failed and skipped tests with their messages' first lines (what the docs cite).
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import xml.etree.ElementTree as ET

from tcemu._results import Provenance, case, measurement, write_results


def outcomes(junit_xml: str) -> tuple[dict[str, collections.Counter], list[tuple[str, str, str]]]:
    """({module: Counter(passed, failed, skipped)}, [(outcome, test id, first line of its message)])."""
    per_module: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    notable = []
    for tc in ET.parse(junit_xml).getroot().iter("testcase"):
        classname = tc.get("classname") or "(collection)"
        head, _, last = classname.rpartition(".")
        module = head if head and last.startswith("Test") else classname  # a test class's tests: its module
        outcome = "passed"
        for tag, name in (("failure", "failed"), ("error", "failed"), ("skipped", "skipped")):
            found = tc.find(tag)
            if found is not None:
                outcome = name
                message = (found.get("message") or found.text or "").strip().splitlines()
                notable.append((name, f"{tc.get('classname')}::{tc.get('name')}", message[0] if message else ""))
                break
        per_module[module][outcome] += 1
    return per_module, notable


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("junit_xml")
    parser.add_argument("--out", required=True, help="the result CSV")
    parser.add_argument("--benchmark", default="pytest -m gpu", help="the run's name in the file")
    parser.add_argument("--provenance", action="append", default=[], metavar="FIELD=VALUE",
                        help="where the XML was written on another machine: its gpu, driver, torch, triton, commit "
                             "or date (repeat), instead of this machine's")
    args = parser.parse_args(argv)
    per_module, notable = outcomes(args.junit_xml)
    rows = []
    for module in sorted(per_module):
        counts = {k: per_module[module][k] for k in ("passed", "failed", "skipped")}
        rows += measurement(args.benchmark, "tcemu", "", case(module=module), counts,
                            {k: "count" for k in counts})
    given = dict(item.split("=", 1) for item in args.provenance)
    unknown = set(given) - set(Provenance.__dataclass_fields__)
    if unknown:
        parser.error(f"--provenance: unknown fields {sorted(unknown)}; use {list(Provenance.__dataclass_fields__)}")
    write_results(args.out, rows, dataclasses.replace(Provenance.current(), **given))
    total = sum(per_module.values(), collections.Counter())
    print(f"{total['passed']} passed, {total['failed']} failed, {total['skipped']} skipped")
    for outcome, test, message in notable:
        print(f"{outcome}: {test}: {message[:300]}")


if __name__ == "__main__":
    main()
