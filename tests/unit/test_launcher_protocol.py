"""The watchdog's line protocol (tritonprep.launcher.protocol), the instances' reports (tritonprep.reports) and
the log filter of a machine without a GPU (tritonprep.launcher.logfilter): each message as both ends write and
parse it."""

from __future__ import annotations

import io
import json
import os

import pytest

from tritonprep import reports
from tritonprep.errors import ServerError
from tritonprep.launcher import logfilter
from tritonprep.launcher.protocol import (
    Cleaned,
    Error,
    Exited,
    LineBuffer,
    Mps,
    Released,
    Started,
    Stop,
    parse_command,
    parse_report,
)

REPORTS = [
    Mps(True, "/tmp/tritonprep-server-1-2-3-x/mps/pipe"),
    Mps(False, "nvidia-cuda-mps-control is not installed (it comes with the NVIDIA driver's utilities)"),
    Started(4242, "tritonprep_4026531836_4241_987_"),
    Exited(0),
    Exited(-9),
    Released(),
    Cleaned(),
    Cleaned((17, 18), 2, "killed"),
    Error("MPS cannot start: GPU 0 is in compute mode Prohibited"),
]


@pytest.mark.parametrize("message", REPORTS, ids=lambda m: m.encode())
def test_every_report_reads_back_as_written(message):
    line = message.encode()
    assert "\n" not in line
    assert parse_report(line) == message


def test_the_stop_command_and_what_is_not_one():
    assert Stop(2.5).encode() == "stop 2.5" and parse_command("stop 2.5") == Stop(2.5)
    assert parse_command(Stop(40).encode()) == Stop(40.0)
    assert Stop(0.5, True).encode() == "stop 0.5 mps-fault" and parse_command("stop 0.5 mps-fault") == Stop(0.5, True)
    for bad in ("stop", "stop soon", "stop -1", "halt 3", "stop 1 now", "stop 1 mps-fault x", ""):
        with pytest.raises(ServerError, match="watchdog protocol"):
            parse_command(bad)
    for bad in ("started x y", "exited", "cleaned 1,2", "mps maybe x", "released 3", "hello"):
        with pytest.raises(ServerError, match="watchdog protocol"):
            parse_report(bad)


def test_a_clean_stop_is_one_where_nothing_was_killed():
    assert Cleaned().encode() == "cleaned - 0 none" and Cleaned().nothing_killed
    assert Cleaned((), 3, "quit").nothing_killed  # regions removed: the stubs' own, not processes
    assert not Cleaned((5,), 0, "quit").nothing_killed and not Cleaned((), 0, "killed").nothing_killed


def test_free_text_stays_on_one_line():
    assert parse_report(Error("two\nlines\tand  spaces").encode()) == Error("two lines and spaces")


def test_lines_arrive_in_pieces():
    buffer = LineBuffer()
    assert buffer.feed(b"started 12 tritonprep_1_2_3_\nexi") == ["started 12 tritonprep_1_2_3_"]
    assert buffer.feed(b"ted 0\n\ncleaned - 0 quit\n") == ["exited 0", "cleaned - 0 quit"]


# ---------------------------------------------------------------------- reports
def test_reports_are_a_no_op_without_the_variable(monkeypatch):
    monkeypatch.delenv(reports.ENV, raising=False)
    assert reports.write_instance("preprocess", "preprocess_0_0", "CPU") is None
    assert reports.write_fault("CUDA error on GPU 0: illegal address") is None


def test_instance_and_fault_reports_round_trip(tmp_path, monkeypatch):
    monkeypatch.setenv(reports.ENV, str(tmp_path))
    path = reports.write_instance(
        "classifier",
        "classifier_0_1",
        "GPU",
        device=1,
        runtime="onnxruntime-cuda",
        buckets=(1, 8, 32, 64),
        gpu_memory_mb=1600,
        timings={"load": 2.5},
    )
    assert path == tmp_path / "instances" / "classifier_0_1.json"
    [report] = reports.read_instances(tmp_path)
    assert report == reports.InstanceReport(
        "classifier", "classifier_0_1", os.getpid(), "GPU", 1, "onnxruntime-cuda", (1, 8, 32, 64), 1600, {"load": 2.5}
    )
    reason = "CUDA error cudaErrorIllegalAddress on GPU 3 in preprocess: an illegal memory access was encountered"
    assert reports.write_fault(reason) == tmp_path / "faults" / f"{os.getpid()}.json"
    [fault] = reports.read_faults(tmp_path)
    assert (fault.instance, fault.sticky_cuda, fault.device, fault.pid) == ("classifier_0_1", True, 3, os.getpid())
    assert fault.reason == reason


@pytest.mark.parametrize(
    ("reason", "expected"),
    [
        ("CUDA error on GPU 0: illegal address; this process's CUDA context is unusable", (True, 0)),
        ("CUDA error cudaErrorLaunchFailure on GPU 2 in classifier: unspecified launch failure", (True, 2)),
        ("injected fault: unrecoverable device error", (False, None)),
    ],
)
def test_a_fault_is_described_by_its_reason(reason, expected):
    assert reports.describe_fault(reason) == expected


def test_unreadable_reports_are_skipped(tmp_path):
    (tmp_path / "faults").mkdir()
    (tmp_path / "faults" / "1.json").write_text("{not json")
    (tmp_path / "faults" / "2.json").write_text(json.dumps({"what": "else"}))
    assert reports.read_faults(tmp_path) == []


# ---------------------------------------------------------------------- the log filter
PROBES = [
    b'E1125 10:59:58.778878 18740 server.cc:241] "CudaDriverHelper has not been initialized."\n',
    b'E1125 11:00:03.225237 18740 ensemble_scheduler.cc:1468] "unable to create stream for embed: CUDA driver '
    b'version is insufficient for CUDA runtime version"\n',
    b'E1125 11:00:03.225237 18740 ensemble_scheduler.cc:1468] "unable to create stream for classify: no '
    b'CUDA-capable device is detected"\n',
]
KEPT = [
    b'I1125 11:00:03.226880 18740 server.cc:674] "| classify | 1 | READY |"\n',
    b'E1125 11:00:03.225237 18740 ensemble_scheduler.cc:1468] "unable to create stream for embed: out of memory"\n',
    b"E1125 11:00:03.225237 18740 model_lifecycle.cc:654] \"failed to load 'classifier'\"\n",
    b"CudaDriverHelper has not been initialized. (a model's own line)\n",
]


def test_the_log_filter_leaves_out_only_the_failed_cuda_probes():
    sink = io.BytesIO()
    assert logfilter.run(io.BytesIO(b"".join([KEPT[0], *PROBES, *KEPT[1:]])), sink) == len(PROBES)
    lines = sink.getvalue().splitlines(keepends=True)
    assert lines[0] == KEPT[0]
    assert b"tritonprep logfilter: no GPU here: leaving out Triton's failed CUDA probes" in lines[1]
    assert lines[2:] == KEPT[1:]
